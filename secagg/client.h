#pragma once
// A client's side of one secure-aggregation round (SecAgg+, docs/secure_aggregation.md): one
// state per stage, each taking the coordinator's message of its stage and giving the client's
// answer.
//
//   stage            input                                       output
//   kAdvertiseKeys   (nothing)                                   SecAggAdvertiseKeys
//   kShareKeys       SecAggGraph and SecAggKeyList               SecAggShares
//   kMaskedInput     SecAggForwardedShares, the delta, weight    SecAggMaskedVector
//   kUnmask          SecAggUnmaskRequest (one or more)           SecAggUnmaskResponse
//
// A call that succeeds moves to the next stage (kUnmask stays: a request may be repeated). A
// call that fails changes nothing: kConflict for a call out of stage; kInvalidArgument or
// kPermissionDenied for a message that is malformed, of another job or round, inconsistent
// with the graph its seed draws, or that asks for both shares of one neighbour (now or across
// requests: for a neighbour that sent its masked input the client reveals only the share of
// its self-mask seed, for one that dropped only the share of its mask key); kUnprocessable
// for a delta of the wrong length or with a non-finite value.
//
// Thread safety: not thread-safe; one SDK session drives one SecAggClient (per task).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "common/ids.h"
#include "common/status.h"
#include "protocol/secagg.h"
#include "secagg/crypto.h"

namespace fedcase::secagg {

// The masked vector: its header and its body (header.words little-endian words of
// header.word_bytes bytes).
struct SecAggMaskedVector {
  protocol::SecAggMaskedInput header;
  std::string body;
};

class ClientState;

class SecAggClient {
 public:
  enum class Stage { kAdvertiseKeys, kShareKeys, kMaskedInput, kUnmask };

  // `signing_key` is the client's long-term Ed25519 private key (generate_signing_key), whose
  // public key it registered; `threads` (>= 1) split the masking of the vector.
  SecAggClient(JobId job, RoundIndex round, ClientId self, const Bytes32& signing_key,
               size_t threads = 1);
  ~SecAggClient();
  SecAggClient(const SecAggClient&) = delete;
  SecAggClient& operator=(const SecAggClient&) = delete;

  Stage stage() const;

  // Draws the round's two X25519 key pairs (one for the share cipher, one for the masks) and
  // signs them with the client's long-term key.
  Result<protocol::SecAggAdvertiseKeys> advertise_keys();

  // Checks the graph and the key list (job, round, parameters, that the key list's neighbours
  // are the ones the graph's seed draws over its participants, that each neighbour's keys carry
  // its signature under the signing key listed: kPermissionDenied, nothing shared, otherwise),
  // draws the self-mask seed,
  // splits it and the mask key t of k, and encrypts each neighbour's pair of shares to it.
  Result<protocol::SecAggShares> share_keys(const protocol::SecAggGraph& graph,
                                            const protocol::SecAggKeyList& keys);

  // Decrypts the shares forwarded from the neighbours that completed the share stage (at
  // least `threshold` of them), and masks the update with its self mask and one pairwise mask
  // per such neighbour: delta (params.vector_length floats) clipped to L2 norm params.clip,
  // times weight / max_weight (weight is clipped to [0, max_weight]) and times `factor` (a
  // ready cohort's staleness factor s(tau) in (0, 1], which scales the values but not the
  // weight; 1 in a synchronous round), quantised, then the weight. kInvalidArgument for a
  // factor outside (0, 1]. A neighbour whose share does not decrypt is named in refused_shares
  // and left out of the pairwise masks (the coordinator keeps such a pair out of the sum
  // together).
  Result<SecAggMaskedVector> mask_input(const protocol::SecAggForwardedShares& shares,
                                        const float* delta, size_t count, uint64_t weight,
                                        double factor);

  // The shares the coordinator asks for: the self-mask seed share of each survivor, the mask
  // key share of each dropped neighbour; refused (nothing revealed) if any asked-for client is
  // not a neighbour whose shares it holds, or is asked for with both kinds.
  Result<protocol::SecAggUnmaskResponse> unmask(const protocol::SecAggUnmaskRequest& request);

 private:
  std::unique_ptr<ClientState> state_;
};

}  // namespace fedcase::secagg
