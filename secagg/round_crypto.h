#pragma once
// What both sides of a round derive the same way (docs/secure_aggregation.md, "Keys and
// binding"): the key that encrypts the shares one client sends another, the pairwise mask
// seed two neighbours agree, the commitment to a self-mask seed, and the streams that add or
// remove masks. Every derivation is bound to (job, round) and to the clients involved, so
// nothing of one round or pair is accepted in another.
//
// Pure functions over values; thread-safe (apply_streams runs its own threads and returns when
// they are done).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "aggregation/worker_pool.h"
#include "common/ids.h"
#include "common/status.h"
#include "secagg/crypto.h"
#include "secagg/prg.h"
#include "secagg/shamir.h"

namespace fedcase::secagg {

// A share ciphertext seals the recipient's share of the sender's self-mask seed, then its
// share of the sender's mask key.
inline constexpr size_t kSharePlaintextBytes = 2 * kShareBytes;
inline constexpr size_t kShareCiphertextBytes = kSharePlaintextBytes + kAeadOverhead;

// What a client signs with its long-term key when it advertises its round keys (docs/
// secure_aggregation.md, "Signed keys"): the keys bound to the job, round and client.
std::string advertised_keys_message(JobId job, RoundIndex round, ClientId client,
                                    std::string_view cipher_public_key,
                                    std::string_view mask_public_key);
// Whether `keys` carry their client's signature under `signing_public_key`: OK or
// kPermissionDenied naming the client.
Status check_keys_signature(JobId job, RoundIndex round, ClientId client,
                            std::string_view cipher_public_key, std::string_view mask_public_key,
                            std::string_view signing_public_key, std::string_view signature);

// The AEAD's associated data of a share from `sender` to `receiver`.
std::string share_associated_data(JobId job, RoundIndex round, ClientId sender, ClientId receiver);
// The AES-256-GCM key of the shares `sender` sends `receiver`: HKDF of their cipher keys'
// X25519 secret, bound to the direction (each key seals one message).
Result<Bytes32> share_key(const X25519Key& own_cipher_key, const Bytes32& peer_cipher_public,
                          JobId job, RoundIndex round, ClientId sender, ClientId receiver);
// The pairwise mask seed of clients a and b (either order gives the same seed): HKDF of their
// mask keys' X25519 secret.
Result<Bytes32> pairwise_seed(const X25519Key& own_mask_key, const Bytes32& peer_mask_public,
                              JobId job, RoundIndex round, ClientId a, ClientId b);
// SHA-256 of the self-mask seed, bound to the client and round (reveals nothing of a random
// 256-bit seed; lets the coordinator check a reconstruction).
Bytes32 seed_commitment(JobId job, RoundIndex round, ClientId client, const Bytes32& seed);
// Client `self` adds the pairwise mask of a neighbour with a larger id, subtracts the other.
inline PrgExpander::Op pairwise_op(ClientId self, ClientId peer) {
  return self < peer ? PrgExpander::Op::kAdd : PrgExpander::Op::kSubtract;
}

struct MaskStream {
  PrgKey key;
  PrgExpander::Op op = PrgExpander::Op::kAdd;
};

// acc[i] op= word i of every stream, for i < length (mod 2^64). The vector is cut into one
// range per thread of `pool` (aggregation/worker_pool.h: one caller at a time), each walked in
// cache-sized chunks that every stream is applied to in turn: each stream is expanded once, no
// stream is ever held whole.
Status apply_streams(const std::vector<MaskStream>& streams, size_t length, size_t word_bytes,
                     aggregation::WorkerPool& pool, uint64_t* acc);
// The same with 4-byte words into 32-bit accumulators (mod 2^32).
Status apply_streams(const std::vector<MaskStream>& streams, size_t length,
                     aggregation::WorkerPool& pool, uint32_t* acc);

// Runs body(begin, end) over contiguous ranges of [0, n) on `pool`'s threads (ranges of at
// least aggregation::kMinParallelRange) and returns the first error.
Status for_ranges(aggregation::WorkerPool& pool, size_t n,
                  const std::function<Status(size_t, size_t)>& body);

}  // namespace fedcase::secagg
