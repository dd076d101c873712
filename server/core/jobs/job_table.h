#pragma once
// The coordinator's jobs as the API and the round driver share them (job.h): each job's
// JobEntry, and its published JobStatus, which lives inside the table behind one short-held
// lock and is reached only through the table's queries and read()/update() while that lock is
// held.
//
// Locking: the table's lock is held only to decide and to publish, never across a store call,
// a fold or an optimizer step (the callbacks of read() and update() must be short and must
// not call back into the table), and never together with the client registry's lock.
// transition() serialises job state changes among themselves without holding the lock across
// their store write. Every method may be called from any thread. Jobs are never removed, so a
// JobEntry pointer stays valid for the table's lifetime.

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "common/ids.h"
#include "common/mutex.h"
#include "common/states.h"
#include "common/status.h"
#include "server/core/jobs/job.h"
#include "storage/store.h"

namespace fedcase::server {

class JobTable {
 public:
  explicit JobTable(storage::Store& store) : store_(store) {}

  // Adds a job (at creation or recovery); its id must be new.
  void install(InstalledJob job) FEDCASE_EXCLUDES(mu_);
  // Takes `job` (the job as the store holds it now, loaded again when its state, model or
  // owner changed) as an installed job's: its runtime, and of its status the job's own part
  // (state, model, rounds used, policy state, privacy, accuracy, ownership and epoch). The
  // round here and its phase stay as they are: loading a job again never touches a round in
  // progress, a copy of another replica's included. Installs a job not installed yet. Call on
  // the round driver's thread, which alone uses the runtime.
  void refresh(InstalledJob job) FEDCASE_EXCLUDES(mu_);
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
  // Running jobs this coordinator owns with no round here (rounds::Phase::kIdle).
  std::vector<JobEntry*> waiting_jobs() const FEDCASE_EXCLUDES(mu_);
  // The clients a round of each running job invites (ceil(K * overcommit)), summed: what the
  // jobs want to choose among at their rounds' opening (pace steering's demand).
  size_t invitations_per_round() const FEDCASE_EXCLUDES(mu_);
  // Running or paused jobs, per owner (every owner with one is listed).
  std::map<TenantId, size_t> active_jobs_per_tenant() const FEDCASE_EXCLUDES(mu_);
  // The earliest deadline after `now` of an open round.
  std::optional<double> next_deadline(double now) const FEDCASE_EXCLUDES(mu_);
  // Owners of a job with an open round.
  std::set<TenantId> tenants_with_open_rounds() const FEDCASE_EXCLUDES(mu_);

  // Moves `job` from its state to decide(state): decided under the lock, written to the store
  // without it (at the job's epoch if this coordinator owns it, else at the epoch of the
  // job's current lease: an operator's action may reach any replica), published under it. The
  // round driver then carries the change out on the job's round (a stopped job's round fails).
  // decide's refusal (e.g. kConflict) or the store's error leave the state unchanged.
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
