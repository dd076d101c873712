#pragma once
// The coordinator's side of one secure-aggregation round (SecAgg+, docs/secure_aggregation.md):
// the round's current stage (stages.h, one class per stage), behind one lock. Each receive_*
// goes to the stage that takes it (kConflict naming both stages otherwise); each close_* turns
// the stage into the next one, or fails the round with the stage's reason. What the round
// yields is the sum of the survivors' weighted, clipped updates and their total weight; the
// masked inputs are folded into one running sum mod 2^bits as they arrive (memory: one vector of
// vector_length + 1 words, never one per client, but for the inputs held whole by a refusal:
// masked_inputs.h), and the masks are removed by expanding each needed stream once, in parallel
// over ranges of the vector, in cache-sized chunks.
//
//   stage           receive_*                close_* (the stage's deadline or all arrived)
//   kAdvertiseKeys  receive_keys             close_keys; then graph() and key_list(client)
//   kShareKeys      receive_shares           close_shares; then forwarded_shares(client)
//   kMaskedInput    receive_masked_input,    close_masked_inputs; then unmask_request(client)
//                   merge_masked_partial
//   kUnmask         receive_unmask_response  finish: the sum, or the reason it failed
//
// Errors are the stages' (stages.h). A close_* or finish that fails fails the round: it and
// every later call return kConflict with the reason, and stage() is kFailed.
//
// Thread safety: every method may be called from any thread, concurrently; each runs under the
// object's lock. receive_masked_input holds it for the fold (O(vector_length), split over the
// object's worker pool of setup.threads threads), finish for the unmasking; the stage getters
// for building a message.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "common/ids.h"
#include "common/mutex.h"
#include "common/status.h"
#include "protocol/secagg.h"
#include "secagg/stages.h"

namespace fedcase::secagg {

class SecAggServer {
 public:
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
  // Takes another replica's partial of masked inputs (MaskedInputs::merge, masked_inputs.h) as
  // if its inputs had come here. kConflict out of stage.
  Result<std::vector<ClientId>> merge_masked_partial(std::string_view bytes);
  // Decides the refusal conflicts (leave_out) and folds the held inputs that join the sum,
  // then builds the unmask requests (InputStage::close).
  Status close_masked_inputs();
  // In the unmask stage: the clients whose input is in the sum (U3), and those whose input was
  // left out by a refusal conflict (empty in the other stages).
  std::set<ClientId> survivors() const;
  std::set<ClientId> left_out() const;
  Result<protocol::SecAggUnmaskRequest> unmask_request(ClientId client) const;

  Status receive_unmask_response(ClientId sender, const protocol::SecAggUnmaskResponse& message);
  // Rebuilds the secrets, removes the masks and decodes the sum (UnmaskStage::finish); the
  // round's state is freed.
  Result<SecAggSum> finish();

  // Every public key accepted this round, for the next round's used_public_keys.
  std::set<std::string> public_keys() const;
  // A copy of the running sum mod 2^bits as folded so far, masked (for tests); empty outside the
  // masked input and unmask stages.
  std::vector<uint64_t> masked_sum() const;
  // The bytes of what the current stage holds: the running sum and held inputs, the graph, the
  // keys, the stored ciphertexts and the revealed shares (payload only, not allocator
  // overhead), 0 once the round ended: for a gauge.
  size_t memory_bytes() const;

 private:
  // The round ended: done (OK) or failed (why).
  struct Ended {
    Stage stage;
    Status failure;
  };
  using Current = std::variant<KeysStage, SharesStage, InputStage, UnmaskStage, Ended>;

  SecAggServer(SecAggRoundSetup setup, X25519Key probe_key);

  // kConflict for a call of stage `wanted` made in another stage (or the round's failure).
  Status out_of_stage(Stage wanted) const FEDCASE_REQUIRES(mu_);
  // Moves to the stage `next` (a stage's close), or fails the round with its error.
  template <class Next>
  Status enter(Result<Next> next) FEDCASE_REQUIRES(mu_);
  Status fail(const Status& why) FEDCASE_REQUIRES(mu_);
  Stage stage_locked() const FEDCASE_REQUIRES(mu_);

  const std::unique_ptr<aggregation::WorkerPool> pool_;  // used only with mu_ held
  const RoundContext round_;

  mutable Mutex mu_;
  Current current_ FEDCASE_GUARDED_BY(mu_);
  std::set<std::string> public_keys_ FEDCASE_GUARDED_BY(mu_);  // once the keys stage closed
};

}  // namespace fedcase::secagg
