#pragma once
// The stages of a SecAgg+ round on the coordinator (Bell et al. 2020; docs/secure_aggregation.md,
// "The stages"), one class per stage: each validates the messages of its stage, builds the
// messages that open it, and when it closes returns the next stage, made from what it collected
// (the shape of federated-compute's fcp/secagg/server/, one class per server state). What one
// stage knows moves into the next; nothing else holds the protocol's state.
//
//   stage            class         takes                     opens with      close() returns
//   kAdvertiseKeys   KeysStage     SecAggAdvertiseKeys       (the invite)    SharesStage
//   kShareKeys       SharesStage   SecAggShares              graph, key list InputStage
//   kMaskedInput     InputStage    masked inputs, partials   forwarded       UnmaskStage
//   kUnmask          UnmaskStage   SecAggUnmaskResponse      unmask request  finish(): the sum
//
// The owner's SecAggServer (server.h) holds the current stage. A replica that serves another
// replica's round (server/core/secure/secure_copy.h) checks each message's identity with the
// same RoundIdentity, knows the stage it is in from the owner's opening messages it read
// (stage_reached), takes masked inputs with the input stage's own MaskedInputs, and relays the
// other stages' messages to the owner's stages, which make every check that needs the whole
// round.
//
// A receive that fails changes nothing: kConflict for a second message of a stage;
// kPermissionDenied for a sender that is not the message's client, not invited, not (or no
// longer) a participant, or a message of another job or round, or public keys that were used
// before (this round or the earlier rounds the setup lists) or not signed under the sender's
// registered signing key; kInvalidArgument for a malformed message (shares not exactly one per
// neighbour, a ciphertext or share of the wrong size, a low-order public key); the input
// stage's errors are MaskedInputs::check's. A close that finds too few clients left (fewer
// than t to rebuild a secret) returns kConflict with the reason; any error of a close fails the
// round.
//
// Thread safety: a stage is used by one thread at a time (SecAggServer serialises them).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "aggregation/worker_pool.h"
#include "common/ids.h"
#include "common/status.h"
#include "protocol/secagg.h"
#include "secagg/crypto.h"
#include "secagg/graph.h"
#include "secagg/masked_inputs.h"
#include "secagg/round_crypto.h"
#include "secagg/shamir.h"

namespace fedcase::secagg {

enum class Stage : uint8_t { kAdvertiseKeys, kShareKeys, kMaskedInput, kUnmask, kDone, kFailed };
const char* stage_name(Stage stage);  // "advertise_keys", "share_keys", ..., "failed"

// The kinds of stage messages replicas pass through the store (storage::StageMessage): the
// clients' messages, and the owner's message to each client that opens a stage.
namespace stage_kind {
inline constexpr const char* kKeys = "keys";
inline constexpr const char* kShares = "shares";
inline constexpr const char* kUnmask = "unmask";
inline constexpr const char* kKeysReply = "keys_reply";
inline constexpr const char* kForwarded = "forwarded";
inline constexpr const char* kUnmaskRequest = "unmask_request";
}  // namespace stage_kind

// The kind of the clients' messages `stage` takes through the store (kKeys, kShares, kUnmask);
// null for the masked input stage (an input is an upload) and the final stages.
const char* client_kind(Stage stage);
// The kind of the owner's messages that open `stage` (kKeysReply opens kShareKeys, kForwarded
// kMaskedInput, kUnmaskRequest kUnmask); null for the others.
const char* opening_kind(Stage stage);
// The stage a round has reached when `published(kind)` tells which opening messages are out
// (the latest stage whose opening messages are), kAdvertiseKeys when none is.
Stage stage_reached(const std::function<bool(const char* kind)>& published);

// Whom a round's messages may come from.
struct RoundIdentity {
  JobId job = 0;
  RoundIndex round = 0;
  std::set<ClientId> invitees;

  // Whether a message naming client `named`, of `job` and `round`, may come from `sender`:
  // kPermissionDenied unless it names its sender, belongs to this round and its sender is
  // invited.
  Status check(ClientId sender, ClientId named, JobId job, RoundIndex round) const;
};

struct SecAggRoundSetup {
  JobId job = 0;
  RoundIndex round = 1;
  // For the invitees (validate_params): a degree of invitees - 1 asks for the complete graph
  // over whoever advertises keys; any degree is lowered to advertisers - 1 when fewer advertise.
  protocol::SecAggParams params;
  std::vector<ClientId> invitees;  // distinct, at least 2
  Bytes32 graph_seed{};            // the coordinator's draw (random_seed())
  // Public keys advertised in earlier rounds of the job (public_keys() of those rounds): a
  // client that advertises one again is refused.
  std::set<std::string> used_public_keys;
  // Each invitee's registered Ed25519 public key: its advertised keys must carry its signature
  // under it (an invitee without one, absent or "", cannot advertise), and each key list passes
  // it on with the signature so that the recipient checks it too.
  std::map<ClientId, std::string> signing_keys;
  size_t threads = 2;  // for folds and unmasking, >= 1
};

// What a round reveals: the sum, never an individual update.
struct SecAggSum {
  std::vector<float> weighted_sum;  // sum_i w_i * clip(delta_i), vector_length floats
  double total_weight = 0;          // sum_i w_i (each clipped to max_weight)
  std::vector<ClientId> survivors;  // whose masked input is in the sum, increasing
  std::vector<ClientId> dropped;    // shared their keys, no input in the sum, increasing
  // Of the dropped, those whose input arrived but was left out by a refusal conflict, increasing.
  std::vector<ClientId> left_out;
  // Survivors whose unmask answer held a share off its owner's secret (outvoted by the right
  // shares, which reconstructed it), increasing.
  std::vector<ClientId> wrong_shares;

  // weighted_sum / total_weight; kConflict when the total weight is 0.
  Result<std::vector<float>> mean() const;
};

// What every stage of one round reads, fixed when the round is made. The stages keep a
// reference: it must outlive them (SecAggServer owns both).
struct RoundContext {
  SecAggRoundSetup setup;
  RoundIdentity identity;
  X25519Key probe_key;  // checks advertised keys are not low-order points
  uint32_t word_bytes;  // of the masked vectors and the running sum
  size_t max_held;      // max_held_inputs of the setup's degree
  aggregation::WorkerPool& pool;
};

// What the key stage settled, carried by every later stage.
struct KeyedRound {
  struct Keys {
    std::string cipher_public_key;
    std::string mask_public_key;
    std::string signature;  // the client's, over both (advertised_keys_message)
  };
  protocol::SecAggParams params;  // the degree as drawn
  std::map<ClientId, Keys> keys;  // of the participants
  NeighbourGraph graph;           // over the participants
};

// A sharer's message of the share stage, as kept.
struct SharesIn {
  std::string seed_commitment;
  std::map<ClientId, std::string> ciphertexts;  // by recipient
};

class SharesStage;
class InputStage;
class UnmaskStage;

// kAdvertiseKeys: each invitee advertises two public keys, signed under its signing key.
class KeysStage {
 public:
  explicit KeysStage(const RoundContext& round);

  Status receive(ClientId sender, const protocol::SecAggAdvertiseKeys& message);
  // Draws the neighbour graph over the clients that advertised; kConflict when
  // fewer than t + 1 did.
  Result<SharesStage> close() &&;
  // Every public key accepted so far.
  std::set<std::string> public_keys() const;
  size_t memory_bytes() const;

 private:
  const RoundContext* round_;
  std::map<ClientId, KeyedRound::Keys> keys_;
  std::set<std::string> round_keys_;
};

// kShareKeys: each participant sends one encrypted share of its secrets to each neighbour.
class SharesStage {
 public:
  SharesStage(const RoundContext& round, KeyedRound keyed);

  // The messages that open it: the graph, the same for every participant, and the key list of
  // `client` (kPermissionDenied: not a participant).
  protocol::SecAggGraph graph() const;
  Result<protocol::SecAggKeyList> key_list(ClientId client) const;
  const protocol::SecAggParams& params() const { return keyed_.params; }
  std::set<std::string> public_keys() const;

  Status receive(ClientId sender, const protocol::SecAggShares& message);
  // kConflict when fewer than t clients shared.
  Result<InputStage> close() &&;
  size_t memory_bytes() const;

 private:
  const RoundContext* round_;
  KeyedRound keyed_;
  std::map<ClientId, SharesIn> shares_;
};

// kMaskedInput: each sharer sends its masked vector (MaskedInputs); replicas' partials merge.
class InputStage {
 public:
  InputStage(const RoundContext& round, KeyedRound keyed, std::map<ClientId, SharesIn> shares);

  // The message that opens it: the shares the sharer `client` was sent (kPermissionDenied:
  // not a sharer).
  Result<protocol::SecAggForwardedShares> forwarded_shares(ClientId client) const;
  const protocol::SecAggParams& params() const { return keyed_.params; }
  std::set<std::string> public_keys() const;

  // MaskedInputs::check, after the message's identity.
  Status check(ClientId sender, const protocol::SecAggMaskedInput& header,
               size_t body_bytes) const;
  Status receive(ClientId sender, const protocol::SecAggMaskedInput& header,
                 std::string_view body);
  // MaskedInputs::merge.
  Result<std::vector<ClientId>> merge_partial(std::string_view bytes);
  // Decides the refusal conflicts and folds the held inputs that join the sum
  // (MaskedInputs::decide): the unmask stage over them (UnmaskStage::open).
  Result<UnmaskStage> close() &&;
  const MaskedSum& sum() const { return inputs_.sum(); }
  size_t memory_bytes() const;

 private:
  const RoundContext* round_;
  KeyedRound keyed_;
  std::map<ClientId, SharesIn> shares_;
  MaskedInputs inputs_;
};

// kUnmask: each survivor reveals the shares that remove the masks left in the sum.
class UnmaskStage {
 public:
  // The stage over the inputs `decided`: kConflict when fewer than t inputs are in
  // the sum, or a secret the unmasking needs is held by fewer than t survivors.
  static Result<UnmaskStage> open(const RoundContext& round, KeyedRound keyed,
                                  std::map<ClientId, SharesIn> shares,
                                  MaskedInputs::Decided decided);

  // The message that opens it: what `client` must reveal (kPermissionDenied: its input is not
  // in the sum).
  Result<protocol::SecAggUnmaskRequest> unmask_request(ClientId client) const;
  const protocol::SecAggParams& params() const { return keyed_.params; }
  std::set<std::string> public_keys() const;
  const std::set<ClientId>& survivors() const { return inputs_.survivors; }
  const std::set<ClientId>& left_out() const { return inputs_.left_out; }

  Status receive(ClientId sender, const protocol::SecAggUnmaskResponse& message);
  // Rebuilds the secrets (from any t shares that match their commitments), removes the masks by
  // expanding each needed stream once, and decodes the sum; kConflict when a secret
  // cannot be rebuilt.
  Result<SecAggSum> finish() &&;
  const MaskedSum& sum() const { return inputs_.sum; }
  size_t memory_bytes() const;

 private:
  // Clients among `candidates` that hold a valid share of `owner`'s secrets (a neighbour whose
  // input did not refuse it).
  std::vector<ClientId> holders(ClientId owner, const std::set<ClientId>& candidates) const;
  // The sharers whose shares `holder` holds and may reveal (the inverse of holders()).
  std::vector<ClientId> holders_of_shares_from(ClientId holder) const;
  // The streams that remove every mask left in the sum; `wrong` receives the survivors whose
  // answers held a share off its owner's secret.
  Result<std::vector<MaskStream>> plan_unmasking(std::set<ClientId>& wrong) const;
  // The secret of `owner` from its `shares`, the one `matches` takes (shamir_recover).
  Result<Bytes32> recover(ClientId owner, const std::vector<ShamirShare>& shares,
                          const char* what, const std::function<bool(const Bytes32&)>& matches,
                          std::set<ClientId>& wrong) const;

  UnmaskStage(const RoundContext& round, KeyedRound keyed, std::map<ClientId, SharesIn> shares,
              MaskedInputs::Decided inputs);

  const RoundContext* round_;
  KeyedRound keyed_;
  std::map<ClientId, SharesIn> shares_;
  MaskedInputs::Decided inputs_;
  std::set<ClientId> dropped_;  // shared, no input in the sum
  std::map<ClientId, protocol::SecAggUnmaskRequest> requests_;
  std::set<ClientId> responded_;
  std::map<ClientId, std::vector<ShamirShare>> seed_shares_;
  std::map<ClientId, std::vector<ShamirShare>> key_shares_;
};

}  // namespace fedcase::secagg
