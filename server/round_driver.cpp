#include "server/round_driver.h"

#include <chrono>
#include <cstdio>
#include <set>

#include "common/log.h"
#include "rounds/evaluation.h"
#include "scheduling/fair_share.h"
#include "scheduling/round_plan.h"
#include "scheduling/selection.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// Contacts refresh availability in memory; a client's last contact is saved at most this often,
// in batches, so a large fleet's heartbeats do not turn into fsyncs. The profiles of a round's
// invitees are saved when it closes.
constexpr double kSaveContactsEvery = 30.0;
// How often a tick looks for contacts to save (ticks come every 50 ms).
constexpr double kFlushContactsEvery = 1.0;

std::string job_prefix(const JobEntry& job) { return "job " + std::to_string(job.id) + ": "; }

// Whether a round of `job` must wait for the server's evaluation of the previous model before
// it may commit: the job has a target accuracy on the test set and that evaluation is pending.
// Caller holds JobTable::mu.
bool target_unknown(const JobEntry& job) {
  return job.config.target_accuracy > 0 && job.config.evaluation.target == "server" &&
         job.evaluations_pending > 0;
}

storage::RoundRecord open_record(JobId job, const rounds::Round& r) {
  return {job,          r.index(), RoundState::kOpen, r.base_version(), r.invited(), r.opened_at(),
          r.deadline(), 0,         json::object()};
}

}  // namespace

struct RoundDriver::Closing {
  JobEntry* job = nullptr;
  rounds::Round round;
  std::string stop_reason;  // non-empty: fail the round for this reason
};

RoundDriver::RoundDriver(JobTable& jobs, ClientRegistry& clients, TenantRegistry& tenants,
                         storage::Store& store, ModelEvaluator& evaluator,
                         TaskNotifier& tasks_ready, Metrics& metrics, Clock clock)
    : jobs_(jobs),
      clients_(clients),
      tenants_(tenants),
      store_(store),
      evaluator_(evaluator),
      tasks_ready_(tasks_ready),
      metrics_(metrics),
      clock_(std::move(clock)) {}

RoundDriver::~RoundDriver() { stop(); }

void RoundDriver::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stop_ = false;
  }
  thread_ = std::thread([this] {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(wake_mu_);
        wake_cv_.wait_for(lock, std::chrono::milliseconds(50), [&] { return stop_ || woken_; });
        if (stop_) return;
        woken_ = false;
      }
      tick();
    }
  });
}

void RoundDriver::stop() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    stop_ = true;
  }
  wake_cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void RoundDriver::wake() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    woken_ = true;
  }
  wake_cv_.notify_one();
}

void RoundDriver::tick() {
  std::lock_guard<std::mutex> serial(tick_mu_);
  const double now = clock_();
  std::vector<Closing> closing;
  std::vector<JobEntry*> opening;
  {
    std::lock_guard<std::mutex> lock(jobs_.mu);
    for (auto& [id, entry] : jobs_.jobs) {
      JobEntry& job = *entry;
      if (job.concluding) continue;
      if (!job.round) {
        if (job.state == JobState::kRunning) opening.push_back(&job);
        continue;
      }
      std::string stop_reason;
      if (job.state == JobState::kCancelled) stop_reason = "job cancelled";
      if (job.state == JobState::kFinished) stop_reason = "job reached its target";
      if (!stop_reason.empty()) job.round->close();
      if (!job.round->due(now)) continue;
      // Whether the previous model reached the target decides whether this round may commit.
      if (stop_reason.empty() && target_unknown(job)) continue;
      closing.push_back({&job, std::move(*job.round), stop_reason});
      job.round.reset();
      job.concluding = true;
    }
  }
  for (Closing& c : closing) conclude(c, now);
  open_in_turn(std::move(opening), now);
  if (now - last_flush_ >= kFlushContactsEvery) {
    clients_.flush(now, kSaveContactsEvery);
    last_flush_ = now;
  }
}

void RoundDriver::conclude_all() {
  std::lock_guard<std::mutex> serial(tick_mu_);
  const double now = clock_();
  std::vector<Closing> closing;
  {
    std::lock_guard<std::mutex> lock(jobs_.mu);
    for (auto& [id, entry] : jobs_.jobs) {
      JobEntry& job = *entry;
      if (job.concluding || !job.round) continue;
      job.round->close();
      if (!job.round->due(now)) continue;
      std::string stop_reason = "coordinator stopped";
      if (job.state == JobState::kCancelled) stop_reason = "job cancelled";
      if (job.state == JobState::kFinished) stop_reason = "job reached its target";
      const bool may_commit = job.state == JobState::kRunning && !target_unknown(job) &&
                              job.round->accepted() >= job.config.min_updates;
      closing.push_back({&job, std::move(*job.round), may_commit ? "" : stop_reason});
      job.round.reset();
      job.concluding = true;
    }
  }
  for (Closing& c : closing) conclude(c, now);
}

double RoundDriver::class_cost_of(const JobEntry& job, const std::vector<ClientSnapshot>& clients) {
  // The coordinator's priors, never the job's own: a job's config must not set its price.
  scheduling::TrainingParams training = job.config.training;
  training.priors = scheduling::TrainingParams{}.priors;
  const uint64_t model_bytes = job.model->blob.size();
  std::vector<double> task_seconds;
  for (const ClientSnapshot& c : clients) {
    if (!c.available || !rounds::labels_match(c.labels, job.config.client_labels)) continue;
    task_seconds.push_back(
        scheduling::make_candidate(c.profile, true, training, model_bytes).expected_duration_s);
  }
  return scheduling::class_cost(std::move(task_seconds));
}

RoundDriver::Pool RoundDriver::pool_of(const JobEntry& job,
                                       const std::vector<ClientSnapshot>& clients,
                                       const std::set<ClientId>& busy) {
  Pool pool;
  for (const ClientSnapshot& c : clients) {
    if (!c.available || !rounds::labels_match(c.labels, job.config.client_labels)) continue;
    ++pool.eligible;
    pool.free += !busy.count(c.profile.id);
  }
  pool.can_ever_open = pool.eligible >= job.config.min_clients;
  pool.wanted =
      pool.can_ever_open
          ? std::min(pool.eligible,
                     scheduling::invited_count(job.config.clients_per_round, job.config.overcommit))
          : 0;
  return pool;
}

std::vector<JobEntry*> RoundDriver::waiting_jobs() {
  std::vector<JobEntry*> waiting;
  std::lock_guard<std::mutex> lock(jobs_.mu);
  for (const auto& [id, job] : jobs_.jobs) {
    if (!job->round && !job->concluding && job->state == JobState::kRunning) {
      waiting.push_back(job.get());
    }
  }
  return waiting;
}

size_t RoundDriver::free_clients(const std::vector<ClientSnapshot>& clients,
                                 const std::set<ClientId>& busy) {
  size_t free = 0;
  for (const ClientSnapshot& c : clients) free += c.available && !busy.count(c.profile.id);
  return free;
}

bool RoundDriver::fleet_overloaded(double now, size_t extra_wanted) {
  const std::vector<ClientSnapshot> clients = clients_.profiles(now);
  const std::set<ClientId> busy = busy_clients();
  size_t wanted = extra_wanted;
  for (const JobEntry* job : waiting_jobs()) wanted += pool_of(*job, clients, busy).wanted;
  return scheduling::overloaded(wanted, free_clients(clients, busy));
}

std::set<ClientId> RoundDriver::busy_clients() {
  // A client holds one task at a time: those invited by an open round are busy until they
  // have delivered their update there.
  std::set<ClientId> busy;
  std::lock_guard<std::mutex> lock(jobs_.mu);
  for (const auto& [id, job] : jobs_.jobs) {
    if (!job->round) continue;
    for (const auto& task : job->round->tasks()) {
      if (job->round->holds_task(task.client)) busy.insert(task.client);
    }
  }
  return busy;
}

void RoundDriver::open_in_turn(std::vector<JobEntry*> waiting, double now) {
  for (size_t i = waiting.size(); i-- > 0;) {
    if (waiting[i]->runtime->last_round() < waiting[i]->config.rounds) continue;
    finish(*waiting[i]);  // its round cap is reached
    waiting.erase(waiting.begin() + i);
  }
  const std::vector<ClientSnapshot> clients = clients_.profiles(now);
  std::set<ClientId> busy = busy_clients();
  // Every job still without a round wants clients (also one that failed to open); `waiting`
  // holds those not yet tried in this tick.
  std::vector<JobEntry*> wanting = waiting;
  std::map<const JobEntry*, Pool> pools;
  auto measure = [&] {
    pools.clear();
    for (const JobEntry* job : wanting) pools[job] = pool_of(*job, clients, busy);
  };
  measure();
  // A tenant is active while one of its jobs has a round open or could open one: a job that
  // no client can serve (too few eligible clients) banks its tenant no credit.
  std::set<TenantId> active;
  {
    std::lock_guard<std::mutex> lock(jobs_.mu);
    for (const auto& [id, job] : jobs_.jobs) {
      if (job->round) active.insert(job->tenant);
    }
  }
  for (const auto& [job, pool] : pools) {
    if (pool.can_ever_open) active.insert(job->tenant);
  }
  tenants_.set_active_tenants(active);
  while (!waiting.empty()) {
    size_t wanted = 0;
    for (const auto& [job, pool] : pools) wanted += pool.wanted;
    const bool overload = scheduling::overloaded(wanted, free_clients(clients, busy));
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
    if (open(job, clients, busy, now)) {
      tenants_.round_opened(job.tenant, job.id, now, job.round_expected_client_s,
                            job.round_class_cost);
      wanting.erase(std::find(wanting.begin(), wanting.end(), &job));
      busy = busy_clients();
      measure();
    }
  }
}

bool RoundDriver::open(JobEntry& job, const std::vector<ClientSnapshot>& clients,
                       const std::set<ClientId>& busy, double now) {
  rounds::JobRuntime& runtime = *job.runtime;
  std::vector<rounds::PoolClient> pool;
  pool.reserve(clients.size());
  for (const ClientSnapshot& c : clients) {
    const bool eligible = c.available && rounds::labels_match(c.labels, job.config.client_labels);
    pool.push_back({&c.profile, eligible && !busy.count(c.profile.id)});
  }
  const auto selection_start = std::chrono::steady_clock::now();
  auto opened = runtime.open_round(pool, now);
  const double selection_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - selection_start).count();
  if (!opened.ok()) {
    log_error(job_prefix(job) + "cannot open a round: " + opened.status().to_string());
    return false;
  }
  if (!*opened) return false;  // too few clients free: not counted as a selection
  metrics_.observe(metric::kSelectionSeconds, {}, selection_s);
  rounds::Round& round = **opened;
  Status stored = store_.open_round(open_record(job.id, round));
  if (!stored.ok()) {
    log_error(job_prefix(job) + "cannot open round " + std::to_string(round.index()) + ": " +
              stored.to_string());
    return false;
  }
  job.round_expected_client_s = round.expected_client_seconds();
  job.round_class_cost = class_cost_of(job, clients);
  clients_.apply(round.selection_changes());
  log_info(job_prefix(job) + "round " + std::to_string(round.index()) + " opened with " +
           std::to_string(round.tasks().size()) + " invited of " +
           std::to_string(round.available()) + " available, deadline in " +
           std::to_string(static_cast<int>(round.deadline() - now)) + " s");
  const std::vector<ClientId> invited = round.invited();
  {
    std::lock_guard<std::mutex> lock(jobs_.mu);
    job.last_round = round.index();
    job.round = std::move(round);
  }
  tasks_ready_.notify(invited);
  return true;
}

void RoundDriver::conclude(Closing& c, double now) {
  const auto start = std::chrono::steady_clock::now();
  JobEntry& job = *c.job;
  rounds::JobRuntime& runtime = *job.runtime;
  tenants_.round_concluded(job.tenant, job.id, job.round_expected_client_s,
                           c.round.client_seconds(now), job.round_class_cost);
  rounds::Conclusion k = c.stop_reason.empty() ? runtime.conclude(c.round, now)
                                               : runtime.fail(c.round, now, c.stop_reason);
  clients_.apply(k.profile_changes);
  storage::RoundRecord record = open_record(job.id, c.round);
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
      Status failed = store_.fail_round(record);
      if (!failed.ok())
        log_error(job_prefix(job) + "cannot record failed round: " + failed.to_string());
    }
  } else {
    Status failed = store_.fail_round(record);
    if (!failed.ok())
      log_error(job_prefix(job) + "cannot record failed round: " + failed.to_string());
  }
  clients_.save(k.invited, now);

  const bool committed = record.state == RoundState::kCommitted;
  const char* outcome = committed ? "committed" : "failed";
  metrics_.add(metric::kRounds, {{"job", std::to_string(job.id)}, {"outcome", outcome}});
  metrics_.observe(metric::kRoundSeconds, {{"outcome", outcome}}, now - record.opened_at);
  {
    std::lock_guard<std::mutex> lock(jobs_.mu);
    job.concluding = false;
    job.policy_state = runtime.policy_state();
    if (committed) {
      job.model = runtime.model();
      job.privacy = privacy_view(runtime);
    }
  }
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

void RoundDriver::evaluate(JobEntry& job, std::shared_ptr<const rounds::GlobalModel> model,
                           json timing) {
  {
    std::lock_guard<std::mutex> lock(jobs_.mu);
    job.evaluations_pending += 1;
  }
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
    std::lock_guard<std::mutex> lock(jobs_.mu);
    job.evaluations_pending -= 1;
    return;
  }
  const ml::EvalResult& e = *evaluation;
  json metrics = {
      {"test_accuracy", e.accuracy}, {"test_loss", e.loss}, {"test_samples", e.samples}};
  metrics.update(timing);
  Status s = store_.add_round_metrics(job.id, version, metrics);
  if (!s.ok()) log_error(job_prefix(job) + "cannot record evaluation: " + s.to_string());
  char line[160];
  std::snprintf(line, sizeof(line), "job %llu: round %llu model accuracy %.4f, loss %.4f",
                static_cast<unsigned long long>(job.id), static_cast<unsigned long long>(version),
                e.accuracy, e.loss);
  log_info(line);
  const bool scored = job.config.evaluation.target == "server";  // else federated figures count
  const bool reached =
      scored && job.config.target_accuracy > 0 && e.accuracy >= job.config.target_accuracy;
  // Finished before the pending count drops: a round held back by this evaluation must see
  // the job finished, never a job with nothing pending that may commit it.
  if (reached) finish(job);
  {
    std::lock_guard<std::mutex> lock(jobs_.mu);
    job.evaluations_pending -= 1;
    if (scored) job.last_accuracy = e.accuracy;
  }
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
  {
    std::lock_guard<std::mutex> lock(jobs_.mu);
    job.last_accuracy = accuracy;
  }
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
