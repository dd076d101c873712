// The primitives behind secagg/crypto.h and secagg/prg.h: X25519 agreement, HKDF, AES-GCM and
// the AES-CTR mask stream, each against what its contract promises.

#include <doctest/doctest.h>

#include <vector>

#include "secagg/crypto.h"
#include "secagg/prg.h"
#include "secagg/round_crypto.h"

namespace fedcase::secagg {
namespace {

Bytes32 seed_of(uint8_t fill) {
  Bytes32 s{};
  s.fill(fill);
  return s;
}

TEST_CASE("X25519: both sides agree the same secret; a third party's differs") {
  Result<KeyPair> a = generate_key_pair(), b = generate_key_pair(), c = generate_key_pair();
  REQUIRE((a.ok() && b.ok() && c.ok()));
  Result<Bytes32> ab = agree(a->private_key, b->public_key);
  Result<Bytes32> ba = agree(b->private_key, a->public_key);
  Result<Bytes32> ac = agree(a->private_key, c->public_key);
  REQUIRE((ab.ok() && ba.ok() && ac.ok()));
  CHECK(*ab == *ba);
  CHECK(*ab != *ac);
  CHECK(*public_key_of(a->private_key) == a->public_key);
  // The identity point (u = 0) is of low order: no agreement with it.
  CHECK(agree(a->private_key, Bytes32{}).status().code() == Code::kInvalidArgument);
}

TEST_CASE("pairwise seeds are symmetric and bound to the round; share keys to the direction") {
  Result<KeyPair> a = generate_key_pair(), b = generate_key_pair();
  REQUIRE((a.ok() && b.ok()));
  const X25519Key ka = *X25519Key::load(a->private_key), kb = *X25519Key::load(b->private_key);
  const Bytes32 ab = *pairwise_seed(ka, b->public_key, 1, 2, 10, 20);
  CHECK(ab == *pairwise_seed(kb, a->public_key, 1, 2, 20, 10));
  CHECK(ab != *pairwise_seed(ka, b->public_key, 1, 3, 10, 20));
  CHECK(ab != *pairwise_seed(ka, b->public_key, 2, 2, 10, 20));
  const Bytes32 to_b = *share_key(ka, b->public_key, 1, 2, 10, 20);
  CHECK(to_b == *share_key(kb, a->public_key, 1, 2, 10, 20));
  CHECK(to_b != *share_key(kb, a->public_key, 1, 2, 20, 10));
}

TEST_CASE("AES-GCM opens what it sealed, and nothing tampered with or bound elsewhere") {
  const Bytes32 key = seed_of(3);
  Result<std::string> sealed = seal(key, "secret shares", "job 1 round 2");
  REQUIRE(sealed.ok());
  CHECK(sealed->size() == 13 + kAeadOverhead);
  CHECK(*open(key, *sealed, "job 1 round 2") == "secret shares");
  CHECK_FALSE(open(key, *sealed, "job 1 round 3").ok());
  CHECK_FALSE(open(seed_of(4), *sealed, "job 1 round 2").ok());
  for (size_t i = 0; i < sealed->size(); ++i) {
    std::string bad = *sealed;
    bad[i] ^= 1;
    CHECK_FALSE(open(key, bad, "job 1 round 2").ok());
  }
  CHECK_FALSE(open(key, sealed->substr(0, 20), "job 1 round 2").ok());
  // A fresh nonce each time: the same plaintext seals differently.
  CHECK(*seal(key, "secret shares", "x") != *seal(key, "secret shares", "x"));
}

TEST_CASE("the mask stream: any range equals that range of the whole stream, both word sizes") {
  const PrgKey key = *prg_key(seed_of(9));
  PrgExpander expander;
  for (size_t word_bytes : {size_t(4), size_t(8)}) {
    CAPTURE(word_bytes);
    const size_t n = 100003;  // not a multiple of any block or buffer size
    std::vector<uint64_t> whole(n, 0);
    REQUIRE(expander.apply(key, 0, n, word_bytes, PrgExpander::Op::kStore, whole.data()).ok());
    for (auto [offset, count] :
         {std::pair<size_t, size_t>{1, 7}, {3, 20000}, {16385, 50000}, {n - 5, 5}}) {
      std::vector<uint64_t> part(count, 10);
      REQUIRE(
          expander.apply(key, offset, count, word_bytes, PrgExpander::Op::kAdd, part.data()).ok());
      for (size_t i = 0; i < count; ++i) REQUIRE(part[i] == whole[offset + i] + 10);
      REQUIRE(
          expander.apply(key, offset, count, word_bytes, PrgExpander::Op::kSubtract, part.data())
              .ok());
      for (size_t i = 0; i < count; ++i) REQUIRE(part[i] == 10);
    }
    if (word_bytes == 4) {
      for (uint64_t w : whole) REQUIRE(w <= UINT32_MAX);
    }
    // Another seed, another stream.
    std::vector<uint64_t> other(n, 0);
    REQUIRE(
        expander
            .apply(*prg_key(seed_of(10)), 0, n, word_bytes, PrgExpander::Op::kStore, other.data())
            .ok());
    size_t equal = 0;
    for (size_t i = 0; i < n; ++i) equal += other[i] == whole[i];
    CHECK(equal < 10);
  }
}

TEST_CASE("apply_streams over threads equals one stream at a time") {
  std::vector<MaskStream> streams = {{*prg_key(seed_of(1)), PrgExpander::Op::kAdd},
                                     {*prg_key(seed_of(2)), PrgExpander::Op::kSubtract},
                                     {*prg_key(seed_of(3)), PrgExpander::Op::kAdd}};
  const size_t n = 170001;
  std::vector<uint64_t> parallel(n, 5), serial(n, 5);
  std::vector<uint32_t> narrow(n, 5);
  aggregation::WorkerPool pool(3);
  REQUIRE(apply_streams(streams, n, 4, pool, parallel.data()).ok());
  REQUIRE(apply_streams(streams, n, pool, narrow.data()).ok());
  PrgExpander expander;
  for (const MaskStream& s : streams) {
    REQUIRE(expander.apply(s.key, 0, n, 4, s.op, serial.data()).ok());
  }
  CHECK(parallel == serial);
  for (size_t i = 0; i < n; ++i) REQUIRE(narrow[i] == uint32_t(serial[i]));  // mod 2^32
}

}  // namespace
}  // namespace fedcase::secagg
