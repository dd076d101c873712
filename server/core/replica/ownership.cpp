#include "server/core/replica/ownership.h"

#include <algorithm>
#include <limits>
#include <tuple>

#include "common/log.h"
#include "server/core/jobs/loading.h"

namespace fedcase::server {
namespace {

// Registrations, contacts and tenants made through other replicas are read this often, and
// this replica's own contacts saved as often, so that an owner sees a client that talks to
// another replica as available within about twice this.
constexpr double kClientsEvery = 5.0;
constexpr double kClientsAtMostEvery = 0.5;
constexpr double kTenantsEvery = 5.0;

std::string job_name(JobId id) { return "job " + std::to_string(id); }

bool stopped(JobState state) {
  return state == JobState::kCancelled || state == JobState::kFinished;
}

}  // namespace

Ownership::Ownership(const CoordinatorParts& parts, std::string replica)
    : t_(parts),
      replica_(std::move(replica)),
      period_s_(parts.config.lease_s / 4),
      random_(std::random_device{}()) {}

double Ownership::refresh_clients(double now) {
  const bool changed = clients_changed_ && now >= last_client_refresh_ + kClientsAtMostEvery;
  if (now >= next_client_refresh_ || changed) {
    clients_changed_ = false;
    last_client_refresh_ = now;
    next_client_refresh_ = now + kClientsEvery;
    t_.clients.flush();
    Status clients = t_.clients.refresh();
    if (!clients.ok()) log_warn("cannot read the clients again: " + clients.to_string());
  }
  if (!clients_changed_) return next_client_refresh_;
  return std::min(next_client_refresh_, last_client_refresh_ + kClientsAtMostEvery);
}

double Ownership::pass(double now) {
  const double clients_due = refresh_clients(now);
  // The driver ticks on every event: passes are paced, unless woken.
  if (now < next_pass_ && !woken_.exchange(false)) return std::min(next_pass_, clients_due);
  next_pass_ = now + period_s_;
  if (now >= next_tenant_refresh_) {
    next_tenant_refresh_ = now + kTenantsEvery;
    Status tenants = t_.tenants.refresh();
    if (!tenants.ok()) log_warn("cannot read the tenants again: " + tenants.to_string());
  }
  auto records = t_.store.list_jobs();
  std::map<JobId, storage::JobRecord> stored;
  if (records.ok()) {
    for (auto& record : *records) stored.emplace(record.id, std::move(record));
  } else {
    log_warn("cannot read the jobs: " + records.status().to_string());
  }
  renew(stored);
  if (!records.ok()) return std::min(next_pass_, clients_due);
  follow(stored);
  auto leases = t_.store.list_leases();
  if (leases.ok()) {
    take_over(*leases, stored);
  } else {
    log_warn("cannot read the leases: " + leases.status().to_string());
  }
  return std::min(next_pass_, clients_due);
}

void Ownership::renew(const std::map<JobId, storage::JobRecord>& stored) {
  const std::map<JobId, Steady::time_point> held = valid_until_;
  for (const auto& [id, until] : held) {
    JobEntry* job = t_.jobs.find(id);
    const auto [owned, epoch] =
        t_.jobs.read(*job, [](const JobStatus& s) { return std::make_pair(s.owned, s.epoch); });
    if (!owned) {  // the round driver stepped down: the store refused its epoch
      valid_until_.erase(id);
      continue;
    }
    const Steady::time_point asked = Steady::now();
    auto renewed = t_.store.renew_lease(id, replica_, epoch, t_.config.lease_s);
    if (renewed.ok()) {
      valid_until_[id] = asked + std::chrono::duration_cast<Steady::duration>(
                                     std::chrono::duration<double>(renewed->remaining_s));
    } else if (renewed.status().code() == Code::kConflict) {
      step_down(*job, "another replica acquired the job", "lost");
      continue;
    } else if (Steady::now() >= until) {
      step_down(*job, "its lease ran out and cannot be renewed: " + renewed.status().to_string(),
                "stepped_down");
      continue;
    } else {
      log_warn(job_name(id) + ": cannot renew the lease yet: " + renewed.status().to_string());
    }
    // A state set through another replica (an operator's pause, resume or cancel); the round
    // driver carries it out on the job's round.
    auto record = stored.find(id);
    if (record == stored.end()) continue;
    const JobState state = record->second.state;
    t_.jobs.update(*job, [&](JobStatus& s) { s.state = state; });
  }
}

void Ownership::follow(const std::map<JobId, storage::JobRecord>& stored) {
  for (const auto& [id, record] : stored) {
    JobEntry* job = t_.jobs.find(id);
    if (job == nullptr) {
      load_followed(record);
      continue;
    }
    const auto [owned, version] = t_.jobs.read(
        *job, [](const JobStatus& s) { return std::make_pair(s.owned, s.model->version); });
    if (owned) continue;
    // The job's state is the store's; its round here is the round driver's, untouched.
    t_.jobs.update(*job, [&](JobStatus& s) { s.state = record.state; });
    if (stopped(record.state)) continue;
    auto latest = t_.store.latest_model(id);
    if (!latest.ok()) {
      log_warn(job_name(id) + ": cannot read its latest model: " + latest.status().to_string());
      continue;
    }
    if (latest->version > version) load_followed(record);
  }
}

void Ownership::load_followed(const storage::JobRecord& record) {
  std::vector<storage::RoundRecord> rounds;
  auto loaded = load_job(t_.store, record, t_.config, /*fail_open=*/false,
                         storage::kUnleased, "", t_.clock(), rounds);
  if (!loaded.ok()) {
    log_warn(job_name(record.id) + ": cannot load: " + loaded.status().to_string());
    return;
  }
  loaded->status.owned = false;
  t_.jobs.refresh(std::move(loaded).value());
}

void Ownership::take_over(const std::vector<storage::LeaseRecord>& leases,
                          const std::map<JobId, storage::JobRecord>& stored) {
  // Jobs spread: only a replica holding no more than the least loaded other holder acquires.
  std::map<std::string, size_t> holders;
  for (const auto& lease : leases) {
    if (lease.held()) holders[lease.holder] += 1;
  }
  size_t fewest = std::numeric_limits<size_t>::max();
  for (const auto& [holder, count] : holders) {
    if (holder != replica_) fewest = std::min(fewest, count);
  }
  if (valid_until_.size() > fewest) return;
  std::vector<JobId> free;
  for (const auto& lease : leases) {
    auto record = stored.find(lease.job);
    const bool active = record != stored.end() && !stopped(record->second.state);
    const bool mine = valid_until_.count(lease.job) > 0;
    if (active && !mine && t_.jobs.has(lease.job) && (!lease.held() || lease.holder == replica_)) {
      free.push_back(lease.job);
    }
  }
  if (free.empty()) return;
  const JobId id = free[std::uniform_int_distribution<size_t>(0, free.size() - 1)(random_)];
  const Steady::time_point asked = Steady::now();
  auto lease = t_.store.acquire_lease(id, replica_, t_.config.lease_s);
  if (!lease.ok()) {
    // kConflict: another replica was quicker.
    if (lease.status().code() != Code::kConflict) {
      log_warn(job_name(id) + ": cannot acquire its lease: " + lease.status().to_string());
    }
    return;
  }
  std::vector<storage::RoundRecord> rounds;
  auto loaded =
      load_job(t_.store, stored.at(id), t_.config, /*fail_open=*/true, lease->epoch,
               "the job's owner changed while the round was open", t_.clock(), rounds);
  if (!loaded.ok()) {
    log_warn(job_name(id) + ": acquired at epoch " + std::to_string(lease->epoch) +
             " but cannot load: " + loaded.status().to_string());
    return;  // the lease runs out unrenewed, and a replica takes the job over then
  }
  loaded->status.owned = true;
  t_.jobs.refresh(std::move(loaded).value());
  valid_until_[id] = asked + std::chrono::duration_cast<Steady::duration>(
                                 std::chrono::duration<double>(lease->remaining_s));
  t_.metrics.add(metric::kLeaseChanges, {{"change", "acquired"}});
  log_info(job_name(id) + ": this replica (" + replica_ + ") drives it now, at lease epoch " +
           std::to_string(lease->epoch));
  JobEntry* job = t_.jobs.find(id);
  Status evaluated = t_.driver.evaluate_unscored(*job, rounds);
  if (!evaluated.ok()) log_warn(job_name(id) + ": " + evaluated.to_string());
}

void Ownership::step_down(JobEntry& job, const std::string& why, const char* change) {
  log_warn(job_name(job.id) + ": this replica stops driving it: " + why);
  t_.jobs.update(job, [](JobStatus& s) { s.step_down(); });
  valid_until_.erase(job.id);
  t_.metrics.add(metric::kLeaseChanges, {{"change", change}});
}

void Ownership::release_all() {
  for (const auto& [id, until] : valid_until_) {
    JobEntry* job = t_.jobs.find(id);
    const storage::Epoch epoch = t_.jobs.read(*job, [](const JobStatus& s) { return s.epoch; });
    Status released = t_.store.release_lease(id, replica_, epoch);
    if (!released.ok())
      log_warn(job_name(id) + ": cannot release its lease: " + released.to_string());
  }
  valid_until_.clear();
}

}  // namespace fedcase::server
