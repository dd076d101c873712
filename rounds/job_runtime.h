#pragma once
// What a job knows between rounds, and the two decisions of every round: whom to invite with
// which task (open_round), and what the round produced (conclude). The coordinator and the
// simulator drive jobs through this class alone, so both run the same rounds.
//
// Pure logic: no store, no clock (times are arguments), no lock. Not thread-safe: one thread
// (the coordinator's round driver, or the simulator) calls a runtime at a time. What other
// threads need (the current model, privacy spent) is copied out by the caller.
//
// A conclusion is applied in the order the store needs: conclude() decides; the caller writes
// the conclusion durably; then adopt() makes its model current, or abandon() undoes it when it
// could not be stored.
//
// An asynchronous job (config.asynchronous(), FedBuff) runs the same calls on buffers: after
// open_round, the caller hands out tasks for free slots with refill() whenever clients are
// free, drops tasks past their deadline with expire(), folds each update with discount() as
// its weight's factor, and concludes the buffer once it is due (K updates); the tasks still in
// flight carry over to the buffer the next open_round opens.

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "aggregation/rdp_accountant.h"
#include "aggregation/server_optimizer.h"
#include "common/blob.h"
#include "common/states.h"
#include "common/status.h"
#include "rounds/job_config.h"
#include "rounds/round.h"
#include "scheduling/selection.h"

namespace fedcase::rounds {

// A committed global model as its encoded blob (what clients download), which holds its
// values: a model of several GB is held once, not also as a vector of floats.
struct GlobalModel {
  uint64_t version = 0;
  ModelLayout layout;
  std::string blob;      // a float32 encode_blob of the model, checked (view_blob)
  std::string checksum;  // blob_checksum(blob)

  // The values, decoded from the blob: a copy, for the moments that need one (a commit's
  // step, an evaluation).
  std::vector<float> params() const;
};

// Builds the model of `version` with its blob and checksum.
std::shared_ptr<const GlobalModel> make_global_model(uint64_t version, ModelLayout layout,
                                                     std::vector<float> params);

// Takes `model` one round forward by the clients' weighted mean delta, of the tensors
// `update` carries (the others stay as they are): the server optimizer steps their
// parameters; each buffer becomes the clients' weighted mean of theirs (the model's plus its
// mean delta), an integer buffer rounded to the nearest integer, except the buffers
// `local_buffers` keeps on the devices, which keep their values. kInvalidArgument for sizes
// that differ; the optimizer's errors, with `model` unchanged.
Status step_model(aggregation::ServerOptimizer& optimizer, const UpdateLayout& update,
                  const std::vector<std::string>& local_buffers, std::vector<float>& model,
                  const std::vector<float>& mean_delta);

// One client of the pool a round selects from.
struct PoolClient {
  const scheduling::ClientProfile* profile = nullptr;  // not owned; valid during open_round
  bool available = false;                              // online, and free of other jobs' tasks
};

// What a round produced: the record to store, and for a committed round the model to store
// with it. Nothing is current until adopt().
struct Conclusion {
  RoundIndex round = 0;
  RoundState state = RoundState::kFailed;
  std::string failure;  // kFailed: why
  double closed_at = 0;
  // updates, invited, samples, train_loss, aggregation, finished, dropped (client -> reason),
  // privacy, round_seconds, federated_evaluation (of the base model, when an accepted update
  // reported one: federated_evaluation_json); a committed round adds model_version and
  // checksum.
  nlohmann::json metrics = nlohmann::json::object();
  std::vector<ClientId> invited;  // whose profiles the round changed
  // Missed deadlines, and the selection feedback (kNotKept) of every invitee without a kept
  // update.
  std::vector<ProfileChange> profile_changes;
  nlohmann::json policy_state;  // the policy after learning from the round
  // kCommitted only.
  std::shared_ptr<const GlobalModel> model;
  std::string optimizer_state;  // after the step that produced `model`
  std::optional<aggregation::RdpAccountant> privacy;
  std::string optimizer_state_before;  // for abandon()
};

class JobRuntime {
 public:
  // A job running `parts` (whose policy and optimizer it takes over), resumed at `model` (its
  // latest committed model) with the policy and optimizer state saved with it (empty: fresh).
  // `last_round` is the highest round index used so far. `dp_secret` keeps DP noise unpredictable
  // from the job config (see dp_seed); 0, for simulations and tests, makes it reproducible.
  // kInvalidArgument for a state the policy or optimizer did not save.
  static Result<std::unique_ptr<JobRuntime>> create(
      JobParts parts, std::shared_ptr<const GlobalModel> model, const nlohmann::json& policy_state,
      const std::string& optimizer_state, RoundIndex last_round = 0, uint64_t dp_secret = 0);

  const JobConfig& config() const { return config_; }
  const std::shared_ptr<const GlobalModel>& model() const { return model_; }
  // What an update of the job carries (config().trainable of the model's layout).
  const UpdateLayout& update_layout() const { return update_; }
  RoundIndex last_round() const { return last_round_; }
  std::string policy_name() const { return policy_->name(); }
  std::string optimizer_name() const { return optimizer_->name(); }
  const nlohmann::json& policy_state() const { return policy_state_; }
  bool private_rounds() const { return config_.aggregation.dp_noise_multiplier > 0; }
  const aggregation::RdpAccountant& privacy() const { return privacy_; }
  // The DP noise seed of round `index`, a fresh one every round: seed * 1000003 + index
  // without a secret (reproducible), else that value mixed with the secret, so nobody who
  // knows the job config can regenerate the noise and subtract it from a released model.
  uint64_t dp_seed(RoundIndex index) const;
  // Composes the privacy a committed round spent, as its metrics recorded it (recovery).
  Status replay_privacy(const nlohmann::json& round_metrics);

  // Opens the next round at `now` over `pool`: selects, plans tasks and the deadline, and
  // prepares the aggregate. nullopt when fewer than min_clients are available or the policy
  // invites nobody. Errors come from planning or the aggregation config.
  // An asynchronous job's buffer holds the tasks carried from the last one (those more than
  // async.max_staleness versions behind are dropped as "too stale") and no new task: the caller
  // refills it. nullopt when no task is carried and fewer than min_clients are available.
  Result<std::optional<Round>> open_round(const std::vector<PoolClient>& pool, double now);

  // A copy of a round another coordinator replica opened for this job (a round, or a buffer,
  // of `spec`, its tasks in `plan`: round_from_plan), so that this replica serves its invitees
  // and folds the updates it admits into an aggregate of its own (the job's aggregation
  // config; never asked for a mean, so without DP noise). kInvalidArgument for a plan that is
  // not one; kConflict when the round trains from a model version other than this runtime's.
  Result<Round> follow_round(const Round::Spec& spec, const nlohmann::json& plan) const;

  // Asynchronous jobs: the slots of `buffer` free for new tasks (async.concurrency less the
  // tasks in flight; none once it is closed).
  size_t free_slots(const Round& buffer) const;
  // Asynchronous jobs: selects clients for `count` free slots of buffer `index` among those
  // `pool` marks available and `excluded` does not hold (the buffer's clients: those holding
  // one of its tasks or with an update in it, one update a client a buffer), and plans their
  // tasks at `now` on the current model. The caller hands them out with Round::assign and
  // applies their invitations (Round::selection_changes). Errors come from planning.
  Result<std::vector<Round::Assignment>> plan_slots(RoundIndex index, size_t count,
                                                    const std::set<ClientId>& excluded,
                                                    const std::vector<PoolClient>& pool,
                                                    double now);
  // Asynchronous jobs: drops the tasks of `buffer` whose deadline is `now` or earlier; returns
  // their profile changes (kMissedDeadline).
  std::vector<ProfileChange> expire(Round& buffer, double now) const;
  // The factor an accepted update of `client` counts with in `round`: its staleness weight in
  // a buffer (staleness_weight), 1 in a synchronous round.
  double discount(const Round& round, ClientId client) const;

  // Concludes `round` at `now` (closing it first): commits when at least min_updates were
  // accepted, else fails it. The policy learns from the round either way. A committed round
  // whose aggregate or next model is not finite is failed instead.
  Conclusion conclude(Round& round, double now);
  // Concludes `round` as failed, for `why` (cancelled, target reached, a failed cohort, ...).
  // A buffer's tasks in flight carry over to the next buffer when the job `goes_on` (a failed
  // cohort's members among them, to train again), and end with it otherwise.
  Conclusion fail(Round& round, double now, const std::string& why, bool goes_on);
  // The conclusion is durable: its model becomes current.
  void adopt(const Conclusion& conclusion);
  // The conclusion could not be stored: the optimizer step is undone.
  void abandon(const Conclusion& conclusion);

 private:
  JobRuntime(JobParts parts, std::shared_ptr<const GlobalModel> model);
  // The record of a round that ends without a model; the policy learns from it. With
  // `stopped_early` (a cancel, a reached target) invitees still inside the deadline are
  // "round stopped", not blamed for missing it.
  // A buffer's tasks in flight carry over to the next buffer when `carry` (its cohort's
  // members too, to train again, when it closes with a `failure`: Round::in_flight).
  Conclusion close(Round& round, double now, const std::string& failure, bool stopped_early,
                   bool carry);
  // close() for a buffer: the policy learns from the updates it kept and the tasks it dropped.
  Conclusion close_buffer(Round& buffer, double now, const std::string& failure,
                          bool stopped_early, bool carry);
  // Selects up to `count` of the clients `pool` marks available and `excluded` does not name
  // for round `index`, and plans their tasks.
  Result<scheduling::RoundPlan> select_and_plan(const std::vector<PoolClient>& pool,
                                                RoundIndex index, size_t count,
                                                const std::function<bool(ClientId)>& excluded,
                                                bool slots);
  Result<std::shared_ptr<RoundAggregate>> make_round_aggregate(RoundIndex index) const;
  Result<nlohmann::json> privacy_after(const Round& round,
                                       aggregation::RdpAccountant& privacy) const;

  JobConfig config_;
  std::shared_ptr<const GlobalModel> model_;
  UpdateLayout update_;  // of model_'s layout, which every version shares
  std::unique_ptr<scheduling::SelectionPolicy> policy_;
  std::unique_ptr<aggregation::ServerOptimizer> optimizer_;
  aggregation::RdpAccountant privacy_;
  nlohmann::json policy_state_ = nlohmann::json::object();
  RoundIndex last_round_ = 0;
  uint64_t dp_secret_ = 0;
  std::vector<Round::Assignment> carried_;  // asynchronous: in flight when the buffer concluded
};

}  // namespace fedcase::rounds
