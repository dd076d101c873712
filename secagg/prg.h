#pragma once
// The masks' pseudo-random generator: a 32-byte seed expands into a stream of words, word w of
// the stream being bytes [w * word_bytes, (w + 1) * word_bytes) of AES-128-CTR keystream
// (OpenSSL) under the key HKDF-SHA256(seed, "fedcase/secagg/prg"), counter blocks numbered
// from 0. A word of 4 or 8 bytes is uniform mod 2^32 or 2^64, so its low `bits` bits are
// uniform mod 2^bits for every bits up to the word size. Any range of the stream can be
// produced on its own (counter mode seeks), which is how callers stream and split the work.
//
// Thread safety: a PrgKey is an immutable value; a PrgExpander is used by one thread at a
// time (it owns an OpenSSL cipher context and a keystream buffer). Errors are Status values.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/status.h"
#include "secagg/crypto.h"

namespace fedcase::secagg {

// The AES key that a seed expands under (derived once per seed).
struct PrgKey {
  std::array<uint8_t, 16> key{};
};
Result<PrgKey> prg_key(const Bytes32& seed);

class PrgExpander {
 public:
  PrgExpander();
  ~PrgExpander();
  PrgExpander(const PrgExpander&) = delete;
  PrgExpander& operator=(const PrgExpander&) = delete;

  // What each word of the stream does to acc[i] (words offset + i for i < count).
  enum class Op { kAdd, kSubtract, kStore };
  // Adds, subtracts or stores the words [offset, offset + count) of `key`'s stream into `acc`,
  // mod 2^64 (callers reduce mod 2^bits once, at the end). `word_bytes` is 4 or 8.
  Status apply(const PrgKey& key, uint64_t offset, size_t count, size_t word_bytes, Op op,
               uint64_t* acc);
  // The same with 4-byte words into 32-bit accumulators (mod 2^32): for bits <= 32, half the
  // memory traffic.
  Status apply(const PrgKey& key, uint64_t offset, size_t count, Op op, uint32_t* acc);

 private:
  template <class Acc>
  Status apply_to(const PrgKey& key, uint64_t offset, size_t count, size_t word_bytes, Op op,
                  Acc* acc);

  struct Context;
  std::unique_ptr<Context> ctx_;
  std::vector<uint8_t> zeros_;
  std::vector<uint8_t> stream_;
};

}  // namespace fedcase::secagg
