// Shamir sharing over GF(2^61 - 1): any t shares rebuild the secret, fewer do not.

#include "secagg/shamir.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace fedcase::secagg {
namespace {

TEST_CASE("any t of n shares rebuild the secret; t - 1 do not") {
  std::mt19937_64 rng(5);
  for (auto [threshold, shares_count] :
       {std::pair<uint32_t, uint32_t>{1, 1}, {2, 3}, {3, 5}, {6, 9}, {20, 31}}) {
    const uint32_t t = threshold, n = shares_count;
    CAPTURE(t);
    CAPTURE(n);
    Bytes32 secret{};
    for (auto& b : secret) b = uint8_t(rng());
    secret[31] = 0xff;  // the last, short chunk at its largest
    std::vector<uint32_t> xs(n);
    std::iota(xs.begin(), xs.end(), 1);
    std::shuffle(xs.begin(), xs.end(), rng);  // any indices, in any order
    Result<std::vector<ShamirShare>> shares = shamir_split(secret, t, xs);
    REQUIRE(shares.ok());
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<ShamirShare> subset = *shares;
      std::shuffle(subset.begin(), subset.end(), rng);
      subset.resize(t);
      Result<Bytes32> back = shamir_combine(subset, t);
      REQUIRE(back.ok());
      CHECK(*back == secret);
      if (t > 1) {
        subset.pop_back();
        // Below the threshold: refused, and interpolating as if t - 1 sufficed gives garbage.
        CHECK(shamir_combine(subset, t).status().code() == Code::kInvalidArgument);
        Result<Bytes32> wrong = shamir_combine(subset, t - 1);
        CHECK((!wrong.ok() || *wrong != secret));
      }
    }
  }
}

TEST_CASE("shares travel as 44 bytes and bad ones are refused") {
  Bytes32 secret{};
  secret.fill(7);
  Result<std::vector<ShamirShare>> shares = shamir_split(secret, 2, {4, 9, 11});
  REQUIRE(shares.ok());
  for (const ShamirShare& s : *shares) {
    const std::string bytes = encode_share(s);
    CHECK(bytes.size() == kShareBytes);
    Result<ShamirShare> back = decode_share(bytes);
    REQUIRE(back.ok());
    CHECK(back->x == s.x);
    CHECK(back->y == s.y);
  }
  CHECK_FALSE(decode_share(std::string(kShareBytes - 1, '\0')).ok());
  CHECK_FALSE(decode_share(std::string(kShareBytes, '\0')).ok());    // x = 0
  CHECK_FALSE(decode_share(std::string(kShareBytes, '\xff')).ok());  // y >= p
  // Repeated x coordinates or a tampered y.
  std::vector<ShamirShare> twice = {(*shares)[0], (*shares)[0]};
  CHECK_FALSE(shamir_combine(twice, 2).ok());
  std::vector<ShamirShare> tampered = {(*shares)[0], (*shares)[1]};
  tampered[1].y[2] ^= 1;
  Result<Bytes32> bad = shamir_combine(tampered, 2);
  CHECK((!bad.ok() || *bad != secret));
  CHECK_FALSE(shamir_split(secret, 0, {1, 2}).ok());
  CHECK_FALSE(shamir_split(secret, 3, {1, 2}).ok());
  CHECK_FALSE(shamir_split(secret, 1, {0, 2}).ok());
  CHECK_FALSE(shamir_split(secret, 1, {2, 2}).ok());
}

}  // namespace
}  // namespace fedcase::secagg
