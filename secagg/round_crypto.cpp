#include "secagg/round_crypto.h"

#include <algorithm>

#include "aggregation/vector_ops.h"

namespace fedcase::secagg {
namespace {

constexpr size_t kChunkWords = 16 * 1024;  // 128 KiB of accumulator: stays in L2 per stream

std::string binding(const char* domain, JobId job, RoundIndex round, ClientId a, ClientId b) {
  std::string out(domain);
  out += '\0';
  append_u64(out, job);
  append_u64(out, round);
  append_u64(out, a);
  append_u64(out, b);
  return out;
}

}  // namespace

std::string advertised_keys_message(JobId job, RoundIndex round, ClientId client,
                                    std::string_view cipher_public_key,
                                    std::string_view mask_public_key) {
  std::string out = binding("fedcase/secagg/keys", job, round, client, 0);
  out.append(cipher_public_key);
  out.append(mask_public_key);
  return out;
}

Status check_keys_signature(JobId job, RoundIndex round, ClientId client,
                            std::string_view cipher_public_key, std::string_view mask_public_key,
                            std::string_view signing_public_key, std::string_view signature) {
  const Status verified = verify_signature(
      signing_public_key,
      advertised_keys_message(job, round, client, cipher_public_key, mask_public_key), signature);
  if (verified.ok()) return verified;
  return permission_denied("the keys of client " + std::to_string(client) +
                           " do not carry its signature (" + verified.message() +
                           "): they were changed on their way");
}

std::string share_associated_data(JobId job, RoundIndex round, ClientId sender, ClientId receiver) {
  return binding("fedcase/secagg/share", job, round, sender, receiver);
}

Result<Bytes32> share_key(const X25519Key& own_cipher_key, const Bytes32& peer_cipher_public,
                          JobId job, RoundIndex round, ClientId sender, ClientId receiver) {
  Result<Bytes32> secret = own_cipher_key.agree(peer_cipher_public);
  if (!secret.ok()) return secret.status();
  return derive_key(*secret, binding("fedcase/secagg/share-key", job, round, sender, receiver));
}

Result<Bytes32> pairwise_seed(const X25519Key& own_mask_key, const Bytes32& peer_mask_public,
                              JobId job, RoundIndex round, ClientId a, ClientId b) {
  Result<Bytes32> secret = own_mask_key.agree(peer_mask_public);
  if (!secret.ok()) return secret.status();
  return derive_key(*secret,
                    binding("fedcase/secagg/mask", job, round, std::min(a, b), std::max(a, b)));
}

Bytes32 seed_commitment(JobId job, RoundIndex round, ClientId client, const Bytes32& seed) {
  std::string data = binding("fedcase/secagg/seed", job, round, client, 0);
  data.append(as_view(seed));
  return sha256(data);
}

Status for_ranges(aggregation::WorkerPool& pool, size_t n,
                  const std::function<Status(size_t, size_t)>& body) {
  std::vector<Status> results(pool.threads());
  pool.for_ranges(n, aggregation::kMinParallelRange,
                  [&](size_t part, size_t begin, size_t end) { results[part] = body(begin, end); });
  for (Status& s : results) {
    if (!s.ok()) return s;
  }
  return ok_status();
}

namespace {

template <class Acc>
Status apply_streams_to(const std::vector<MaskStream>& streams, size_t length, size_t word_bytes,
                        aggregation::WorkerPool& pool, Acc* acc) {
  return for_ranges(pool, length, [&](size_t begin, size_t end) -> Status {
    PrgExpander expander;
    for (size_t chunk = begin; chunk < end; chunk += kChunkWords) {
      const size_t count = std::min(kChunkWords, end - chunk);
      for (const MaskStream& s : streams) {
        if constexpr (sizeof(Acc) == 4) {
          FEDCASE_RETURN_IF_ERROR(expander.apply(s.key, chunk, count, s.op, acc + chunk));
        } else {
          FEDCASE_RETURN_IF_ERROR(
              expander.apply(s.key, chunk, count, word_bytes, s.op, acc + chunk));
        }
      }
    }
    return ok_status();
  });
}

}  // namespace

Status apply_streams(const std::vector<MaskStream>& streams, size_t length, size_t word_bytes,
                     aggregation::WorkerPool& pool, uint64_t* acc) {
  return apply_streams_to(streams, length, word_bytes, pool, acc);
}

Status apply_streams(const std::vector<MaskStream>& streams, size_t length,
                     aggregation::WorkerPool& pool, uint32_t* acc) {
  return apply_streams_to(streams, length, 4, pool, acc);
}

}  // namespace fedcase::secagg
