// Shamir sharing over GF(2^61 - 1): any t shares rebuild the secret, fewer do not.

#include "secagg/shamir.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>

namespace fedcase::secagg {
namespace {

// The secret of the first `threshold` of `shares`: shamir_recover taking any secret.
Result<Bytes32> first_secret(const std::vector<ShamirShare>& shares, uint32_t threshold) {
  Result<Recovered> found = shamir_recover(shares, threshold, [](const Bytes32&) { return true; });
  if (!found.ok()) return found.status();
  return found->secret;
}

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
      Result<Bytes32> back = first_secret(subset, t);
      REQUIRE(back.ok());
      CHECK(*back == secret);
      if (t > 1) {
        subset.pop_back();
        // Below the threshold: refused, and interpolating as if t - 1 sufficed gives garbage.
        CHECK(first_secret(subset, t).status().code() == Code::kInvalidArgument);
        Result<Bytes32> wrong = first_secret(subset, t - 1);
        CHECK((!wrong.ok() || *wrong != secret));
      }
    }
  }
}

TEST_CASE("wrong shares among more than t are outvoted by the commitment and named") {
  std::mt19937_64 rng(11);
  Bytes32 secret{};
  for (auto& b : secret) b = uint8_t(rng());
  std::vector<uint32_t> xs(9);
  std::iota(xs.begin(), xs.end(), 1);
  Result<std::vector<ShamirShare>> split = shamir_split(secret, 6, xs);
  REQUIRE(split.ok());
  std::vector<ShamirShare> shares = *split;
  shares[0].y[1] = (shares[0].y[1] + 5) % kShamirPrime;  // the first: first_secret uses it
  shares[4].y[4] = (shares[4].y[4] + 1) % kShamirPrime;
  auto is_secret = [&](const Bytes32& s) { return s == secret; };
  CHECK((!first_secret(shares, 6).ok() || *first_secret(shares, 6) != secret));
  Result<Recovered> found = shamir_recover(shares, 6, is_secret);
  REQUIRE_MESSAGE(found.ok(), found.status().to_string());
  CHECK(found->secret == secret);
  CHECK(found->wrong == std::vector<size_t>{0, 4});
  // Four wrong of nine leave five right ones, below t = 6: nothing matches.
  shares[6].y[0] = (shares[6].y[0] + 1) % kShamirPrime;
  shares[8].y[0] = (shares[8].y[0] + 1) % kShamirPrime;
  CHECK(shamir_recover(shares, 6, is_secret).status().code() == Code::kInvalidArgument);
  // A bound on the tries is kept.
  CHECK(shamir_recover(shares, 6, is_secret, 3).status().message().find("within 3 tries") !=
        std::string::npos);
  // Too few shares, or a repeated x, are refused as by first_secret.
  CHECK(shamir_recover({shares[1], shares[2]}, 6, is_secret).status().code() ==
        Code::kInvalidArgument);
  CHECK(shamir_recover({shares[1], shares[1], shares[2], shares[3], shares[5], shares[7]}, 6,
                       is_secret)
            .status()
            .code() == Code::kInvalidArgument);
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
  CHECK_FALSE(first_secret(twice, 2).ok());
  std::vector<ShamirShare> tampered = {(*shares)[0], (*shares)[1]};
  tampered[1].y[2] ^= 1;
  Result<Bytes32> bad = first_secret(tampered, 2);
  CHECK((!bad.ok() || *bad != secret));
  CHECK_FALSE(shamir_split(secret, 0, {1, 2}).ok());
  CHECK_FALSE(shamir_split(secret, 3, {1, 2}).ok());
  CHECK_FALSE(shamir_split(secret, 1, {0, 2}).ok());
  CHECK_FALSE(shamir_split(secret, 1, {2, 2}).ok());
}

}  // namespace
}  // namespace fedcase::secagg
