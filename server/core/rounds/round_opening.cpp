// The round driver's openings: rounds opened in the tenants' fair-share order, and an
// asynchronous job's buffer refilled slot by slot (round_driver.h).

#include <chrono>

#include "common/log.h"
#include "scheduling/fair_share.h"
#include "scheduling/round_plan.h"
#include "scheduling/selection.h"
#include "server/core/rounds/round_driver.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

std::string job_prefix(const JobEntry& job) { return "job " + std::to_string(job.id) + ": "; }

void log_opened(const JobEntry& job, const rounds::Round& round, double now) {
  if (round.buffered()) {
    log_info(job_prefix(job) + "buffer " + std::to_string(round.index()) + " opened on version " +
             std::to_string(round.base_version()) + " with " +
             std::to_string(round.tasks().size() - round.invited().size()) +
             " tasks carried over and " + std::to_string(round.invited().size()) + " invited of " +
             std::to_string(round.available()) + " available");
  } else {
    log_info(job_prefix(job) + "round " + std::to_string(round.index()) + " opened with " +
             std::to_string(round.tasks().size()) + " invited of " +
             std::to_string(round.available()) + " available, deadline in " +
             std::to_string(static_cast<int>(round.deadline() - now)) + " s");
  }
}

}  // namespace

storage::RoundRecord RoundDriver::round_record(JobId job, const rounds::Round& r,
                                               storage::Epoch epoch) {
  storage::RoundRecord record{job,
                              r.index(),
                              RoundState::kOpen,
                              r.base_version(),
                              r.invited(),
                              r.opened_at(),
                              r.next_deadline().value_or(r.opened_at()),
                              0,
                              json::object()};
  record.epoch = epoch;
  return record;
}

double RoundDriver::class_cost_of(const JobEntry& job, const std::vector<ClientSnapshot>& clients) {
  // The coordinator's priors, never the job's own: a job's config must not set its price.
  scheduling::TrainingParams training = job.config.training;
  training.priors = scheduling::TrainingParams{}.priors;
  const uint64_t model_bytes = job.runtime->model()->blob.size();
  std::vector<double> task_seconds;
  for (const ClientSnapshot& c : clients) {
    if (!c.available || !rounds::labels_match(c.labels, job.config.client_labels)) continue;
    task_seconds.push_back(
        scheduling::make_candidate(c.profile, true, training, model_bytes).expected_duration_s);
  }
  return scheduling::class_cost(std::move(task_seconds));
}

RoundDriver::Pool RoundDriver::pool_of(const JobEntry& job, const std::set<ClientId>& busy,
                                       double now) const {
  const ClientRegistry::Eligible eligible = clients_.eligible(now, job.config.client_labels, busy);
  Pool pool;
  pool.eligible = eligible.available;
  pool.free = eligible.free;
  pool.can_ever_open = pool.eligible >= job.config.min_clients;
  pool.wanted =
      pool.can_ever_open
          ? std::min(pool.eligible,
                     scheduling::invited_count(job.config.clients_per_round, job.config.overcommit))
          : 0;
  return pool;
}

bool RoundDriver::fleet_overloaded(double now, size_t extra_wanted) {
  const std::set<ClientId> busy = jobs_.busy_clients();
  size_t wanted = extra_wanted;
  for (const JobEntry* job : jobs_.waiting_jobs()) wanted += pool_of(*job, busy, now).wanted;
  return scheduling::overloaded(wanted, clients_.eligible(now, {}, busy).free);
}

bool RoundDriver::open_in_turn(std::vector<JobEntry*> waiting, double now) {
  if (waiting.empty()) return false;
  std::set<ClientId> busy = jobs_.busy_clients();
  // Every job still without a round wants clients (also one that failed to open); `waiting`
  // holds those not yet tried in this tick.
  std::vector<JobEntry*> wanting = waiting;
  std::map<const JobEntry*, Pool> pools;
  auto measure = [&] {
    pools.clear();
    for (const JobEntry* job : wanting) pools[job] = pool_of(*job, busy, now);
  };
  measure();
  // A tenant is active while one of its jobs has a round open or could open one: a job that
  // no client can serve (too few eligible clients) banks its tenant no credit.
  std::set<TenantId> active = jobs_.tenants_with_open_rounds();
  for (const auto& [job, pool] : pools) {
    if (pool.can_ever_open) active.insert(job->tenant);
  }
  tenants_.set_active_tenants(active);
  bool opened_any = false;
  while (!waiting.empty()) {
    size_t wanted = 0;
    for (const auto& [job, pool] : pools) wanted += pool.wanted;
    const bool overload = scheduling::overloaded(wanted, clients_.eligible(now, {}, busy).free);
    std::vector<scheduling::WaitingJob> order;
    std::vector<JobEntry*> candidates;
    for (JobEntry* job : waiting) {
      const Pool& pool = pools.at(job);
      // A job that could not open even with every eligible client free waits for clients to
      // come; it must not hold the others back.
      if (!pool.can_ever_open) continue;
      const bool can_open = pool.free >= job->config.min_clients;
      order.push_back({job->id, job->tenant, can_open, can_open && pool.free >= pool.wanted});
      candidates.push_back(job);
    }
    if (order.empty()) break;
    const std::optional<size_t> next = tenants_.next_round(order, overload, now);
    if (!next) break;  // throttled, or waiting for the least-served job's clients
    JobEntry& job = *candidates[*next];
    waiting.erase(std::find(waiting.begin(), waiting.end(), &job));
    if (open(job, busy, now)) {
      opened_any = true;
      tenants_.round_opened(job.tenant, job.id, now, job.round_expected_client_s,
                            job.round_class_cost);
      wanting.erase(std::find(wanting.begin(), wanting.end(), &job));
      busy = jobs_.busy_clients();
      measure();
    }
  }
  return opened_any;
}

std::vector<rounds::PoolClient> RoundDriver::pool_for(const JobEntry& job,
                                                      const std::vector<ClientSnapshot>& clients,
                                                      const std::set<ClientId>& busy) {
  std::vector<rounds::PoolClient> pool;
  pool.reserve(clients.size());
  for (const ClientSnapshot& c : clients) {
    const bool eligible = c.available && rounds::labels_match(c.labels, job.config.client_labels);
    pool.push_back({&c.profile, eligible && !busy.count(c.profile.id)});
  }
  return pool;
}

bool RoundDriver::open(JobEntry& job, const std::set<ClientId>& busy, double now) {
  // A secure round refuses the public keys of the job's earlier rounds, wherever they ran. An
  // asynchronous job's buffer opens plain: its cohorts open their secure rounds (open_cohort).
  const bool secure = job.config.secure_aggregation && !job.config.asynchronous();
  Result<std::set<std::string>> used_keys = std::set<std::string>();
  if (secure) used_keys = store_.list_used_keys(job.id);
  if (!used_keys.ok()) {
    log_error(job_prefix(job) + "cannot read the public keys of its earlier secure rounds: " +
              used_keys.status().to_string());
    return false;
  }
  // The clients' profiles are copied when a job is about to select.
  const std::vector<ClientSnapshot> clients = clients_.profiles(now);
  rounds::JobRuntime& runtime = *job.runtime;
  const std::vector<rounds::PoolClient> pool = pool_for(job, clients, busy);
  const auto selection_start = std::chrono::steady_clock::now();
  auto opened = runtime.open_round(pool, now);
  // A buffer holds the tasks carried over; a running job's free slots fill at once.
  if (opened.ok() && *opened && (*opened)->buffered() &&
      jobs_.read(job, [](const JobStatus& s) { return s.state == JobState::kRunning; })) {
    rounds::Round& buffer = **opened;
    std::set<ClientId> excluded;
    for (const auto& task : buffer.tasks()) excluded.insert(task.client);
    auto slots =
        runtime.plan_slots(buffer.index(), runtime.free_slots(buffer), excluded, pool, now);
    if (!slots.ok()) opened = slots.status();
    if (slots.ok()) {
      for (rounds::Round::Assignment& a : *slots) buffer.assign(std::move(a.task), a.terms);
    }
  }
  const double selection_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - selection_start).count();
  if (!opened.ok()) {
    log_error(job_prefix(job) + "cannot open a round: " + opened.status().to_string());
    return false;
  }
  if (!*opened) return false;  // too few clients free: not counted as a selection
  metrics_.observe(metric::kSelectionSeconds, {}, selection_s);
  rounds::Round& round = **opened;
  Status stored = replication_.open(round_record(job.id, round, epoch_of(job)), round);
  if (!stored.ok()) {
    log_error(job_prefix(job) + "cannot open round " + std::to_string(round.index()) + ": " +
              stored.to_string());
    step_down_if_fenced(job, stored);
    return false;
  }
  job.round_expected_client_s = round.expected_client_seconds();
  job.round_class_cost = class_cost_of(job, clients);
  clients_.apply(round.selection_changes());
  log_opened(job, round, now);
  const std::vector<ClientId> invited = round.invited();
  if (secure) {
    // Before the round is published: its invitees' first messages find their secure round.
    secure_.open(secure_setup(job, round.index(), invited, now, std::move(used_keys).value()));
  }
  const rounds::Event opened_as = secure ? rounds::Event::kOpenedSecure : rounds::Event::kOpened;
  publish_outcome(job, opened_as, [&](JobStatus& status) {
    status.last_round = round.index();
    status.round = std::move(round);
  });
  tasks_ready_.notify(invited);
  return true;
}

SecureRound::Setup RoundDriver::secure_setup(const JobEntry& job, RoundIndex index,
                                             const std::vector<ClientId>& invitees, double now,
                                             std::set<std::string> used_keys) {
  SecureRound::Setup setup;
  setup.job = job.id;
  setup.round = index;
  setup.invitees = invitees;
  setup.vector_length = job.runtime->update_layout().layout.element_count();
  setup.opened_at = now;
  setup.config = *job.config.secure_aggregation;
  setup.threads = job.config.aggregation.threads;
  setup.used_public_keys = std::move(used_keys);
  setup.signing_keys = clients_.signing_keys(invitees);
  // A cohort's inputs are computed before its round opens: they are waited for as a key
  // stage is, stage_seconds at most.
  setup.inputs_ready = job.config.asynchronous();
  if (replication_.shared()) {
    setup.share_messages = [this, id = job.id, index](
                               const char* kind, const std::map<ClientId, std::string>& messages) {
      return replication_.publish_stage(id, index, kind, messages);
    };
  }
  setup.record_keys = [this, id = job.id, index](const std::set<std::string>& keys) {
    return store_.put_used_keys(id, index, keys, SecureRounds::kKeptRounds);
  };
  return setup;
}

bool RoundDriver::open_cohort(JobEntry& job, double now) {
  Result<std::set<std::string>> used_keys = store_.list_used_keys(job.id);
  if (!used_keys.ok()) {
    log_error(job_prefix(job) + "cannot read the public keys of its earlier secure rounds: " +
              used_keys.status().to_string());
    return false;
  }
  // Decide: the K earliest ready clients (only this thread takes them into a cohort).
  struct Cohort {
    RoundIndex index = 0;
    std::vector<ClientId> members;
  };
  const Cohort cohort = jobs_.read(job, [&](const JobStatus& status) {
    Cohort c;
    if (!status.round || status.phase != rounds::Phase::kOpen) return c;
    const rounds::Round& buffer = *status.round;
    if (buffer.ready().size() < buffer.target()) return c;
    c.index = buffer.index();
    c.members.assign(buffer.ready().begin(), buffer.ready().begin() + buffer.target());
    return c;
  });
  if (cohort.members.empty()) return false;
  // Before the cohort is published: its members' first messages find their secure round.
  secure_.open(secure_setup(job, cohort.index, cohort.members, now, std::move(used_keys).value()));
  log_info(job_prefix(job) + "buffer " + std::to_string(cohort.index) + ": a cohort of " +
           std::to_string(cohort.members.size()) + " ready updates opens its secure round");
  publish_outcome(job, rounds::Event::kCohortOpened, [&](JobStatus& status) {
    status.round->open_cohort(cohort.members, now);
  });
  tasks_ready_.notify(cohort.members);
  return true;
}

bool RoundDriver::refill(JobEntry& job, const std::vector<ClientSnapshot>& clients,
                         std::set<ClientId>& busy, double now) {
  rounds::JobRuntime& runtime = *job.runtime;
  // Decide: the buffer's free slots and the clients it already has.
  struct Slots {
    RoundIndex index = 0;
    size_t free = 0;
    std::set<ClientId> excluded;
  };
  const Slots slots = jobs_.read(job, [&](const JobStatus& status) {
    Slots out;
    if (!status.round || !status.round->buffered() || status.phase != rounds::Phase::kOpen ||
        status.state != JobState::kRunning) {
      return out;
    }
    const rounds::Round& buffer = *status.round;
    out.index = buffer.index();
    out.free = runtime.free_slots(buffer);
    for (const auto& task : buffer.tasks()) out.excluded.insert(task.client);
    return out;
  });
  if (slots.free == 0) return false;
  // Select and plan without a lock.
  auto planned = runtime.plan_slots(slots.index, slots.free, slots.excluded,
                                    pool_for(job, clients, busy), now);
  if (!planned.ok()) {
    log_error(job_prefix(job) + "cannot refill buffer " + std::to_string(slots.index) + ": " +
              planned.status().to_string());
    return false;
  }
  // Publish into the same buffer, unless it moved on meanwhile; its plan for the others.
  std::vector<ClientId> invited;
  double expected_s = 0;
  json plan;
  storage::Epoch epoch = storage::kUnleased;
  jobs_.update(job, [&](JobStatus& status) {
    if (!status.round || status.round->index() != slots.index || status.round->closed()) return;
    for (rounds::Round::Assignment& a : *planned) {
      if (status.round->task_for(a.task.client) != nullptr) continue;
      invited.push_back(a.task.client);
      expected_s += std::max(0.0, a.task.expected_duration_s);
      status.round->assign(std::move(a.task), a.terms);
    }
    if (!invited.empty() && replication_.shared()) plan = rounds::round_plan_json(*status.round);
    epoch = status.epoch;
  });
  if (invited.empty()) return false;
  if (!plan.is_null()) {
    Status shared = replication_.replan(job.id, slots.index, plan, epoch);
    if (!shared.ok()) {
      // The others serve the tasks they know; these are served here until the next refill.
      log_warn(job_prefix(job) + "cannot share the tasks of buffer " + std::to_string(slots.index) +
               ": " + shared.to_string());
      step_down_if_fenced(job, shared);
    }
  }
  std::vector<rounds::ProfileChange> selected;
  for (ClientId id : invited) {
    selected.push_back({rounds::ProfileChange::Kind::kSelected, id, slots.index, {}, {}});
    busy.insert(id);
  }
  clients_.apply(selected);
  job.round_expected_client_s += expected_s;
  tenants_.slots_opened(job.tenant, job.id, expected_s, job.round_class_cost);
  tasks_ready_.notify(invited);
  return true;
}

bool RoundDriver::refill_in_turn(std::vector<JobEntry*> wanting, double now) {
  if (wanting.empty()) return false;
  std::set<ClientId> busy = jobs_.busy_clients();
  if (clients_.eligible(now, {}, busy).free == 0) return false;
  const std::vector<ClientSnapshot> clients = clients_.profiles(now);
  bool refilled = false;
  // One batch a job, the least-served tenant's first; a slot is never throttled.
  while (!wanting.empty()) {
    std::vector<scheduling::WaitingJob> order;
    for (const JobEntry* job : wanting) order.push_back({job->id, job->tenant, true, true});
    const std::optional<size_t> next = tenants_.next_round(order, /*overload=*/false, now);
    if (!next) break;
    JobEntry& job = *wanting[*next];
    wanting.erase(wanting.begin() + static_cast<std::ptrdiff_t>(*next));
    refilled |= refill(job, clients, busy, now);
  }
  return refilled;
}

}  // namespace fedcase::server
