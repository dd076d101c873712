#include "server/core/job_table.h"

#include <chrono>
#include <filesystem>

#include "common/crypto.h"
#include "common/log.h"
#include "rounds/evaluation.h"

namespace fedcase::server {

double wall_clock() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

nlohmann::json privacy_view(const rounds::JobRuntime& runtime) {
  if (!runtime.private_rounds()) return nullptr;
  const rounds::JobConfig& c = runtime.config();
  auto spent = runtime.privacy().spent(c.dp_delta);
  return {{"noise_multiplier", c.aggregation.dp_noise_multiplier},
          {"clip_norm", c.aggregation.clip_norm},
          {"rounds", runtime.privacy().rounds()},
          {"delta", c.dp_delta},
          {"epsilon", spent.ok() ? spent->epsilon : 0.0}};
}

std::string server_dataset_dir(const std::string& datasets_dir, const rounds::JobConfig& job) {
  if (job.evaluation.server_dataset.empty()) return std::string();
  return (std::filesystem::path(datasets_dir) / job.evaluation.server_dataset).string();
}

Result<InstalledJob> make_job(const storage::JobRecord& record, rounds::JobParts parts,
                              std::shared_ptr<const rounds::GlobalModel> model,
                              std::shared_ptr<const std::string> module,
                              const std::string& optimizer_state, RoundIndex last_round,
                              const std::vector<storage::RoundRecord>& history,
                              const std::string& datasets_dir) {
  auto dp_secret = random_u64();
  if (!dp_secret.ok()) return dp_secret.status();
  auto runtime = rounds::JobRuntime::create(std::move(parts), model, record.policy_state,
                                            optimizer_state, last_round, *dp_secret | 1);
  if (!runtime.ok()) return runtime.status();
  rounds::JobRuntime& r = **runtime;
  const rounds::JobConfig& config = r.config();
  JobStatus status;
  for (const auto& round : history) {
    if (round.state != RoundState::kCommitted) continue;
    FEDCASE_RETURN_IF_ERROR(r.replay_privacy(round.metrics));
    auto accuracy = rounds::recorded_accuracy(round.metrics, config.evaluation.target);
    if (accuracy) status.last_accuracy = accuracy;
  }
  auto job = std::make_unique<JobEntry>();
  job->id = record.id;
  job->name = record.name;
  job->config_json = record.config;
  job->config = config;
  job->created_at = record.created_at;
  job->tenant = record.tenant;
  if (module) job->module_checksum = sha256_hex(*module);
  job->module = std::move(module);
  job->evaluated = {config.model,
                    job->module,
                    job->module_checksum,
                    config.loss,
                    server_dataset_dir(datasets_dir, config),
                    config.evaluation.input_shape};
  job->policy_name = r.policy_name();
  job->optimizer_name = r.optimizer_name();
  status.state = record.state;
  status.model = std::move(model);
  status.last_round = r.last_round();
  status.policy_state = r.policy_state();
  status.privacy = privacy_view(r);
  job->runtime = std::move(runtime).value();
  return InstalledJob{std::move(job), std::move(status)};
}

void JobTable::install(InstalledJob job) {
  MutexLock lock(mu_);
  const JobId id = job.entry->id;
  slots_[id] = Slot{std::move(job.entry), std::move(job.status)};
}

void JobTable::reload(InstalledJob job) {
  JobEntry* entry = find(job.entry->id);
  if (entry == nullptr) return install(std::move(job));
  entry->runtime = std::move(job.entry->runtime);
  MutexLock lock(mu_);
  status_of(*entry) = std::move(job.status);
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
    if (s.owned && !s.round && !s.concluding && s.state == JobState::kRunning) {
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
  update(job, [&](JobStatus& s) {
    s.state = *next;
    const bool stopped = *next == JobState::kCancelled || *next == JobState::kFinished;
    if (stopped && s.round) s.round->close();
  });
  log_info("job " + std::to_string(job.id) + " is now " + state_name(*next));
  return *next;
}

}  // namespace fedcase::server
