#pragma once
// A job as the coordinator holds it: its JobEntry, set when it is installed and then constant
// but for what the round driver's thread alone uses, and its JobStatus, which the job table
// publishes behind its lock (job_table.h): the job's state and model, and its round here with
// the phase of the round's life cycle (rounds/lifecycle.h).

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/states.h"
#include "common/status.h"
#include "rounds/job_runtime.h"
#include "rounds/lifecycle.h"
#include "server/core/base/config.h"
#include "server/core/base/evaluator.h"
#include "storage/store.h"

namespace fedcase::server {

// Seconds on the coordinator's clock (Unix time in production; tests may pass their own).
using Clock = std::function<double()>;
double wall_clock();

// Whose jobs a caller sees: every job (nullopt, the admin) or one tenant's own. Another
// tenant's job is kNotFound, as if it did not exist.
using Scope = std::optional<TenantId>;

struct JobEntry {
  // Set at installation, then constant.
  JobId id = 0;
  std::string name;
  nlohmann::json config_json;  // as submitted
  rounds::JobConfig config;
  double created_at = 0;
  TenantId tenant = 0;  // the job's owner (0: the operator)
  // Its module, the TorchScript archive clients run (null: none), and the module's checksum.
  std::shared_ptr<const std::string> module;
  std::string module_checksum;
  // The model's buffers config.local_buffers keeps on the devices, by name.
  std::vector<std::string> local_buffers;
  // What an update of the job carries (the tensors config.trainable names, of the model's
  // layout, which every version shares).
  rounds::UpdateLayout update;
  // What the server evaluator scores the job's models as (config.server_evaluated() jobs).
  EvaluatedModel evaluated;
  std::string policy_name, optimizer_name;

  // Used by the round driver's thread only.
  std::unique_ptr<rounds::JobRuntime> runtime;
  // The open round's fair-share charge: its invitees' expected client-seconds, and the
  // expected seconds of one of the job's tasks on the fleet when it opened (its class cost).
  double round_expected_client_s = 0;
  double round_class_cost = 0;
  // A conclusion whose store answer was lost (rounds::Phase::kResolving): kept until the store
  // is read back, then adopted, written again or abandoned; never decided twice.
  struct Unresolved {
    rounds::Conclusion conclusion;
    storage::RoundRecord record;
    std::chrono::steady_clock::time_point started;  // when the conclusion began
  };
  std::optional<Unresolved> unresolved;

  bool visible_to(const Scope& scope) const { return !scope || tenant == *scope; }
};

// What the table publishes of a job.
struct JobStatus {
  JobState state = JobState::kRunning;
  std::shared_ptr<const rounds::GlobalModel> model;  // the latest committed model
  RoundIndex last_round = 0;                         // highest round index used
  size_t evaluations_pending = 0;                    // committed models not yet evaluated
  // Of the newest evaluated model, as config.evaluation.target says (rounds::recorded_accuracy).
  std::optional<double> last_accuracy;
  nlohmann::json policy_state = nlohmann::json::object();
  nlohmann::json privacy;  // for DP jobs: the privacy spent so far (null otherwise)
  // Whether this coordinator drives the job, and the lease epoch its writes for the job carry
  // (storage/store.h, "Leases and fencing"). A single coordinator owns every job at
  // storage::kUnleased; a replica owns the jobs whose lease it holds (replica/ownership.h).
  bool owned = true;
  storage::Epoch epoch = storage::kUnleased;

  // The job's round here and where it stands: the owner's own round, or on a replica that
  // does not own the job a copy of the owner's (the follower's phases). Only the round
  // driver changes `phase` (through rounds::step), and `round` outside the admitting phases.
  rounds::Phase phase = rounds::Phase::kIdle;
  std::optional<rounds::Round> round;
  std::string failure;                        // why the round fails ("": it does not)
  std::optional<double> admission_closed_at;  // when its admission closed
  uint64_t plan_revision = 0;  // a copy of another replica's buffer: the plan it serves
  // On a replica that does not own the job: the newest round of the owner's it has read from
  // the store and followed (or found admitting nothing), and the replication's wakes() at
  // that reading (kNeverRead before the first). A request about a later round, while a
  // wake-up came since the reading, may be about a round opened since
  // (Coordinator::State::may_be_behind); without one, the store has no such round.
  static constexpr uint64_t kNeverRead = UINT64_MAX;
  RoundIndex read_round = 0;
  uint64_t read_wakes = kNeverRead;

  bool active() const { return state == JobState::kRunning || state == JobState::kPaused; }
  // This coordinator no longer drives the job (another replica acquired it): its own round
  // admits nothing more, and the round driver forgets it (rounds::Event::kSteppedDown).
  void step_down() {
    owned = false;
    read_round = std::max(read_round, last_round);  // every round it opened is known here
    if (round && !following()) round->close();
  }
  // A round is being concluded, or its conclusion's answer is being read back: none opens.
  bool concluding() const {
    return phase == rounds::Phase::kConcluding || phase == rounds::Phase::kResolving;
  }
  // This replica serves another replica's round.
  bool following() const {
    return phase == rounds::Phase::kFollowing || phase == rounds::Phase::kHandingOver ||
           phase == rounds::Phase::kRelaying;
  }
};

// The privacy a DP job has spent, as the admin API shows it (null for a job without DP noise).
nlohmann::json privacy_view(const rounds::JobRuntime& runtime);

// A job ready for JobTable::install.
struct InstalledJob {
  std::unique_ptr<JobEntry> entry;
  JobStatus status;
};
// Makes a job at its creation or at recovery: `record` as stored, `parts` built from
// record.config, `model` its latest committed model with the optimizer state saved with it,
// `module` its archive (null: none), `last_round` the highest round index used and `history`
// its rounds so far (the privacy they spent is replayed, the newest recorded accuracy kept).
// `coordinator`'s datasets_dir is its folder of server datasets, and its spool_dir where the
// buffered aggregation rules keep their copies of the updates. Each job gets a fresh DP
// secret, so its noise cannot be regenerated from its config. kInvalidArgument for a saved
// state the policy or optimizer cannot load, kInternal when no secret can be drawn.
Result<InstalledJob> make_job(const storage::JobRecord& record, rounds::JobParts parts,
                              std::shared_ptr<const rounds::GlobalModel> model,
                              std::shared_ptr<const std::string> module,
                              const std::string& optimizer_state, RoundIndex last_round,
                              const std::vector<storage::RoundRecord>& history,
                              const CoordinatorConfig& coordinator);
// The folder of a job's server dataset under `datasets_dir`, or "" without one.
std::string server_dataset_dir(const std::string& datasets_dir, const rounds::JobConfig& job);

}  // namespace fedcase::server
