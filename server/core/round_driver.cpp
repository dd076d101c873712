#include "server/core/round_driver.h"

#include <chrono>
#include <cstdio>
#include <set>

#include "common/log.h"
#include "protocol/update_meta.h"
#include "rounds/evaluation.h"
#include "rounds/upload.h"
#include "scheduling/fair_share.h"
#include "scheduling/round_plan.h"
#include "scheduling/selection.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// Contacts refresh availability in memory; the last contacts are saved at most this often, in
// one batch, so a large fleet's heartbeats do not turn into fsyncs. The profiles of a round's
// invitees are saved when it closes.
constexpr double kSaveContactsEvery = 30.0;

// How often the owner of a shared round reads its admission from the store (K recorded, the
// partials written).
constexpr double kSharedPollS = 0.25;

std::string job_prefix(const JobEntry& job) { return "job " + std::to_string(job.id) + ": "; }

// Whether a round of `job` must wait for the server's evaluation of the previous model before
// it may commit: the job has a target accuracy on the test set and that evaluation is pending.
bool target_unknown(const JobEntry& job, const JobStatus& status) {
  return job.config.target_accuracy > 0 && job.config.evaluation.target == "server" &&
         status.evaluations_pending > 0;
}

// Why a round of a job in `state` is stopped rather than concluded ("": it is not).
std::string stop_reason(JobState state) {
  if (state == JobState::kCancelled) return "job cancelled";
  if (state == JobState::kFinished) return "job reached its target";
  return std::string();
}

std::optional<double> earliest(std::optional<double> a, std::optional<double> b) {
  if (!a) return b;
  if (!b) return a;
  return std::min(*a, *b);
}

// A buffer's deadline in its record is its earliest task's at the open. Written at `epoch`.
storage::RoundRecord open_record(JobId job, const rounds::Round& r, storage::Epoch epoch) {
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

}  // namespace

struct RoundDriver::Closing {
  JobEntry* job = nullptr;
  rounds::Round round;
  std::string stop_reason;              // non-empty: fail the round for this reason
  std::shared_ptr<SecureRound> secure;  // a secure round's stages (null: a plain round)
  bool shared = false;                  // the other replicas' partials are merged first
};

RoundDriver::RoundDriver(JobTable& jobs, ClientRegistry& clients, TenantRegistry& tenants,
                         storage::Store& store, ModelEvaluator& evaluator,
                         TaskNotifier& tasks_ready, SecureRounds& secure, Metrics& metrics,
                         Clock clock)
    : jobs_(jobs),
      clients_(clients),
      tenants_(tenants),
      store_(store),
      evaluator_(evaluator),
      tasks_ready_(tasks_ready),
      secure_(secure),
      metrics_(metrics),
      clock_(std::move(clock)),
      last_flush_(clock_()) {}

RoundDriver::~RoundDriver() { stop(); }

void RoundDriver::set_pass(std::function<double(double now)> pass) { pass_ = std::move(pass); }

void RoundDriver::set_replica(std::string replica, double lease_s) {
  replica_ = std::move(replica);
  lease_s_ = lease_s;
}

void RoundDriver::start() {
  if (thread_.joinable()) return;
  {
    MutexLock lock(wake_mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] { run(); });
}

void RoundDriver::run() {
  while (true) {
    const std::optional<double> next = tick();
    MutexLock lock(wake_mu_);
    while (!stop_ && !woken_) {
      if (!next) {
        wake_cv_.wait(wake_mu_);
        continue;
      }
      const double wait_s = *next - clock_();
      if (wait_s <= 0) break;
      wake_cv_.wait_until(wake_mu_,
                          std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s));
    }
    if (stop_) return;
    woken_ = false;
  }
}

void RoundDriver::stop() {
  {
    MutexLock lock(wake_mu_);
    stop_ = true;
  }
  wake_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void RoundDriver::wake() {
  {
    MutexLock lock(wake_mu_);
    woken_ = true;
  }
  wake_cv_.notify_one();
}

std::optional<double> RoundDriver::tick() {
  MutexLock serial(tick_mu_);
  const double now = clock_();
  const std::optional<double> next_pass = pass_ ? std::optional<double>(pass_(now)) : std::nullopt;
  const bool shared_open = check_shared_rounds(now);
  // Jobs whose round concludes now open their next one in the next tick, right after this.
  std::vector<JobEntry*> waiting = jobs_.waiting_jobs();
  std::vector<Closing> closing;
  std::vector<std::pair<JobEntry*, RoundIndex>> closing_admission;
  std::vector<rounds::ProfileChange> expired;
  // Secure rounds: the key stages close when due; masked inputs close below, under no lock.
  const bool stages_closed = secure_.advance(now);
  struct InputsClosing {
    JobEntry* job;
    std::shared_ptr<SecureRound> secure;
    bool shared;  // the other replicas' masked partials are merged first
  };
  std::vector<InputsClosing> inputs_closing;
  jobs_.update_each([&](JobEntry& job, JobStatus& status) {
    if (status.concluding || !status.round) return;
    if (!status.owned) {
      // Stepped down: the new owner concludes the round; it is forgotten here, unwritten, once
      // no upload is being folded into it. (A copy of the owner's shared round is followed
      // by SharedRounds.)
      if (!status.mirrored && status.round->due(now)) status.round.reset();
      return;
    }
    std::string reason = stop_reason(status.state);
    if (!reason.empty()) status.round->close();
    std::shared_ptr<SecureRound> secure =
        job.config.secure_aggregation ? secure_.find(job.id) : nullptr;
    if (secure && secure->index() != status.round->index()) secure = nullptr;
    if (secure && reason.empty() && secure->stage() == SecureRound::Stage::kFailed) {
      reason = "secure aggregation failed: " + secure->failure();
      status.round->close();
    }
    if (status.shared_round) {
      // Admission closes in the store first; the round concludes once the replicas holding
      // its updates wrote their partials, or lease_s after the close.
      JobEntry::SharedClose& shared = job.shared_close;
      if (!shared.closed_at) {
        if (status.round->due(now) || shared.filled || !reason.empty()) {
          status.round->close();
          closing_admission.emplace_back(&job, status.round->index());
        }
        return;
      }
      const bool waited_out = now >= *shared.closed_at + lease_s_;
      if (!shared.partials_in && !waited_out && reason.empty()) return;
      if (status.spoilt && reason.empty()) {
        reason = "an update was folded but its admission could not be recorded";
      }
    }
    if (status.round->buffered()) {
      for (auto& change : job.runtime->expire(*status.round, now)) expired.push_back(change);
    }
    if (secure && reason.empty()) {
      const SecureRound::Stage stage = secure->stage();
      if (stage == SecureRound::Stage::kMaskedInput) {
        // The Round stays, closed, through the unmask stage: no task or upload reaches it. A
        // shared round gets here once its admission closed and the partials are in.
        const bool all_in = secure->inputs_complete() && !status.round->uploads_in_flight();
        if (status.round->due(now) || all_in || status.shared_round) {
          status.round->close();
          inputs_closing.push_back({&job, secure, status.shared_round});
        }
        return;
      } else if (stage != SecureRound::Stage::kUnmask || !secure->unmask_due(now)) {
        return;  // a key stage (advance() closes it), or the unmask answers still coming
      }
    }
    if (!status.round->due(now)) return;
    // Whether the previous model reached the target decides whether this round may commit.
    if (reason.empty() && target_unknown(job, status)) return;
    closing.push_back(
        {&job, std::move(*status.round), reason, std::move(secure), status.shared_round});
    status.round.reset();
    status.shared_round = false;
    status.spoilt = false;
    status.concluding = true;
  });
  for (const auto& [job, index] : closing_admission) {
    Status closed = store_.close_admission(job->id, index, epoch_of(*job));
    if (closed.ok()) {
      job->shared_close.closed_at = now;
      job->shared_close.next_check = now;
    } else {
      log_warn(job_prefix(*job) + "cannot close round " + std::to_string(index) +
               " to admission: " + closed.to_string());
      step_down_if_fenced(*job, closed);
    }
  }
  clients_.apply(expired);
  for (const InputsClosing& c : inputs_closing) {
    if (c.shared) c.job->shared_close.masked_merged = merge_masked_partials(*c.job, *c.secure);
    Status closed = c.secure->close_inputs(now);
    if (!closed.ok()) log_warn(closed.message());
  }
  for (Closing& c : closing) conclude(c, now);
  open_in_turn(std::move(waiting), now);
  refill_in_turn(now);
  // A secure round that moved on may have its next step at once (a failure to conclude).
  const bool again = !closing.empty() || stages_closed || !inputs_closing.empty();
  std::optional<double> next = again ? std::optional<double>(now) : std::nullopt;
  if (shared_open) next = earliest(next, now + kSharedPollS);
  next = earliest(next, earliest(jobs_.next_deadline(now), tenants_.throttle_ends(now)));
  next = earliest(next, secure_.next_deadline(now));
  next = earliest(next, next_pass);
  if (clients_.has_unsaved()) {
    if (now - last_flush_ >= kSaveContactsEvery) {
      clients_.flush();
      last_flush_ = now;
    } else {
      next = earliest(next, last_flush_ + kSaveContactsEvery);
    }
  }
  return next;
}

void RoundDriver::conclude_all() {
  MutexLock serial(tick_mu_);
  const double now = clock_();
  std::vector<Closing> closing;
  jobs_.update_each([&](JobEntry& job, JobStatus& status) {
    if (status.concluding || !status.round) return;
    if (!status.owned) {  // stepped down: the new owner concludes it
      status.round.reset();
      return;
    }
    status.round->close();
    if (!status.round->due(now)) return;
    // A shared round's other partials are not gathered at a stop: it fails, and the replica
    // that takes the job over opens the next one.
    const std::string reason =
        status.shared_round ? "coordinator stopped" : stop_reason(status.state);
    // A secure round's sum is known only after its unmask stage: it cannot commit now.
    std::shared_ptr<SecureRound> secure = secure_.find(job.id);
    const bool may_commit = !status.shared_round && status.state == JobState::kRunning &&
                            !target_unknown(job, status) &&
                            status.round->accepted() >= job.config.min_updates && !secure;
    closing.push_back({&job, std::move(*status.round),
                       may_commit       ? ""
                       : reason.empty() ? "coordinator stopped"
                                        : reason,
                       secure});
    status.round.reset();
    status.concluding = true;
  });
  for (Closing& c : closing) conclude(c, now);
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

void RoundDriver::open_in_turn(std::vector<JobEntry*> waiting, double now) {
  for (size_t i = waiting.size(); i-- > 0;) {
    if (waiting[i]->runtime->last_round() < waiting[i]->config.rounds) continue;
    finish(*waiting[i]);  // its round cap is reached
    waiting.erase(waiting.begin() + i);
  }
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
    if (order.empty()) return;
    const std::optional<size_t> next = tenants_.next_round(order, overload, now);
    if (!next) return;  // throttled, or waiting for the least-served job's clients
    JobEntry& job = *candidates[*next];
    waiting.erase(std::find(waiting.begin(), waiting.end(), &job));
    if (open(job, busy, now)) {
      tenants_.round_opened(job.tenant, job.id, now, job.round_expected_client_s,
                            job.round_class_cost);
      wanting.erase(std::find(wanting.begin(), wanting.end(), &job));
      busy = jobs_.busy_clients();
      measure();
    }
  }
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
  if (auto unrecorded = unrecorded_failures_.find(job.id);
      unrecorded != unrecorded_failures_.end()) {
    const Status failed = store_.fail_round(unrecorded->second);
    if (failed.code() == Code::kUnavailable) return false;  // still open in the store
    if (failed.ok()) {
      log_info(job_prefix(job) + "recorded the failure of round " +
               std::to_string(unrecorded->second.index) + " at last");
    }
    unrecorded_failures_.erase(unrecorded);  // written, or refused for good
    step_down_if_fenced(job, failed);
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
  storage::RoundRecord record = open_record(job.id, round, epoch_of(job));
  // A leased owner's round is served by every replica when the job allows it.
  const bool shared =
      record.epoch != storage::kUnleased && rounds::owner_only_reason(job.config).empty();
  if (shared) {
    record.target = round.target();
    record.plan = rounds::round_plan_json(round);
  }
  Status stored = store_.open_round(record);
  if (!stored.ok()) {
    log_error(job_prefix(job) + "cannot open round " + std::to_string(round.index()) + ": " +
              stored.to_string());
    step_down_if_fenced(job, stored);
    return false;
  }
  job.round_expected_client_s = round.expected_client_seconds();
  job.round_class_cost = class_cost_of(job, clients);
  clients_.apply(round.selection_changes());
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
  const std::vector<ClientId> invited = round.invited();
  if (const auto& secure = job.config.secure_aggregation) {
    // Before the round is published: its invitees' first messages find their secure round.
    decltype(SecureRound::Setup::share_messages) share;
    if (shared) {
      share = [&store = store_, id = job.id, index = round.index()](
                  const char* kind, const std::map<ClientId, std::string>& messages) {
        std::vector<storage::StageMessage> out;
        for (const auto& [client, body] : messages) out.push_back({id, index, kind, client, body});
        return store.put_stage_messages(out);
      };
    }
    secure_.open(job.id, round.index(), *secure, invited, runtime.model()->layout.element_count(),
                 now, job.config.aggregation.threads, std::move(share));
  }
  job.shared_close = {};
  jobs_.update(job, [&](JobStatus& status) {
    status.last_round = round.index();
    status.round = std::move(round);
    status.shared_round = shared;
    status.mirrored = false;
    status.spoilt = false;
  });
  tasks_ready_.notify(invited);
  return true;
}

void RoundDriver::refill(JobEntry& job, const std::vector<ClientSnapshot>& clients,
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
    if (!status.round || !status.round->buffered() || status.state != JobState::kRunning) {
      return out;
    }
    const rounds::Round& buffer = *status.round;
    out.index = buffer.index();
    out.free = runtime.free_slots(buffer);
    for (const auto& task : buffer.tasks()) out.excluded.insert(task.client);
    return out;
  });
  if (slots.free == 0) return;
  // Select and plan without a lock.
  auto planned = runtime.plan_slots(slots.index, slots.free, slots.excluded,
                                    pool_for(job, clients, busy), now);
  if (!planned.ok()) {
    log_error(job_prefix(job) + "cannot refill buffer " + std::to_string(slots.index) + ": " +
              planned.status().to_string());
    return;
  }
  // Publish into the same buffer, unless it moved on meanwhile.
  std::vector<ClientId> invited;
  double expected_s = 0;
  jobs_.update(job, [&](JobStatus& status) {
    if (!status.round || status.round->index() != slots.index || status.round->closed()) return;
    for (rounds::Round::Assignment& a : *planned) {
      if (status.round->task_for(a.task.client) != nullptr) continue;
      invited.push_back(a.task.client);
      expected_s += std::max(0.0, a.task.expected_duration_s);
      status.round->assign(std::move(a.task), a.terms);
    }
  });
  if (invited.empty()) return;
  std::vector<rounds::ProfileChange> selected;
  for (ClientId id : invited) {
    selected.push_back({rounds::ProfileChange::Kind::kSelected, id, slots.index, {}, {}});
    busy.insert(id);
  }
  clients_.apply(selected);
  job.round_expected_client_s += expected_s;
  tenants_.slots_opened(job.tenant, job.id, expected_s, job.round_class_cost);
  tasks_ready_.notify(invited);
}

void RoundDriver::refill_in_turn(double now) {
  std::vector<JobEntry*> wanting;
  jobs_.update_each([&](JobEntry& job, JobStatus& status) {
    const bool refillable = status.round && status.round->buffered() && !status.concluding &&
                            status.state == JobState::kRunning &&
                            job.runtime->free_slots(*status.round) > 0;
    if (refillable) wanting.push_back(&job);
  });
  if (wanting.empty()) return;
  std::set<ClientId> busy = jobs_.busy_clients();
  if (clients_.eligible(now, {}, busy).free == 0) return;
  const std::vector<ClientSnapshot> clients = clients_.profiles(now);
  // One batch a job, the least-served tenant's first; a slot is never throttled.
  while (!wanting.empty()) {
    std::vector<scheduling::WaitingJob> order;
    for (const JobEntry* job : wanting) order.push_back({job->id, job->tenant, true, true});
    const std::optional<size_t> next = tenants_.next_round(order, /*overload=*/false, now);
    if (!next) return;
    JobEntry& job = *wanting[*next];
    wanting.erase(wanting.begin() + static_cast<std::ptrdiff_t>(*next));
    refill(job, clients, busy, now);
  }
}

void RoundDriver::conclude(Closing& c, double now) {
  const auto start = std::chrono::steady_clock::now();
  JobEntry& job = *c.job;
  rounds::JobRuntime& runtime = *job.runtime;
  tenants_.round_concluded(job.tenant, job.id, job.round_expected_client_s,
                           c.round.client_seconds(now), job.round_class_cost);
  if (c.secure && !c.stop_reason.empty()) c.secure->abort(c.stop_reason, now);
  json partials;
  if (c.shared && c.stop_reason.empty()) {
    // A secure round's masked partials were merged when its masked inputs closed.
    const std::set<std::string>& masked = job.shared_close.masked_merged;
    partials = merge_partials(job, c.round, [&](const storage::PartialRecord& p) -> Status {
      if (!c.secure) return c.round.aggregate()->merge_partial(p.sum, p.updates);
      return masked.count(p.replica) ? ok_status()
                                     : conflict("it was not merged when the masked inputs closed");
    });
  }
  rounds::Conclusion k = !c.stop_reason.empty() ? runtime.fail(c.round, now, c.stop_reason)
                         : c.secure             ? conclude_secure(c, now)
                                                : runtime.conclude(c.round, now);
  if (!partials.is_null()) k.metrics["partials"] = partials;
  if (c.secure) {
    k.metrics["secure_aggregation"] = c.secure->summary();
    secure_.close(job.id, *c.secure);
  }
  clients_.apply(k.profile_changes);
  storage::RoundRecord record = open_record(job.id, c.round, epoch_of(job));
  record.state = k.state;
  record.closed_at = now;
  record.metrics = k.metrics;
  if (k.state == RoundState::kCommitted) {
    const rounds::GlobalModel& m = *k.model;
    Status s = store_.commit_round(
        record, {job.id, m.version, m.blob, m.checksum, k.optimizer_state, now}, k.policy_state);
    if (s.ok()) {
      runtime.adopt(k);
    } else {
      runtime.abandon(k);
      record.state = RoundState::kFailed;
      record.metrics["failure"] = "commit failed: " + s.to_string();
      k.failure = record.metrics["failure"];
      // The commit's own refusal says whether to step down; record_failure logs its own.
      static_cast<void>(record_failure(job, record));
      step_down_if_fenced(job, s);
    }
  } else {
    step_down_if_fenced(job, record_failure(job, record));
  }
  clients_.save(k.invited);

  const bool committed = record.state == RoundState::kCommitted;
  const char* outcome = committed ? "committed" : "failed";
  metrics_.add(metric::kRounds, {{"job", std::to_string(job.id)}, {"outcome", outcome}});
  if (c.secure) {
    const json& summary = k.metrics["secure_aggregation"];
    metrics_.add(metric::kSecAggRounds,
                 {{"outcome", outcome}, {"stage", summary.value("failed_in", "done")}});
    for (const auto& [stage, count] : summary["dropouts"].items()) {
      metrics_.add(metric::kSecAggDropouts, {{"stage", stage}}, count.get<double>());
    }
  }
  metrics_.observe(metric::kRoundSeconds, {{"outcome", outcome}}, now - record.opened_at);
  // An asynchronous job's next buffer opens at once with the tasks still in flight, so that
  // their uploads find it: they were told to retry only while this conclusion ran.
  const bool reopen = c.round.buffered() && c.stop_reason.empty() &&
                      runtime.last_round() < job.config.rounds &&
                      jobs_.read(job, [](const JobStatus& status) { return status.active(); });
  if (reopen && open(job, jobs_.busy_clients(), now)) {
    tenants_.slots_opened(job.tenant, job.id, job.round_expected_client_s, job.round_class_cost);
  }
  jobs_.update(job, [&](JobStatus& status) {
    status.concluding = false;
    status.policy_state = runtime.policy_state();
    if (committed) {
      status.model = runtime.model();
      status.privacy = privacy_view(runtime);
    }
  });
  if (committed) {
    log_info(job_prefix(job) + "round " + std::to_string(record.index) + " committed with " +
             record.metrics["updates"].dump() + " updates after " +
             std::to_string(now - record.opened_at) + " s");
    if (job.config.evaluation.target == "federated") on_federated_evaluation(job, record);
    // The commit's duration (conclusion and store write) is recorded with the evaluation.
    const double commit_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (job.config.server_evaluated()) evaluate(job, runtime.model(), {{"commit_s", commit_s}});
  } else {
    log_warn(job_prefix(job) + "round " + std::to_string(record.index) + " failed: " + k.failure);
  }
}

void RoundDriver::wake_shared() {
  shared_woken_ = true;
  wake();
}

bool RoundDriver::check_shared_rounds(double now) {
  std::vector<std::pair<JobEntry*, RoundIndex>> due;
  bool open = false;
  const bool woken = shared_woken_.exchange(false);
  jobs_.update_each([&](JobEntry& job, const JobStatus& status) {
    if (!status.owned || !status.shared_round || !status.round || status.concluding) return;
    open = true;
    if (woken || now >= job.shared_close.next_check) due.emplace_back(&job, status.round->index());
  });
  for (const auto& [job, index] : due) {
    JobEntry::SharedClose& shared = job->shared_close;
    shared.next_check = now + kSharedPollS;
    std::shared_ptr<SecureRound> secure =
        job->config.secure_aggregation ? secure_.find(job->id) : nullptr;
    if (secure && secure->index() != index) secure = nullptr;
    if (secure) take_relayed(*job, *secure);
    auto admission = store_.round_admission(job->id, index);
    if (!admission.ok()) {
      log_warn(job_prefix(*job) + "cannot read the admission of round " + std::to_string(index) +
               ": " + admission.status().to_string());
      continue;
    }
    if (!shared.closed_at) {
      shared.filled = admission->target > 0 && admission->accepted() >= admission->target;
      // A secure round is filled too once every client that shared its keys sent its input.
      if (secure && secure->stage() == SecureRound::Stage::kMaskedInput) {
        shared.filled = shared.filled || admission->accepted() >= secure->sharer_count();
      }
      continue;
    }
    auto partials = store_.list_partials(job->id, index);
    if (!partials.ok()) continue;
    std::set<std::string> written;
    for (const auto& p : *partials) written.insert(p.replica);
    bool all_in = true;
    for (const auto& [replica, places] : admission->replicas) {
      const bool holds = places.accepted > 0 || places.reserved > 0;
      if (replica != replica_ && holds && !written.count(replica)) all_in = false;
    }
    shared.partials_in = all_in;
  }
  return open;
}

json RoundDriver::merge_partials(JobEntry& job, rounds::Round& round,
                                 const std::function<Status(const storage::PartialRecord&)>& merge) {
  const RoundIndex index = round.index();
  json summary = {{"merged", json::object()}, {"lost", json::object()}, {"bytes", 0}};
  auto partials = store_.list_partials(job.id, index);
  auto updates = store_.list_updates(job.id, index);
  if (!partials.ok() || !updates.ok()) {
    const Status& failed = partials.ok() ? updates.status() : partials.status();
    log_warn(job_prefix(job) + "cannot read the partials of round " + std::to_string(index) + ": " +
             failed.to_string());
  }
  // Each other replica's partial is decoded and merged; a replica whose partial is missing or
  // unusable loses its updates.
  std::set<std::string> merged;
  const std::vector<storage::PartialRecord> none;
  for (const storage::PartialRecord& p : partials.ok() ? *partials : none) {
    if (p.replica == replica_) continue;
    const Status added = merge(p);
    if (!added.ok()) {
      log_warn(job_prefix(job) + "cannot merge the partial of replica " + p.replica + " in round " +
               std::to_string(index) + ": " + added.to_string());
      continue;
    }
    merged.insert(p.replica);
    summary["merged"][p.replica] = p.updates;
    summary["bytes"] = summary["bytes"].get<uint64_t>() + p.sum.size();
    metrics_.add(metric::kPartials, {{"direction", "merged"}});
    metrics_.add(metric::kPartialBytes, {{"direction", "merged"}}, double(p.sum.size()));
  }
  // The merged replicas' updates count in the round as if this replica had admitted them.
  std::vector<rounds::ProfileChange> completed;
  uint64_t lost = 0;
  const uint64_t model_bytes = job.runtime->model()->blob.size();
  for (const storage::UpdateRecord& u :
       updates.ok() ? *updates : std::vector<storage::UpdateRecord>{}) {
    if (u.replica == replica_) continue;
    auto meta = protocol::read_update_meta(u.meta);
    if (!merged.count(u.replica) || !meta.ok() || round.task_for(u.client) == nullptr) {
      lost += 1;
      summary["lost"][u.replica] = summary["lost"].value(u.replica, 0) + 1;
      continue;
    }
    completed.push_back(round.accept(u.client, rounds::completion_report(*meta, model_bytes, 0, 0),
                                     u.received_at, 0, std::move(meta->evaluation)));
  }
  if (lost > 0) {
    metrics_.add(metric::kPartialUpdatesLost, {}, double(lost));
    log_warn(job_prefix(job) + "round " + std::to_string(index) + ": " + std::to_string(lost) +
             " admitted updates lost with the replicas that wrote no partial " +
             summary["lost"].dump());
  }
  clients_.apply(completed);
  return summary;
}

std::set<std::string> RoundDriver::merge_masked_partials(JobEntry& job, SecureRound& secure) {
  std::set<std::string> merged;
  auto partials = store_.list_partials(job.id, secure.index());
  if (!partials.ok()) {
    log_warn(job_prefix(job) + "cannot read the masked partials of round " +
             std::to_string(secure.index()) + ": " + partials.status().to_string());
    return merged;
  }
  for (const storage::PartialRecord& p : *partials) {
    if (p.replica == replica_) continue;
    const Status added = secure.merge_partial(p.sum);
    if (added.ok()) {
      merged.insert(p.replica);
    } else {
      log_warn(job_prefix(job) + "cannot merge the masked partial of replica " + p.replica +
               " in round " + std::to_string(secure.index()) + ": " + added.to_string());
    }
  }
  return merged;
}

void RoundDriver::take_relayed(JobEntry& job, SecureRound& secure) {
  const char* kind = nullptr;
  switch (secure.stage()) {
    case SecureRound::Stage::kAdvertiseKeys:
      kind = stage_kind::kKeys;
      break;
    case SecureRound::Stage::kShareKeys:
      kind = stage_kind::kShares;
      break;
    case SecureRound::Stage::kUnmask:
      kind = stage_kind::kUnmask;
      break;
    default:
      return;
  }
  auto messages = store_.list_stage_messages(job.id, secure.index(), kind);
  if (!messages.ok()) {
    log_warn(job_prefix(job) + "cannot read the relayed stage messages of round " +
             std::to_string(secure.index()) + ": " + messages.status().to_string());
    return;
  }
  for (const storage::StageMessage& m : *messages) {
    const Status taken = secure.receive_relayed(kind, m.client, m.body);
    if (!taken.ok() && taken.code() != Code::kConflict) {
      metrics_.add(metric::kSecAggMessagesRefused,
                   {{"stage", SecureRound::stage_name(secure.stage())},
                    {"reason", code_name(taken.code())}});
    }
  }
}

rounds::Conclusion RoundDriver::conclude_secure(Closing& c, double now) {
  rounds::JobRuntime& runtime = *c.job->runtime;
  Result<secagg::SecAggSum> sum = c.secure->finish(now);
  Status folded = sum.status();
  if (sum.ok()) {
    // The aggregate receives the sum alone: never an individual update.
    folded = c.round.aggregate()->add_sum(sum->weighted_sum.data(), sum->weighted_sum.size(),
                                          sum->total_weight, sum->survivors.size());
  }
  if (!folded.ok()) {
    return runtime.fail(c.round, now, "secure aggregation failed: " + folded.message());
  }
  return runtime.conclude(c.round, now);
}

Status RoundDriver::record_failure(JobEntry& job, const storage::RoundRecord& record) {
  Status failed = store_.fail_round(record);
  if (failed.ok()) return failed;
  log_error(job_prefix(job) + "cannot record failed round " + std::to_string(record.index) + ": " +
            failed.to_string());
  if (failed.code() == Code::kUnavailable) unrecorded_failures_[job.id] = record;
  return failed;
}

storage::Epoch RoundDriver::epoch_of(const JobEntry& job) const {
  return jobs_.read(job, [](const JobStatus& status) { return status.epoch; });
}

void RoundDriver::step_down_if_fenced(JobEntry& job, const Status& refused) {
  const storage::Epoch epoch = epoch_of(job);
  if (refused.code() != Code::kConflict || epoch == storage::kUnleased) return;
  log_warn(job_prefix(job) + "the store refused a write at lease epoch " + std::to_string(epoch) +
           " (" + refused.message() + "): stepping down as the job's owner");
  jobs_.update(job, [](JobStatus& status) { stop_owning(status); });
  metrics_.add(metric::kLeaseChanges, {{"change", "stepped_down"}});
}

void RoundDriver::evaluate(JobEntry& job, std::shared_ptr<const rounds::GlobalModel> model,
                           json timing) {
  jobs_.update(job, [](JobStatus& status) { status.evaluations_pending += 1; });
  const uint64_t version = model->version;
  const auto submitted = std::chrono::steady_clock::now();
  evaluator_.submit(
      job.evaluated, model->params,
      [this, &job, version, timing, submitted](const Result<ml::EvalResult>& e) {
        json with_eval = timing;
        with_eval["eval_s"] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted).count();
        on_evaluated(job, version, e, std::move(with_eval));
      });
}

void RoundDriver::on_evaluated(JobEntry& job, uint64_t version,
                               const Result<ml::EvalResult>& evaluation, json timing) {
  if (!evaluation.ok()) {
    log_error(job_prefix(job) + "cannot evaluate model " + std::to_string(version) + ": " +
              evaluation.status().to_string());
    jobs_.update(job, [](JobStatus& status) { status.evaluations_pending -= 1; });
    wake();  // a round held back by this evaluation may conclude now
    return;
  }
  const ml::EvalResult& e = *evaluation;
  json metrics = {
      {"test_accuracy", e.accuracy}, {"test_loss", e.loss}, {"test_samples", e.samples}};
  metrics.update(timing);
  const bool scored = job.config.evaluation.target == "server";  // else federated figures count
  // Published before it is recorded: a reader that sees the round's figures in the store
  // (job_detail reads the store first) then sees the job's accuracy up to date.
  if (scored) jobs_.update(job, [&](JobStatus& status) { status.last_accuracy = e.accuracy; });
  Status s = store_.add_round_metrics(job.id, version, metrics);
  if (!s.ok()) log_error(job_prefix(job) + "cannot record evaluation: " + s.to_string());
  char line[160];
  std::snprintf(line, sizeof(line), "job %llu: round %llu model accuracy %.4f, loss %.4f",
                static_cast<unsigned long long>(job.id), static_cast<unsigned long long>(version),
                e.accuracy, e.loss);
  log_info(line);
  const bool reached =
      scored && job.config.target_accuracy > 0 && e.accuracy >= job.config.target_accuracy;
  // Finished before the pending count drops: a round held back by this evaluation must see
  // the job finished, never a job with nothing pending that may commit it.
  if (reached) finish(job);
  jobs_.update(job, [](JobStatus& status) { status.evaluations_pending -= 1; });
  wake();
}

void RoundDriver::on_federated_evaluation(JobEntry& job, const storage::RoundRecord& round) {
  const std::optional<double> accuracy = rounds::recorded_accuracy(round.metrics, "federated");
  if (!accuracy) return;
  char line[160];
  std::snprintf(line, sizeof(line), "job %llu: round %llu federated accuracy %.4f of model %llu",
                static_cast<unsigned long long>(job.id),
                static_cast<unsigned long long>(round.index), *accuracy,
                static_cast<unsigned long long>(round.base_version));
  log_info(line);
  jobs_.update(job, [&](JobStatus& status) { status.last_accuracy = accuracy; });
  if (job.config.target_accuracy > 0 && *accuracy >= job.config.target_accuracy) finish(job);
}

void RoundDriver::finish(JobEntry& job) {
  auto finished = jobs_.transition(job, [](JobState state) -> Result<JobState> {
    if (state == JobState::kRunning || state == JobState::kPaused) return JobState::kFinished;
    return conflict("job is not active");  // cancelled or finished meanwhile: nothing to do
  });
  if (!finished.ok() && finished.status().code() != Code::kConflict) {
    log_error(job_prefix(job) + "cannot finish: " + finished.status().to_string());
  }
}

}  // namespace fedcase::server
