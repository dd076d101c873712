#pragma once
// The coordinator's jobs as the API and the round driver share them: each job's published
// state (lifecycle, latest model, open round) behind one short-held lock, and its round
// engine (rounds::JobRuntime), which only the round driver's thread uses.
//
// Locking: JobTable::mu guards the fields marked below; it is held only to decide and to
// publish, never across a store call, a fold or an optimizer step, and never together with
// the client registry's lock. JobTable::transition serialises job state changes among
// themselves (state_mu) without holding mu across their store write.

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/ids.h"
#include "common/states.h"
#include "common/status.h"
#include "common/thread_annotations.h"
#include "rounds/job_runtime.h"
#include "server/evaluator.h"
#include "storage/store.h"

namespace fedcase::server {

// Seconds on the coordinator's clock (Unix time in production; tests may pass their own).
using Clock = std::function<double()>;
double wall_clock();

struct JobEntry {
  // Set at creation, then constant.
  JobId id = 0;
  std::string name;
  nlohmann::json config_json;  // as submitted
  rounds::JobConfig config;
  double created_at = 0;
  TenantId tenant = 0;  // the job's owner (0: the operator)
  // Its module, the TorchScript archive clients run (null: none), and the module's checksum.
  std::shared_ptr<const std::string> module;
  std::string module_checksum;
  // What the server evaluator scores the job's models as (config.server_evaluated() jobs).
  EvaluatedModel evaluated;

  // Used by the round driver's thread only, once the job is in the table.
  std::unique_ptr<rounds::JobRuntime> runtime;
  // The open round's fair-share charge: its invitees' expected client-seconds, and the
  // expected seconds of one of the job's tasks on the fleet when it opened (its class cost).
  double round_expected_client_s = 0;
  double round_class_cost = 0;

  // Guarded by JobTable::mu.
  JobState state = JobState::kRunning;
  std::shared_ptr<const rounds::GlobalModel> model;  // the latest committed model
  std::optional<rounds::Round> round;                // the open round
  bool concluding = false;         // the driver is concluding a round: none opens meanwhile
  RoundIndex last_round = 0;       // highest round index used
  size_t evaluations_pending = 0;  // committed models not yet evaluated
  // Of the newest evaluated model, as config.evaluation.target says (rounds::recorded_accuracy).
  std::optional<double> last_accuracy;
  std::string policy_name, optimizer_name;
  nlohmann::json policy_state = nlohmann::json::object();
  nlohmann::json privacy;  // for DP jobs: the privacy spent so far (null otherwise)
};

// The privacy a DP job has spent, as the admin API shows it (null for a job without DP noise).
nlohmann::json privacy_view(const rounds::JobRuntime& runtime);

class JobTable {
 public:
  explicit JobTable(storage::Store& store) : store_(store) {}

  std::mutex mu;
  std::map<JobId, std::unique_ptr<JobEntry>> jobs FEDCASE_GUARDED_BY(mu);

  // The job, or nullptr. Caller holds mu. Entries are never removed, so the pointer stays
  // valid for the table's lifetime.
  JobEntry* find(JobId id) FEDCASE_REQUIRES(mu);

  // Moves `job` from its state to decide(state): decided under mu, written to the store
  // without it, published under it. Stopping a job (cancelled, finished) closes its open
  // round, which the driver then fails. decide's refusal (e.g. kConflict) or the store's
  // error leave the state unchanged.
  using Decide = std::function<Result<JobState>(JobState current)>;
  [[nodiscard]] Result<JobState> transition(JobEntry& job, const Decide& decide);

 private:
  storage::Store& store_;
  std::mutex state_mu_;  // one state change at a time
};

}  // namespace fedcase::server
