#include "server/core/jobs/job_table.h"

#include <algorithm>

#include "common/log.h"
#include "scheduling/selection.h"

namespace fedcase::server {

void JobTable::install(InstalledJob job) {
  MutexLock lock(mu_);
  const JobId id = job.entry->id;
  slots_[id] = Slot{std::move(job.entry), std::move(job.status)};
}

void JobTable::refresh(InstalledJob job) {
  JobEntry* entry = find(job.entry->id);
  if (entry == nullptr) return install(std::move(job));
  entry->runtime = std::move(job.entry->runtime);
  MutexLock lock(mu_);
  JobStatus& status = status_of(*entry);
  JobStatus& stored = job.status;
  status.state = stored.state;
  status.model = std::move(stored.model);
  status.last_round = std::max(status.last_round, stored.last_round);
  status.last_accuracy = stored.last_accuracy;
  status.policy_state = std::move(stored.policy_state);
  status.privacy = std::move(stored.privacy);
  status.owned = stored.owned;
  status.epoch = stored.epoch;
}

bool JobTable::has(JobId id) const {
  MutexLock lock(mu_);
  return slots_.count(id) > 0;
}

const JobStatus& JobTable::status_of(const JobEntry& job) const { return slots_.at(job.id).status; }

JobStatus& JobTable::status_of(const JobEntry& job) { return slots_.at(job.id).status; }

JobEntry* JobTable::find(JobId id, const Scope& scope) const {
  MutexLock lock(mu_);
  auto it = slots_.find(id);
  if (it == slots_.end() || !it->second.job->visible_to(scope)) return nullptr;
  return it->second.job.get();
}

std::set<ClientId> JobTable::busy_clients() const {
  std::set<ClientId> busy;
  MutexLock lock(mu_);
  for (const auto& [id, slot] : slots_) {
    const std::optional<rounds::Round>& round = slot.status.round;
    if (!round) continue;
    for (const auto& task : round->tasks()) {
      if (round->holds_task(task.client)) busy.insert(task.client);
    }
  }
  return busy;
}

std::vector<JobEntry*> JobTable::waiting_jobs() const {
  std::vector<JobEntry*> waiting;
  MutexLock lock(mu_);
  for (const auto& [id, slot] : slots_) {
    const JobStatus& s = slot.status;
    if (s.owned && s.phase == rounds::Phase::kIdle && s.state == JobState::kRunning) {
      waiting.push_back(slot.job.get());
    }
  }
  return waiting;
}

std::map<TenantId, size_t> JobTable::active_jobs_per_tenant() const {
  std::map<TenantId, size_t> active;
  MutexLock lock(mu_);
  for (const auto& [id, slot] : slots_) {
    if (slot.status.active()) active[slot.job->tenant] += 1;
  }
  return active;
}

size_t JobTable::invitations_per_round() const {
  size_t invitations = 0;
  MutexLock lock(mu_);
  for (const auto& [id, slot] : slots_) {
    if (slot.status.state != JobState::kRunning) continue;
    const rounds::JobConfig& config = slot.job->config;
    invitations += scheduling::invited_count(config.clients_per_round, config.overcommit);
  }
  return invitations;
}

std::optional<double> JobTable::next_deadline(double now) const {
  std::optional<double> next;
  MutexLock lock(mu_);
  for (const auto& [id, slot] : slots_) {
    if (!slot.status.round) continue;
    const std::optional<double> deadline = slot.status.round->next_deadline();
    if (deadline && *deadline > now && (!next || *deadline < *next)) next = deadline;
  }
  return next;
}

std::set<TenantId> JobTable::tenants_with_open_rounds() const {
  std::set<TenantId> tenants;
  MutexLock lock(mu_);
  for (const auto& [id, slot] : slots_) {
    if (slot.status.round) tenants.insert(slot.job->tenant);
  }
  return tenants;
}

Result<storage::Epoch> JobTable::write_epoch(const JobEntry& job) {
  const auto [owned, epoch] =
      read(job, [](const JobStatus& s) { return std::make_pair(s.owned, s.epoch); });
  if (owned) return epoch;
  auto leases = store_.list_leases();
  if (!leases.ok()) return leases.status();
  for (const storage::LeaseRecord& lease : *leases) {
    if (lease.job == job.id) return lease.epoch;
  }
  return not_found("job " + std::to_string(job.id) + " has no lease");
}

Result<JobState> JobTable::transition(JobEntry& job, const Decide& decide) {
  MutexLock serial(state_mu_);
  const Result<JobState> next = read(job, [&](const JobStatus& s) { return decide(s.state); });
  if (!next.ok()) return next.status();
  auto epoch = write_epoch(job);
  if (!epoch.ok()) return epoch.status();
  FEDCASE_RETURN_IF_ERROR(store_.set_job_state(job.id, *next, *epoch));
  update(job, [&](JobStatus& s) { s.state = *next; });
  log_info("job " + std::to_string(job.id) + " is now " + state_name(*next));
  return *next;
}

}  // namespace fedcase::server
