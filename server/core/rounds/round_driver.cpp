#include "server/core/rounds/round_driver.h"

#include <algorithm>
#include <chrono>

#include "common/log.h"

namespace fedcase::server {
namespace {

// Whether the job's round is a buffer (an asynchronous job's) with slots free for new tasks.
bool buffer_has_free_slots(const JobEntry& job, const JobStatus& status) {
  return status.round && status.round->buffered() && job.runtime->free_slots(*status.round) > 0;
}

using rounds::Action;
using rounds::Event;
using rounds::Phase;

// Contacts refresh availability in memory; the last contacts are saved at most this often, in
// one batch, so a large fleet's heartbeats do not turn into fsyncs. The profiles of a round's
// invitees are saved when it closes.
constexpr double kSaveContactsEvery = 30.0;

// Observe, decide and carry out at most this often in one tick (a conclusion and the next
// opening take two); what is left waits for the next tick, at once.
constexpr int kMaxPasses = 8;
// Steps of one job in one decision at most (the table has no cycle without an action).
constexpr int kMaxSteps = 16;

std::string job_prefix(const JobEntry& job) { return "job " + std::to_string(job.id) + ": "; }

// Whether a round of `job` must wait for the server's evaluation of the previous model before
// it may commit: the job has a target accuracy on the test set and that evaluation is pending.
bool target_unknown(const JobEntry& job, const JobStatus& status) {
  return job.config.target_accuracy > 0 && job.config.evaluation.target == "server" &&
         status.evaluations_pending > 0;
}

// Why a round of a job in `state` fails rather than concludes ("": it does not).
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

// The owner's phases while its round is open or closing (what the replication observes).
bool owner_round(Phase phase) {
  return phase != Phase::kIdle && phase != Phase::kConcluding && phase != Phase::kResolving &&
         phase != Phase::kFollowing && phase != Phase::kHandingOver && phase != Phase::kRelaying;
}

bool follower(Phase phase) {
  return phase == Phase::kFollowing || phase == Phase::kHandingOver || phase == Phase::kRelaying;
}

// The revision of a round plan (rounds::round_plan_json), 0 for none.
uint64_t plan_revision(const nlohmann::json& plan) {
  return plan.is_object() ? plan.value("revision", uint64_t{0}) : 0;
}

}  // namespace

RoundDriver::RoundDriver(JobTable& jobs, ClientRegistry& clients, TenantRegistry& tenants,
                         storage::Store& store, RoundReplication& replication,
                         ModelEvaluator& evaluator, TaskNotifier& tasks_ready, SecureRounds& secure,
                         Metrics& metrics, Clock clock)
    : jobs_(jobs),
      clients_(clients),
      tenants_(tenants),
      store_(store),
      replication_(replication),
      evaluator_(evaluator),
      tasks_ready_(tasks_ready),
      secure_(secure),
      metrics_(metrics),
      clock_(std::move(clock)),
      last_flush_(clock_()) {}

RoundDriver::~RoundDriver() { stop(); }

void RoundDriver::set_pass(std::function<double(double now)> pass) { pass_ = std::move(pass); }

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
  std::optional<double> next = pass_ ? std::optional<double>(pass_(now)) : std::nullopt;
  // A job whose round concludes in this tick opens its next one in the next tick, which then
  // comes at once; an asynchronous job's next buffer opens at once, for the uploads of the
  // tasks in flight.
  std::set<const JobEntry*> concluded;
  for (int pass = 0;; ++pass) {
    if (pass == kMaxPasses) {
      next = now;  // more to do: the next tick comes at once
      break;
    }
    std::vector<Task> tasks = decide(observe(now), now);
    for (size_t i = tasks.size(); i-- > 0;) {
      const Task& t = tasks[i];
      if (t.action == Action::kConclude || t.action == Action::kFail ||
          t.action == Action::kReadBack) {
        concluded.insert(t.job);
      }
      if (t.action != Action::kOpen || !concluded.count(t.job) || t.job->config.asynchronous()) {
        continue;
      }
      tasks.erase(tasks.begin() + static_cast<std::ptrdiff_t>(i));
      next = now;
    }
    if (tasks.empty() || !carry_out(std::move(tasks), now)) break;
  }
  next = earliest(next, earliest(jobs_.next_deadline(now), tenants_.throttle_ends(now)));
  next = earliest(next, earliest(secure_.next_deadline(now), replication_.next_reading(now)));
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
  shutting_down_ = true;
  const double now = clock_();
  for (int pass = 0; pass < kMaxPasses; ++pass) {
    std::vector<Task> tasks = decide(Observations(), now);
    if (tasks.empty() || !carry_out(std::move(tasks), now)) break;
  }
}

RoundDriver::Observations RoundDriver::observe(double now) {
  struct Watched {
    JobEntry* job;
    bool owned, active;
    Phase phase;
    RoundIndex round;
    std::optional<double> closed_at;
  };
  std::vector<Watched> watched;
  jobs_.update_each([&](JobEntry& job, const JobStatus& s) {
    watched.push_back({&job, s.owned, s.active(), s.phase, s.round ? s.round->index() : 0,
                       s.admission_closed_at});
  });
  Observations seen;
  for (const Watched& w : watched) {
    const JobId id = w.job->id;
    if (w.owned && owner_round(w.phase)) {
      seen[id].contributions = replication_.contributions(id, w.round, w.closed_at, now);
      relay_stage_messages(*w.job, /*owned=*/true);
    } else if (follower(w.phase) || (!w.owned && w.active && w.phase == Phase::kIdle)) {
      auto followed = replication_.followed(id, now);
      if (!followed.ok()) continue;  // unknown: no follower's event fires
      seen[id].followed = std::move(followed).value();
      if (follower(w.phase)) relay_stage_messages(*w.job, /*owned=*/false);
    }
  }
  return seen;
}

std::vector<RoundDriver::Task> RoundDriver::decide(const Observations& seen, double now) {
  // Whether an available client holds no task: only a buffer with free slots asks, and only
  // then is it worked out (it reads every available client, and a steered fleet's returning
  // devices wake a tick each, hundreds a second).
  bool buffers_want_clients = false;
  jobs_.update_each([&](JobEntry& job, const JobStatus& status) {
    buffers_want_clients |= buffer_has_free_slots(job, status);
  });
  const bool clients_free =
      buffers_want_clients && clients_.eligible(now, {}, jobs_.busy_clients()).free > 0;
  std::vector<Task> tasks;
  std::vector<rounds::ProfileChange> changes;
  jobs_.update_each([&](JobEntry& job, JobStatus& status) {
    auto found = seen.find(job.id);
    const Seen* s = found == seen.end() ? nullptr : &found->second;
    const RoundReplication::Followed* read = s && s->followed ? &*s->followed : nullptr;
    const bool admitting =
        read && read->round && read->round->state == RoundState::kOpen && read->round->admitting;
    if (read && !admitting) {
      // The owner's newest round (if any) admits nothing: a request about it, or about a
      // later one that came before this reading, is answered from what is here. (A round
      // that admits is followed here: follow() notes it.)
      if (read->round) status.read_round = std::max(status.read_round, read->round->index);
      status.read_wakes = read->wakes;
    }
    for (int i = 0; i < kMaxSteps; ++i) {
      const rounds::Facts facts = facts_of(job, status, s, clients_free, now);
      const std::optional<rounds::Step> step =
          rounds::step(status.phase, rounds::events_of(status.phase, facts));
      if (!step) return;
      const Phase from = status.phase;
      Task task;
      task.job = &job;
      task.action = step->action;
      if (step->action == Action::kFollow && s) task.followed = s->followed;
      if (!apply(job, status, *step, now, task, changes)) {
        tasks.push_back(std::move(task));
        return;
      }
      if (step->to == from && step->action == Action::kNone) return;  // it waits
    }
    log_error(job_prefix(job) + "the round's life cycle did not settle in phase " +
              rounds::phase_name(status.phase));
  });
  clients_.apply(changes);
  return tasks;
}

rounds::Facts RoundDriver::facts_of(JobEntry& job, const JobStatus& status, const Seen* seen,
                                    bool clients_free, double now) const {
  rounds::Facts f;
  f.owned = status.owned;
  f.job = status.state;
  f.asynchronous = job.config.asynchronous();
  f.round_cap_reached = job.runtime->last_round() >= job.config.rounds;
  f.evaluation_pending = target_unknown(job, status);
  f.shutting_down = shutting_down_;
  f.failing = !status.failure.empty();
  f.secure = bool(job.config.secure_aggregation);
  if (status.round) {
    const rounds::Round& r = *status.round;
    f.buffered = r.buffered();
    f.due = r.due(now);
    f.uploads_in_flight = r.uploads_in_flight();
    f.task_deadline_passed = r.buffered() && r.next_deadline() && *r.next_deadline() <= now;
    f.slots_free = clients_free && buffer_has_free_slots(job, status);
    f.cohort_due = r.buffered() && !r.cohort_opened_at() && r.ready().size() >= r.target();
  }
  std::shared_ptr<SecureRound> secure = f.secure ? secure_.find(job.id) : nullptr;
  if (secure && status.round && secure->index() == status.round->index()) {
    f.secure_failed = secure->stage() == SecureRound::Stage::kFailed;
    f.stage_due = secure->stage_due(now);
    f.inputs_complete = secure->inputs_due(now);
    f.unmask_due = secure->unmask_due(now);
  }
  if (seen && status.round && status.owned) {
    const RoundReplication::Contributions& c = seen->contributions;
    const uint64_t target = status.round->target();
    f.filled_elsewhere = (replication_.shared() && target > 0 && c.admitted >= target) ||
                         (secure && secure->stage() == SecureRound::Stage::kMaskedInput &&
                          c.admitted >= secure->sharer_count() && secure->sharer_count() > 0);
    f.partials_in = c.partials_in;
    f.waited_out = c.waited_out;
  }
  if (seen && seen->followed) {
    const std::optional<storage::RoundRecord>& latest = seen->followed->round;
    if (status.phase == Phase::kIdle) {
      f.owner_round_open = latest && latest->state == RoundState::kOpen && latest->admitting &&
                           latest->target > 0 && !latest->plan.empty() &&
                           latest->base_version == status.model->version;
    } else if (follower(status.phase)) {
      std::shared_ptr<SecureRoundCopy> copy = f.secure ? secure_.find_copy(job.id) : nullptr;
      const RoundIndex copied = status.round ? status.round->index() : copy ? copy->index() : 0;
      const bool same = latest && latest->index == copied;
      f.owner_concluded = !same || latest->state != RoundState::kOpen;
      f.owner_closed = same && latest->state == RoundState::kOpen && !latest->admitting;
      f.owner_replanned = same && status.round && status.round->buffered() &&
                          plan_revision(latest->plan) != status.plan_revision;
    }
  }
  return f;
}

bool RoundDriver::apply(JobEntry& job, JobStatus& status, const rounds::Step& step, double now,
                        Task& task, std::vector<rounds::ProfileChange>& changes) {
  if (step.on == Event::kFailing && status.failure.empty()) {
    status.failure = stop_reason(status.state);
    std::shared_ptr<SecureRound> secure = secure_.find(job.id);
    if (status.failure.empty() && secure && secure->stage() == SecureRound::Stage::kFailed) {
      status.failure = "secure aggregation failed: " + secure->failure();
    }
    if (status.failure.empty()) status.failure = "the round failed";
  }
  status.phase = step.to;
  switch (step.action) {
    case Action::kNone:
      return true;
    case Action::kDrop:
      drop(job, status, step.why);
      return true;
    case Action::kExpire:
      for (auto& change : job.runtime->expire(*status.round, now)) changes.push_back(change);
      return true;
    case Action::kCloseAdmission:
      status.round->close();  // nothing more is admitted here; the store's close follows
      return false;
    case Action::kConclude:
    case Action::kFail:
      task.round = std::move(*status.round);
      status.round.reset();
      task.failure = status.failure;
      return false;
    default:
      return false;
  }
}

bool RoundDriver::carry_out(std::vector<Task> tasks, double now) {
  bool progressed = false;
  std::vector<JobEntry*> opening, refilling;
  for (Task& t : tasks) {
    JobEntry& job = *t.job;
    switch (t.action) {
      case Action::kOpen:
        opening.push_back(&job);
        break;
      case Action::kRefill:
        refilling.push_back(&job);
        break;
      case Action::kFinishJob:
        finish(job);
        progressed = true;
        break;
      case Action::kFollow:
        progressed |=
            t.followed && t.followed->round && follow(job, *t.followed->round, t.followed->wakes);
        break;
      case Action::kCloseStage: {
        std::shared_ptr<SecureRound> secure = secure_.find(job.id);
        // A stage that closes below the threshold fails the round: the next step fails it.
        if (secure && secure->close_stage(now).ok()) publish_outcome(job, Event::kStageClosed);
        progressed = true;
        break;
      }
      case Action::kOpenCohort:
        progressed |= open_cohort(job, now);
        break;
      case Action::kCloseAdmission:
        progressed |= close_admission(job, now);
        break;
      case Action::kCloseInputs:
        progressed |= close_inputs(job, now);
        break;
      case Action::kConclude:
      case Action::kFail:
        conclude(job, std::move(*t.round), t.failure, now);
        progressed = true;
        break;
      case Action::kWriteConclusion:
        write_conclusion(job, now);
        progressed = true;
        break;
      case Action::kReadBack:
        progressed |= read_back(job, now);
        break;
      case Action::kWritePartial:
        progressed |= write_partial(job, now);
        break;
      default:
        log_error(job_prefix(job) + "no one carries out '" + rounds::action_name(t.action) + "'");
    }
  }
  progressed |= open_in_turn(std::move(opening), now);
  progressed |= refill_in_turn(std::move(refilling), now);
  return progressed;
}

void RoundDriver::publish_outcome(JobEntry& job, Event outcome,
                                  const std::function<void(JobStatus&)>& publish) {
  jobs_.update(job, [&](JobStatus& status) {
    if (publish) publish(status);
    rounds::Events events;
    events.set(static_cast<size_t>(outcome));
    const std::optional<rounds::Step> step = rounds::step(status.phase, events);
    if (!step) {
      log_error(job_prefix(job) + "no transition of phase " + rounds::phase_name(status.phase) +
                " on " + rounds::event_name(outcome));
      return;
    }
    status.phase = step->to;
    if (step->action == Action::kDrop) drop(job, status, step->why);
    if (status.phase == Phase::kIdle) {
      status.failure.clear();
      status.admission_closed_at.reset();
    }
  });
}

void RoundDriver::drop(JobEntry& job, JobStatus& status, const std::string& why) {
  status.phase = Phase::kIdle;
  status.round.reset();
  status.failure.clear();
  status.admission_closed_at.reset();
  status.plan_revision = 0;
  if (std::shared_ptr<SecureRound> secure = secure_.find(job.id)) {
    secure->abort(why, clock_());
    secure_.close(job.id, *secure);
  }
  secure_.drop_copy(job.id, why);
}

storage::Epoch RoundDriver::epoch_of(const JobEntry& job) const {
  return jobs_.read(job, [](const JobStatus& status) { return status.epoch; });
}

bool RoundDriver::step_down_if_fenced(JobEntry& job, const Status& refused) {
  const storage::Epoch epoch = epoch_of(job);
  if (refused.code() != Code::kConflict || epoch == storage::kUnleased) return false;
  log_warn(job_prefix(job) + "the store refused a write at lease epoch " + std::to_string(epoch) +
           " (" + refused.to_string() + "): stepping down as the job's owner");
  jobs_.update(job, [](JobStatus& status) { status.step_down(); });
  metrics_.add(metric::kLeaseChanges, {{"change", "stepped_down"}});
  return true;
}

}  // namespace fedcase::server
