#pragma once
// The coordinator's jobs as the API and the round driver share them. Each job is a JobEntry,
// set once when it is installed (its config, owner and module) and carrying the round engine
// that only the round driver's thread uses, plus its published JobStatus (lifecycle, latest
// model, open round), which lives inside the table behind one short-held lock and is reached
// only through the table's queries and read()/update() while that lock is held.
//
// Locking: the table's lock is held only to decide and to publish, never across a store call,
// a fold or an optimizer step (the callbacks of read() and update() must be short and must
// not call back into the table), and never together with the client registry's lock.
// transition() serialises job state changes among themselves without holding the lock across
// their store write. Every method may be called from any thread. Jobs are never removed, so a
// JobEntry pointer stays valid for the table's lifetime.

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/ids.h"
#include "common/mutex.h"
#include "common/states.h"
#include "common/status.h"
#include "rounds/job_runtime.h"
#include "server/core/evaluator.h"
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
  // What the server evaluator scores the job's models as (config.server_evaluated() jobs).
  EvaluatedModel evaluated;
  std::string policy_name, optimizer_name;

  // Used by the round driver's thread only.
  std::unique_ptr<rounds::JobRuntime> runtime;
  // The open round's fair-share charge: its invitees' expected client-seconds, and the
  // expected seconds of one of the job's tasks on the fleet when it opened (its class cost).
  double round_expected_client_s = 0;
  double round_class_cost = 0;
  // The owner's close of a shared round (JobStatus::shared_round): when it next reads the
  // round's admission, whether the store found K updates recorded, and when admission closed.
  struct SharedClose {
    double next_check = 0;
    bool filled = false;
    std::optional<double> closed_at;
    bool partials_in = false;  // every replica holding updates wrote its partial
    // A secure round's: the replicas whose masked partials were merged at the close of its
    // masked inputs (the other replicas' updates are lost).
    std::set<std::string> masked_merged;
  };
  SharedClose shared_close;

  bool visible_to(const Scope& scope) const { return !scope || tenant == *scope; }
};

// What the table publishes of a job.
struct JobStatus {
  JobState state = JobState::kRunning;
  std::shared_ptr<const rounds::GlobalModel> model;  // the latest committed model
  std::optional<rounds::Round> round;                // the open round
  bool concluding = false;         // the driver is concluding a round: none opens meanwhile
  RoundIndex last_round = 0;       // highest round index used
  size_t evaluations_pending = 0;  // committed models not yet evaluated
  // Of the newest evaluated model, as config.evaluation.target says (rounds::recorded_accuracy).
  std::optional<double> last_accuracy;
  nlohmann::json policy_state = nlohmann::json::object();
  nlohmann::json privacy;  // for DP jobs: the privacy spent so far (null otherwise)
  // Whether this coordinator drives the job's rounds, and the lease epoch its writes for the
  // job carry (storage/store.h, "Leases and fencing"). A single coordinator owns every job at
  // storage::kUnleased; a replica owns the jobs whose lease it holds (ownership.h).
  bool owned = true;
  storage::Epoch epoch = storage::kUnleased;
  // Replicas (docs/scaling.md, "Partial aggregates"): the open round is shared, admitted
  // through the store (reserve_update with the round's K) by every replica, each folding the
  // updates it admits into its own aggregate. `mirrored`: this replica does not own the job
  // and serves a copy of the owner's round, whose aggregate it writes as its partial once
  // admission closes. `spoilt`: an update was folded but its admission could not be recorded,
  // so this replica's aggregate no longer matches what the store admitted.
  bool shared_round = false;
  bool mirrored = false;
  bool spoilt = false;

  bool active() const { return state == JobState::kRunning || state == JobState::kPaused; }
};

// This coordinator no longer drives the job (another replica acquired it): it stops owning
// it and closes its open round, which the round driver forgets, writing nothing, once no
// upload is being folded into it (an upload in flight publishes into it). Call under the
// table's lock (JobTable::update).
inline void stop_owning(JobStatus& status) {
  status.owned = false;
  if (status.round) status.round->close();
}

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
// `datasets_dir` is the coordinator's folder of server datasets. Each job gets a fresh DP
// secret, so its noise cannot be regenerated from its config. kInvalidArgument for a saved
// state the policy or optimizer cannot load, kInternal when no secret can be drawn.
Result<InstalledJob> make_job(const storage::JobRecord& record, rounds::JobParts parts,
                              std::shared_ptr<const rounds::GlobalModel> model,
                              std::shared_ptr<const std::string> module,
                              const std::string& optimizer_state, RoundIndex last_round,
                              const std::vector<storage::RoundRecord>& history,
                              const std::string& datasets_dir);
// The folder of a job's server dataset under `datasets_dir`, or "" without one.
std::string server_dataset_dir(const std::string& datasets_dir, const rounds::JobConfig& job);

class JobTable {
 public:
  explicit JobTable(storage::Store& store) : store_(store) {}

  // Adds a job (at creation or recovery); its id must be new.
  void install(InstalledJob job) FEDCASE_EXCLUDES(mu_);
  // Replaces an installed job's runtime and status with `job`'s (the job as the store holds it
  // now, loaded again when ownership changes), keeping its entry, whose other fields come from
  // the same stored record. Call on the round driver's thread, which alone uses the runtime.
  void reload(InstalledJob job) FEDCASE_EXCLUDES(mu_);
  // Whether a job of that id is installed.
  bool has(JobId id) const FEDCASE_EXCLUDES(mu_);

  // The job if it exists and `scope` sees it, else nullptr.
  JobEntry* find(JobId id, const Scope& scope = std::nullopt) const FEDCASE_EXCLUDES(mu_);

  // Runs `f(const JobStatus&)` (or `f(JobStatus&)`) with the lock held and returns its result.
  template <class F>
  auto read(const JobEntry& job, F&& f) const FEDCASE_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return f(status_of(job));
  }
  template <class F>
  auto update(const JobEntry& job, F&& f) FEDCASE_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    return f(status_of(job));
  }
  // Runs `f(JobEntry&, JobStatus&)` for every job in id order, with the lock held throughout.
  template <class F>
  void update_each(F&& f) FEDCASE_EXCLUDES(mu_) {
    MutexLock lock(mu_);
    for (auto& [id, slot] : slots_) f(*slot.job, slot.status);
  }

  // Clients invited by an open round that have not delivered their update there yet: a client
  // holds one task at a time.
  std::set<ClientId> busy_clients() const FEDCASE_EXCLUDES(mu_);
  // Running jobs this coordinator owns with neither an open round nor one being concluded.
  std::vector<JobEntry*> waiting_jobs() const FEDCASE_EXCLUDES(mu_);
  // Running or paused jobs, per owner (every owner with one is listed).
  std::map<TenantId, size_t> active_jobs_per_tenant() const FEDCASE_EXCLUDES(mu_);
  // The earliest deadline after `now` of an open round.
  std::optional<double> next_deadline(double now) const FEDCASE_EXCLUDES(mu_);
  // Owners of a job with an open round.
  std::set<TenantId> tenants_with_open_rounds() const FEDCASE_EXCLUDES(mu_);

  // Moves `job` from its state to decide(state): decided under the lock, written to the store
  // without it (at the job's epoch if this coordinator owns it, else at the epoch of the
  // job's current lease: an operator's action may reach any replica), published under it. Stopping
  // a job (cancelled, finished) closes its open round, which the driver then fails. decide's
  // refusal (e.g. kConflict) or the store's error leave the state unchanged.
  using Decide = std::function<Result<JobState>(JobState current)>;
  [[nodiscard]] Result<JobState> transition(JobEntry& job, const Decide& decide)
      FEDCASE_EXCLUDES(mu_);

 private:
  struct Slot {
    std::unique_ptr<JobEntry> job;
    JobStatus status;
  };
  // The epoch transition() writes `job`'s state at.
  Result<storage::Epoch> write_epoch(const JobEntry& job) FEDCASE_EXCLUDES(mu_);
  const JobStatus& status_of(const JobEntry& job) const FEDCASE_REQUIRES(mu_);
  JobStatus& status_of(const JobEntry& job) FEDCASE_REQUIRES(mu_);

  storage::Store& store_;
  mutable Mutex mu_;
  std::map<JobId, Slot> slots_ FEDCASE_GUARDED_BY(mu_);
  Mutex state_mu_;  // one state change at a time
};

}  // namespace fedcase::server
