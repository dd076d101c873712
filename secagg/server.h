#pragma once
// The coordinator's side of one secure-aggregation round (SecAgg+, docs/secure_aggregation.md).
// It collects the advertised keys, draws the neighbour graph over the clients that advertised,
// routes the encrypted shares to their recipients, folds each masked vector into a running sum
// mod 2^bits as it arrives (memory: one vector of vector_length + 1 words, never one per
// client), decides who survived, builds the unmask requests (never both shares of one client),
// rebuilds the secrets it needs from at least t shares, and removes the masks by expanding
// each needed stream once, in parallel over ranges of the vector, in cache-sized chunks. What
// it yields is the sum of the survivors' weighted, clipped updates and their total weight.
//
//   stage           receive_*                close_* (the stage's deadline or all arrived)
//   kAdvertiseKeys  receive_keys             close_keys; then graph() and key_list(client)
//   kShareKeys      receive_shares           close_shares; then forwarded_shares(client)
//   kMaskedInput    receive_masked_input     close_masked_inputs; then unmask_request(client)
//   kUnmask         receive_unmask_response  finish: the sum, or the reason it failed
//
// A receive_* that fails changes nothing: kConflict out of stage or for a second message of a
// stage; kPermissionDenied for a sender that is not the message's client, not invited, not
// (or no longer) a participant, or a message of another job or round, or public keys that were
// used before (this round or the earlier rounds the setup lists); kInvalidArgument for a
// malformed message (shares not exactly one per neighbour, a ciphertext or share of the wrong
// size, a low-order public key); kUnprocessable for a masked vector of the wrong length or word
// size; kResourceExhausted for an input that would be held past max_held_inputs. A close_* or
// finish that finds too few clients left (fewer than t to rebuild a secret) fails the round: it
// and every later call return kConflict with the reason, and stage() is kFailed.
//
// Refusal conflicts. A client masks only with the neighbours whose shares it could decrypt,
// and names the others in its input's refused_shares; two neighbours whose inputs are both in
// the sum must have masked with each other. So an input that refused a share, or whose share an
// input before it refused, is held whole (partial.h, HeldInput) instead of folded, and
// close_masked_inputs decides which held inputs join the sum (leave_out): the others are left
// out and count as dropped, named in SecAggSum::left_out. A bad client (one that encrypts
// garbage to its neighbours, or refuses their shares) is thus left out alone when its input
// came after a refusal of it; when it came first its input is in the sum already, and the
// neighbours that refused it are left out instead. Replicas hold such inputs too, so a partial
// never holds in its sum an input the owner must leave out.
//
// Thread safety: every method may be called from any thread, concurrently; each runs under the
// object's lock. receive_masked_input holds it for the fold (O(vector_length), split over the
// object's worker pool of setup.threads threads), finish for the unmasking; the stage getters
// for building a message.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/mutex.h"
#include "common/status.h"
#include "protocol/secagg.h"
#include "secagg/crypto.h"
#include "secagg/graph.h"
#include "secagg/partial.h"
#include "secagg/round_crypto.h"
#include "secagg/shamir.h"

namespace fedcase::secagg {

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

class SecAggServer {
 public:
  enum class Stage { kAdvertiseKeys, kShareKeys, kMaskedInput, kUnmask, kDone, kFailed };

  // kInvalidArgument for bad params (validate_params over the invitees) or invitees.
  static Result<std::unique_ptr<SecAggServer>> create(SecAggRoundSetup setup);

  Stage stage() const;
  // Why the round failed (OK unless stage() is kFailed).
  Status failure() const;
  // The parameters the key list carries (the degree as drawn, once close_keys has run).
  protocol::SecAggParams params() const;

  Status receive_keys(ClientId sender, const protocol::SecAggAdvertiseKeys& message);
  Status close_keys();
  // The graph message, the same for every participant (a caller may write it once and serve
  // the same bytes to all), and the key list of `client` (kPermissionDenied: not a
  // participant). kConflict before close_keys.
  Result<protocol::SecAggGraph> graph() const;
  Result<protocol::SecAggKeyList> key_list(ClientId client) const;

  Status receive_shares(ClientId sender, const protocol::SecAggShares& message);
  Status close_shares();
  Result<protocol::SecAggForwardedShares> forwarded_shares(ClientId client) const;

  // Whether receive_masked_input would take this input now (the same checks, nothing folded):
  // for a caller that records the input elsewhere before folding it.
  Status check_masked_input(ClientId sender, const protocol::SecAggMaskedInput& header,
                            size_t body_bytes) const;
  // `body` is read during the call, never kept.
  Status receive_masked_input(ClientId sender, const protocol::SecAggMaskedInput& header,
                              std::string_view body);
  // Takes another replica's partial sum of masked inputs (secagg/partial.h) as if its inputs
  // had come here: its sum with the inputs folded in it, and each held input alone (one whose
  // sender sent an input already, refused a share it was not forwarded, or would be held past
  // max_held_inputs is dropped; the others are held here). Returns the senders taken: the
  // folded ones, then the held ones, in the partial's order. kConflict out of stage, or when
  // a sender in its sum sent an input already (a replica that let a second input through):
  // the partial then changes nothing; kPermissionDenied for a sender in its sum that did not
  // complete the share stage; kInvalidArgument for a malformed partial.
  Result<std::vector<ClientId>> merge_masked_partial(std::string_view bytes);
  // Decides the refusal conflicts (leave_out) and folds the held inputs that join the sum,
  // then builds the unmask requests.
  Status close_masked_inputs();
  // Once the masked inputs closed: the clients whose input is in the sum (U3), and those whose
  // input was left out by a refusal conflict.
  std::set<ClientId> survivors() const;
  std::set<ClientId> left_out() const;
  Result<protocol::SecAggUnmaskRequest> unmask_request(ClientId client) const;

  Status receive_unmask_response(ClientId sender, const protocol::SecAggUnmaskResponse& message);
  // Rebuilds the secrets, removes the masks and decodes the sum; the running sum is freed.
  Result<SecAggSum> finish();

  // Every public key accepted this round, for the next round's used_public_keys.
  std::set<std::string> public_keys() const;
  // A copy of the running sum mod 2^bits as folded so far: masked until finish() (for tests).
  std::vector<uint64_t> masked_sum() const;
  // The bytes of what the object holds now: the running sum, the graph, the keys, the stored
  // ciphertexts and the revealed shares (payload only, not allocator overhead): for a gauge.
  size_t memory_bytes() const;

 private:
  struct Keys {
    std::string cipher_public_key;
    std::string mask_public_key;
    std::string signature;  // the client's, over both (advertised_keys_message)
  };
  struct SharesIn {
    std::string seed_commitment;
    std::map<ClientId, std::string> ciphertexts;  // by recipient
  };

  SecAggServer(SecAggRoundSetup setup, X25519Key probe_key);
  // Folds and unmasking run on pool_, one call at a time under mu_.

  Status check_message(Stage stage, ClientId sender, ClientId named, JobId job,
                       RoundIndex round) const FEDCASE_REQUIRES(mu_);
  Status check_input(ClientId sender, const protocol::SecAggMaskedInput& header,
                     size_t body_bytes) const FEDCASE_REQUIRES(mu_);
  // Whether `sender` may send an input: it completed the share stage and sent none yet.
  Status check_sender(ClientId sender) const FEDCASE_REQUIRES(mu_);
  // Whether every share `sender` refused is one it was forwarded (a neighbour's that shared).
  Status check_refused_neighbours(ClientId sender,
                                  const std::vector<ClientId>& refused_shares) const
      FEDCASE_REQUIRES(mu_);
  // Keeps `input` whole until the stage closes (the caller checked there is room).
  void hold(HeldInput input) FEDCASE_REQUIRES(mu_);
  // Decides the held inputs (leave_out): folds those that join the sum.
  Status admit_held() FEDCASE_REQUIRES(mu_);
  Status fail(std::string reason) FEDCASE_REQUIRES(mu_);
  // Calls f(sum32_) or f(sum64_), whichever the round's bits use.
  template <class F>
  auto with_sum(F&& f) FEDCASE_REQUIRES(mu_) {
    return word_bytes_ <= 4 ? f(sum32_) : f(sum64_);
  }
  template <class F>
  auto with_sum(F&& f) const FEDCASE_REQUIRES(mu_) {
    return word_bytes_ <= 4 ? f(sum32_) : f(sum64_);
  }
  void free_sum() FEDCASE_REQUIRES(mu_);
  // Clients among `candidates` that hold a valid share of `owner`'s secrets.
  std::vector<ClientId> holders(ClientId owner, const std::set<ClientId>& candidates) const
      FEDCASE_REQUIRES(mu_);
  // The streams that remove every mask left in the sum (rebuilding the secrets they need).
  // `wrong` receives the survivors whose answers held a share off its owner's secret.
  Result<std::vector<MaskStream>> plan_unmasking(std::set<ClientId>& wrong) FEDCASE_REQUIRES(mu_);
  // The secret of `owner` from its `shares`, the one `matches` takes (shamir_recover); the
  // holders of wrong shares are added to `wrong`. kInvalidArgument naming `what` otherwise.
  Result<Bytes32> recover(ClientId owner, const std::vector<ShamirShare>& shares,
                          const char* what, const std::function<bool(const Bytes32&)>& matches,
                          std::set<ClientId>& wrong) const FEDCASE_REQUIRES(mu_);

  const SecAggRoundSetup setup_;
  const std::set<ClientId> invitees_;
  const X25519Key probe_key_;  // checks advertised keys are not low-order points
  const uint32_t word_bytes_;  // of the masked vectors and the running sum
  const size_t max_held_;      // max_held_inputs of the setup's degree
  const std::unique_ptr<aggregation::WorkerPool> pool_;  // used only with mu_ held

  mutable Mutex mu_;
  Stage stage_ FEDCASE_GUARDED_BY(mu_) = Stage::kAdvertiseKeys;
  Status failure_ FEDCASE_GUARDED_BY(mu_);
  protocol::SecAggParams params_ FEDCASE_GUARDED_BY(mu_);
  std::map<ClientId, Keys> keys_ FEDCASE_GUARDED_BY(mu_);
  std::set<std::string> round_keys_ FEDCASE_GUARDED_BY(mu_);
  std::optional<NeighbourGraph> graph_ FEDCASE_GUARDED_BY(mu_);
  std::map<ClientId, SharesIn> shares_ FEDCASE_GUARDED_BY(mu_);  // U2 once closed
  // The running sum mod 2^bits: 32-bit words when bits <= 32 (as the masked vectors), else 64.
  std::vector<uint32_t> sum32_ FEDCASE_GUARDED_BY(mu_);
  std::vector<uint64_t> sum64_ FEDCASE_GUARDED_BY(mu_);
  std::set<ClientId> survivors_ FEDCASE_GUARDED_BY(mu_);                     // U3
  std::map<ClientId, HeldInput> held_ FEDCASE_GUARDED_BY(mu_);               // until close
  std::set<ClientId> refused_by_held_ FEDCASE_GUARDED_BY(mu_);  // whose shares held_ refused
  std::set<ClientId> left_out_ FEDCASE_GUARDED_BY(mu_);
  std::map<ClientId, std::set<ClientId>> refusers_ FEDCASE_GUARDED_BY(mu_);  // owner -> refusers
  std::set<ClientId> dropped_ FEDCASE_GUARDED_BY(mu_);                       // U2 minus U3
  std::map<ClientId, protocol::SecAggUnmaskRequest> requests_ FEDCASE_GUARDED_BY(mu_);
  std::set<ClientId> responded_ FEDCASE_GUARDED_BY(mu_);
  std::map<ClientId, std::vector<ShamirShare>> seed_shares_ FEDCASE_GUARDED_BY(mu_);
  std::map<ClientId, std::vector<ShamirShare>> key_shares_ FEDCASE_GUARDED_BY(mu_);
};

// Which held inputs stay out of a sum that holds `folded`'s inputs, so that no held input in the
// sum refused the share of another input in it: first every held input that refused the share
// of a folded one (it cannot be taken out of the sum), then, while a conflict is left, the held
// input in most conflicts, the one refused most on a tie, then the smaller id. Pure.
std::set<ClientId> leave_out(const std::set<ClientId>& folded,
                             const std::map<ClientId, HeldInput>& held);

}  // namespace fedcase::secagg
