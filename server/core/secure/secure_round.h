#pragma once
// The coordinator's side of a job's secure round (SecAgg+, docs/secure_aggregation.md,
// "The wiring"): one SecureRound per open round of a job with `secure_aggregation`, beside
// its rounds::Round, held by SecureRounds (secure_rounds.h). The round driver decides when a
// stage closes (rounds/lifecycle.h: stage_due() and the like are its facts, close_stage() and
// the like its actions).
//
// A SecureRound wraps the library's secagg::SecAggServer with what the coordinator needs
// around it: the stage deadlines (the round driver sleeps until the next one), the messages
// each client fetches, written once when their stage closes (a long poll only reads them), the
// clients that answered each stage, and the figures a round records. The stages:
//
//   stage           client -> coordinator         closes (driver)              then the client
//                                                                                reads
//   advertise keys  receive_keys                  all invitees or deadline     keys_reply
//   share keys      receive_shares                all participants or deadline forwarded_shares
//   masked input    receive_masked_input          the Round is due, or every   unmask_request
//                   (an upload: Round places)     sharer sent its input
//   unmask          receive_unmask_response       all survivors or deadline    (the next model)
//   unmasking       (the driver runs finish: the masks are removed outside every lock)
//
// A refused message changes nothing. A stage that closes with too few clients fails the round
// with the library's reason (failure()); the driver then fails its Round. A round every
// replica serves publishes each stage's messages to the other replicas (Setup::
// share_messages) before it serves them itself: a client whose next request reaches another
// replica finds them there.
//
// Locking: each SecureRound has one short lock (mu_) for its stage, deadlines, answers and
// written messages; polls and message checks take only it. The library's calls run outside
// it: a fold holds the SecAggServer's own lock (folds into one round run one at a time, as
// plain folds do), and finish() runs only once no message can reach the SecAggServer any more
// (the stage is marked unmasking under mu_ and the calls in flight have left), so no poll,
// heartbeat or upload waits for the unmasking. Lock order: JobTable's, then SecureRounds',
// then a SecureRound's; the SecAggServer's is taken with none of them held.
//
// Thread safety: every method may be called from any thread; the driver's (close_stage,
// merge_partial, close_inputs, finish, abort) from one thread at a time.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/mutex.h"
#include "common/status.h"
#include "protocol/secagg.h"
#include "secagg/config.h"
#include "secagg/server.h"
#include "server/core/base/metrics.h"
#include "server/core/base/task_notifier.h"
#include "server/core/secure/secure_stages.h"

namespace fedcase::server {

class SecureRound : public SecureStages {
 public:
  // The protocol's stage (secagg/stages.h); while the masks are removed (finish) the round is
  // in kUnmask and takes no message.
  using Stage = secagg::Stage;

  struct Setup {
    JobId job = 0;
    RoundIndex round = 0;
    std::vector<ClientId> invitees;
    uint64_t vector_length = 0;  // the model's parameters
    double opened_at = 0;
    secagg::SecureAggregationConfig config;
    // The keys of the job's earlier rounds (Store::list_used_keys), refused in this one.
    std::set<std::string> used_public_keys;
    // The invitees' registered signing keys (secagg::SecAggRoundSetup::signing_keys).
    std::map<ClientId, std::string> signing_keys;
    size_t threads = 2;                      // for folds and unmasking
    // A ready cohort's round (docs/secure_aggregation.md): its inputs exist before it opens,
    // so its masked input stage lasts stage_seconds at most, as a key stage does; a synchronous
    // round's lasts as long as its Round admits (training happens in it).
    bool inputs_ready = false;
    // A round every replica serves (docs/scaling.md, "Secure rounds on every replica"): called
    // with each client's message of the stage about to open (its kind, stage_kind::kKeysReply,
    // kForwarded or kUnmaskRequest) before the stage opens here; an error fails the round.
    // Null for a round served here alone.
    std::function<Status(const char* kind, const std::map<ClientId, std::string>& messages)>
        share_messages;
    // Stores the public keys the round accepted (Store::put_used_keys), called when the key
    // stage closes, before any client learns them: a later round refuses them on whichever
    // replica owns it, so a key is never used twice, even across a restart. An error fails the
    // round. Null: the keys are not kept.
    std::function<Status(const std::set<std::string>& keys)> record_keys;
  };
  // The round's parameters follow from the config and the invitees (secagg::round_params). A
  // round whose parameters or server cannot be made is created failed, saying why.
  // `notifier` wakes the long polls of clients whose stage message is written; `wake_driver`
  // is called when every client has answered a stage (it may close early). Both, and
  // `metrics` (stage durations), must outlive the round.
  static std::shared_ptr<SecureRound> open(Setup setup, TaskNotifier& notifier,
                                           std::function<void()> wake_driver, Metrics& metrics);

  RoundIndex index() const override { return round_; }
  Stage stage() const;
  // Why the round failed ("" unless stage() is kFailed).
  std::string failure() const;

  // ---- the clients' messages (any thread) ----
  // Errors: kConflict out of stage (or the round's failure), and the library's
  // (SecAggServer::receive_*): kPermissionDenied for a sender that is not the message's client,
  // not invited or no longer a participant, or a message of another job or round, or a
  // replayed key; kInvalidArgument for a malformed message.
  Status receive_keys(ClientId client, const protocol::SecAggAdvertiseKeys& message) override;
  Status receive_shares(ClientId client, const protocol::SecAggShares& message) override;
  // Checks the input (SecAggServer::check_masked_input), then runs `record` (the metadata's
  // store write) and, if it succeeds, folds the vector in; inputs of one round are taken one
  // at a time, so a refused input (or a failed `record`) leaves nothing behind. kUnprocessable
  // for a vector of the wrong length or word size.
  Status receive_masked_input(ClientId client, const protocol::SecAggMaskedInput& header,
                              std::string_view body,
                              const std::function<Status()>& record) override;
  Status receive_unmask_response(ClientId client,
                                 const protocol::SecAggUnmaskResponse& message) override;

  // A client's message that another replica received and passed on through the store
  // (`kind`: stage_kind::kKeys, kShares or kUnmask; `body`: its JSON text), taken as if it came
  // here; one already taken is skipped (OK). Errors as the receive_* above, and
  // kInvalidArgument for a body that does not read or an unknown kind.
  Status receive_relayed(const std::string& kind, ClientId client, const std::string& body);
  // `replica`'s partial sum of masked inputs (SecAggServer::merge_masked_partial), during the
  // masked input stage: its senders count as having sent their input here.
  Status merge_partial(const std::string& replica, std::string_view bytes);
  // The replicas whose masked partials were merged.
  std::set<std::string> merged_replicas() const;
  // The clients that completed the share stage (0 before it closed).
  size_t sharer_count() const;

  // ---- what long polls read (cheap: the messages are written when a stage closes) ----
  // The client's message of the stage: nullopt while that stage is still open for the round;
  // kPermissionDenied for a client that has none (it did not answer the stage before, in
  // time); kConflict with the reason once the round failed.
  Result<std::optional<std::string>> keys_reply(ClientId client) const override;
  Result<std::optional<std::string>> forwarded_shares(ClientId client) const override;
  Result<std::optional<std::string>> unmask_request(ClientId client) const override;

  // ---- the round driver ----
  // The next stage deadline after `now` (keys, shares, unmask), if one is pending.
  std::optional<double> next_deadline(double now) const;
  // Whether the open key stage (keys or shares) may close at `now`: every client answered it,
  // or its deadline passed.
  bool stage_due(double now) const;
  // Closes the open key stage: writes the next stage's messages, publishes them (to the other
  // replicas first) and wakes the clients' polls. Below the threshold the round fails (its
  // reason as the error).
  Status close_stage(double now);
  // Whether the masked input stage may close at `now`: every client that completed the share
  // stage sent its masked input, or, for a cohort's round (Setup::inputs_ready), the stage's
  // stage_seconds passed.
  bool inputs_due(double now) const;
  // Closes the masked input stage (the Round is closed and no input is in flight): builds the
  // unmask requests, opens the unmask stage until now + stage_seconds. Below the threshold
  // the round fails (its reason as the error).
  Status close_inputs(double now);
  // Whether the unmask stage is over: every survivor answered, or its deadline passed.
  bool unmask_due(double now) const;
  // Rebuilds the secrets and removes the masks, outside every lock but the library's own,
  // which nothing else takes any more: the sum, or why the round failed (kConflict).
  Result<secagg::SecAggSum> finish(double now);
  // The round stops for `why` (a cancel, a failure elsewhere); later calls see it failed.
  void abort(const std::string& why, double now);

  // The round's record (its metrics' `secure_aggregation`): parameters, clients per stage,
  // dropouts per stage, stage seconds, the stage reached and any failure.
  nlohmann::json summary() const;
  // Every public key accepted this round (the next rounds refuse them).
  std::set<std::string> public_keys() const;
  // The running sum mod 2^bits as folded so far (masked until unmasked): for tests.
  std::vector<uint64_t> masked_sum() const;

 private:
  SecureRound(const Setup& setup, TaskNotifier& notifier, std::function<void()> wake_driver,
              Metrics& metrics);

  // Moves to `next` at `now`, recording the closing stage's duration.
  void enter(Stage next, double now) FEDCASE_REQUIRES(mu_);
  // The stage's name, "unmasking" while the masks are removed.
  const char* stage_label() const FEDCASE_REQUIRES(mu_);
  void fail(const std::string& why, double now) FEDCASE_REQUIRES(mu_);
  // kConflict unless the round is in `stage`.
  Status check_stage(Stage stage) const FEDCASE_REQUIRES(mu_);
  // A poll's answer from `written` once the round reached `ready`.
  Result<std::optional<std::string>> written_message(Stage ready,
                                                     const std::map<ClientId, std::string>& written,
                                                     ClientId client, const char* missing) const
      FEDCASE_REQUIRES(mu_);
  // Closes the key stage (the graph and the key lists) or the share stage (the forwarded
  // shares); kConflict with the round's failure when too few answered.
  Status close_keys(double now);
  Status close_shares(double now);
  // Publishes `written` as the messages of `next`, to the other replicas first when the round
  // is shared (the round fails if they cannot have them), or the failure, and wakes the
  // polls. Returns what `closed` became.
  Status publish(Stage next, std::map<ClientId, std::string> written, Status closed, double now);
  // Waits until no client's call is in flight (a stage closes only then).
  void wait_for_calls();
  // Runs `call` on the server unless the round has left `stage`, counted in flight until its
  // success is noted (`note`, under mu_: whether every client has now answered the stage, in
  // which case the driver is woken).
  Status call_in_stage(Stage stage, const std::function<Status()>& call,
                       const std::function<bool()>& note);

  const JobId job_;
  const RoundIndex round_;
  const std::vector<ClientId> invitees_;
  const secagg::SecureAggregationConfig config_;
  TaskNotifier& notifier_;
  const std::function<void()> wake_driver_;
  Metrics& metrics_;
  const decltype(Setup::share_messages) share_messages_;
  const decltype(Setup::record_keys) record_keys_;
  const bool inputs_ready_;
  std::unique_ptr<secagg::SecAggServer> server_;  // null when the setup failed
  std::optional<protocol::SecAggParams> params_;

  // One masked input or merged partial at a time: check, record, fold (taken before mu_).
  Mutex inputs_mu_;
  mutable Mutex mu_ FEDCASE_ACQUIRED_AFTER(inputs_mu_);
  CondVar calls_left_;  // signalled when calls_in_flight_ drops to 0
  Stage stage_ FEDCASE_GUARDED_BY(mu_) = Stage::kAdvertiseKeys;
  bool unmasking_ FEDCASE_GUARDED_BY(mu_) = false;  // finish() is removing the masks
  std::string failure_ FEDCASE_GUARDED_BY(mu_);
  std::string failed_in_ FEDCASE_GUARDED_BY(mu_);  // the stage the round failed in
  double stage_started_ FEDCASE_GUARDED_BY(mu_) = 0;
  double deadline_ FEDCASE_GUARDED_BY(mu_) = 0;  // of a key stage or the unmask stage
  std::map<std::string, double> stage_seconds_ FEDCASE_GUARDED_BY(mu_);
  size_t calls_in_flight_ FEDCASE_GUARDED_BY(mu_) = 0;
  // Who answered each stage.
  std::set<ClientId> advertised_ FEDCASE_GUARDED_BY(mu_);
  std::set<ClientId> shared_ FEDCASE_GUARDED_BY(mu_);
  std::set<ClientId> inputs_ FEDCASE_GUARDED_BY(mu_);
  std::set<ClientId> answered_ FEDCASE_GUARDED_BY(mu_);
  // The relayed messages taken (kind, client), so that a re-read skips them.
  std::set<std::pair<std::string, ClientId>> relayed_ FEDCASE_GUARDED_BY(mu_);
  std::set<std::string> merged_ FEDCASE_GUARDED_BY(mu_);  // replicas whose partial was merged
  // Participants of each closed stage (the graph's; the sharers; the survivors).
  std::set<ClientId> participants_ FEDCASE_GUARDED_BY(mu_);
  std::set<ClientId> sharers_ FEDCASE_GUARDED_BY(mu_);
  std::set<ClientId> survivors_ FEDCASE_GUARDED_BY(mu_);
  std::vector<ClientId> dropped_ FEDCASE_GUARDED_BY(mu_);  // shared, no input in the sum
  // Sent an input that a refusal conflict left out (secagg/server.h), of dropped_.
  std::set<ClientId> left_out_ FEDCASE_GUARDED_BY(mu_);
  // Survivors whose unmask answers held wrong shares (outvoted at the unmasking).
  std::vector<ClientId> wrong_shares_ FEDCASE_GUARDED_BY(mu_);
  // Each client's message of the stage reached: the graph and key list, the forwarded
  // shares, the unmask request (JSON text).
  std::map<ClientId, std::string> keys_replies_ FEDCASE_GUARDED_BY(mu_);
  std::map<ClientId, std::string> forwarded_ FEDCASE_GUARDED_BY(mu_);
  std::map<ClientId, std::string> unmask_requests_ FEDCASE_GUARDED_BY(mu_);
};

}  // namespace fedcase::server
