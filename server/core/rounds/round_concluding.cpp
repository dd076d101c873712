// The round driver's conclusions: admission closed, the replicas' partials gathered, the
// round concluded and committed (or failed), a lost answer read back, and the evaluations of
// committed models (round_driver.h).

#include <chrono>
#include <cstdio>

#include "common/crash_point.h"
#include "common/log.h"
#include "protocol/update_meta.h"
#include "rounds/evaluation.h"
#include "rounds/upload.h"
#include "server/core/jobs/loading.h"
#include "server/core/rounds/round_driver.h"

namespace fedcase::server {
namespace {

using nlohmann::json;
using rounds::Event;

std::string job_prefix(const JobEntry& job) { return "job " + std::to_string(job.id) + ": "; }
std::string round_name(RoundIndex index) { return "round " + std::to_string(index); }

bool target_unknown(const JobEntry& job, const JobStatus& status) {
  return job.config.target_accuracy > 0 && job.config.evaluation.target == "server" &&
         status.evaluations_pending > 0;
}

}  // namespace

bool RoundDriver::close_admission(JobEntry& job, double now) {
  const auto [index, epoch] = jobs_.read(job, [](const JobStatus& s) {
    return std::make_pair(s.round ? s.round->index() : RoundIndex(0), s.epoch);
  });
  Status closed = replication_.close(job.id, index, epoch);
  if (closed.ok()) {
    crash_point("admission_closed");
    publish_outcome(job, Event::kAdmissionClosed,
                    [now](JobStatus& s) { s.admission_closed_at = now; });
    return true;
  }
  log_warn(job_prefix(job) + "cannot close " + round_name(index) +
           " to admission: " + closed.to_string());
  // Tried again at the next tick; or the store refused this coordinator's epoch: it stepped
  // down, and forgets the round once no upload is being folded into it (kSteppedDown).
  return step_down_if_fenced(job, closed);
}

void RoundDriver::conclude(JobEntry& job, rounds::Round round, std::string failure, double now) {
  const auto started = std::chrono::steady_clock::now();
  rounds::JobRuntime& runtime = *job.runtime;
  tenants_.round_concluded(job.tenant, job.id, job.round_expected_client_s,
                           round.client_seconds(now), job.round_class_cost);
  std::shared_ptr<SecureRound> secure =
      job.config.secure_aggregation ? secure_.find(job.id) : nullptr;
  if (secure && secure->index() != round.index()) secure = nullptr;
  if (shutting_down_ && failure.empty()) {
    // At a stop, neither the other replicas' partials nor a secure round's unmask stage come
    // any more: only a round complete here may commit.
    const auto [state, waits] = jobs_.read(
        job, [&](const JobStatus& s) { return std::make_pair(s.state, target_unknown(job, s)); });
    const bool may_commit = state == JobState::kRunning && !waits && !secure &&
                            !replication_.shared() && round.accepted() >= job.config.min_updates;
    if (!may_commit) {
      failure = state == JobState::kCancelled  ? "job cancelled"
                : state == JobState::kFinished ? "job reached its target"
                                               : "coordinator stopped";
    }
  }
  if (secure && !failure.empty()) secure->abort(failure, now);
  json partials;
  if (replication_.shared() && failure.empty()) {
    // A secure round's masked partials were merged when its masked inputs closed.
    const std::set<std::string> masked =
        secure ? secure->merged_replicas() : std::set<std::string>();
    partials = merge_partials(job, round, [&](const storage::PartialRecord& p) -> Status {
      if (!secure) return round.aggregate()->merge_partial(p.sum, p.updates);
      return masked.count(p.replica) ? ok_status()
                                     : conflict("it was not merged when the masked inputs closed");
    });
  }
  // A failed buffer's tasks (a failed cohort's members among them) carry over to the next
  // buffer of a job that goes on.
  const JobState state = jobs_.read(job, [](const JobStatus& s) { return s.state; });
  const bool goes_on =
      !shutting_down_ && (state == JobState::kRunning || state == JobState::kPaused);
  rounds::Conclusion k;
  if (!failure.empty()) {
    k = runtime.fail(round, now, failure, goes_on);
  } else if (secure) {
    // The masks removed: the aggregate receives the sum alone, never an individual update.
    Result<secagg::SecAggSum> sum = secure->finish(now);
    Status folded = sum.status();
    if (sum.ok()) {
      folded = round.aggregate()->add_sum(sum->weighted_sum.data(), sum->weighted_sum.size(),
                                          sum->total_weight, sum->survivors.size());
    }
    k = folded.ok() ? runtime.conclude(round, now)
                    : runtime.fail(round, now, "secure aggregation failed: " + folded.message(),
                                   goes_on);
  } else {
    k = runtime.conclude(round, now);
  }
  if (!partials.is_null()) {
    k.metrics["partials"] = partials;
    crash_point("merged");
  }
  if (secure) {
    k.metrics["secure_aggregation"] = secure->summary();
    secure_.close(job.id, *secure);
  }
  clients_.apply(k.profile_changes);
  storage::RoundRecord record = round_record(job.id, round, epoch_of(job));
  record.state = k.state;
  record.closed_at = now;
  record.metrics = k.metrics;
  job.unresolved = JobEntry::Unresolved{std::move(k), std::move(record), started};
  write_conclusion(job, now);
}

void RoundDriver::write_conclusion(JobEntry& job, double now) {
  if (!job.unresolved) {
    log_error(job_prefix(job) + "no conclusion to write");
    return publish_outcome(job, Event::kRoundFailed);
  }
  rounds::Conclusion& k = job.unresolved->conclusion;
  storage::RoundRecord& record = job.unresolved->record;
  Status written;
  if (k.state == RoundState::kCommitted) {
    const rounds::GlobalModel& m = *k.model;
    written = store_.commit_round(
        record, {job.id, m.version, m.blob, m.checksum, k.optimizer_state, now}, k.policy_state);
    const bool answered = written.ok() || written.code() == Code::kUnavailable;
    if (!answered) {
      // Refused for good: the round fails instead, and its optimizer step is undone.
      job.runtime->abandon(k);
      k.state = RoundState::kFailed;
      k.failure = "commit failed: " + written.message();
      record.state = RoundState::kFailed;
      record.metrics["failure"] = k.failure;
      if (step_down_if_fenced(job, written)) return settle(job, Event::kFenced, now);
      log_error(job_prefix(job) + "cannot commit " + round_name(record.index) + ": " +
                written.to_string());
      written = store_.fail_round(record);
    }
  } else {
    written = store_.fail_round(record);
  }
  if (written.ok()) {
    if (k.state == RoundState::kCommitted) crash_point("committed");
    return settle(job, k.state == RoundState::kCommitted ? Event::kCommitted : Event::kRoundFailed,
                  now);
  }
  if (written.code() == Code::kUnavailable) {
    // The store's answer was lost, or it could not take the write now: read back, never guessed.
    log_warn(job_prefix(job) + "the outcome of " + round_name(record.index) +
             "'s conclusion is unknown (" + written.to_string() + "): reading it back");
    return publish_outcome(job, Event::kOutcomeLost);
  }
  if (step_down_if_fenced(job, written)) return settle(job, Event::kFenced, now);
  // Refused for good: the store keeps the round open until a restart fails it.
  log_error(job_prefix(job) + "cannot record failed " + round_name(record.index) + ": " +
            written.to_string());
  settle(job, Event::kRoundFailed, now);
}

bool RoundDriver::read_back(JobEntry& job, double now) {
  if (!job.unresolved) {
    publish_outcome(job, Event::kRoundFailed);
    return true;
  }
  const storage::RoundRecord& mine = job.unresolved->record;
  auto rounds = store_.list_rounds(job.id);
  if (!rounds.ok()) {
    log_warn(job_prefix(job) + "cannot read " + round_name(mine.index) +
             " back yet: " + rounds.status().to_string());
    return false;
  }
  const storage::RoundRecord* stored = nullptr;
  for (const storage::RoundRecord& r : *rounds) {
    if (r.index == mine.index) stored = &r;
  }
  if (stored && stored->state == RoundState::kOpen) {
    log_info(job_prefix(job) + round_name(mine.index) +
             " is still open in the store: its conclusion is written again");
    publish_outcome(job, Event::kResolvedOpen);
    return true;
  }
  const bool mine_landed = stored && stored->state == mine.state && stored->epoch == mine.epoch;
  log_info(job_prefix(job) + round_name(mine.index) +
           " read back: " + (stored ? state_name(stored->state) : "missing") +
           (mine_landed ? ", as this coordinator concluded it" : ", not by this coordinator"));
  if (!mine_landed && step_down_if_fenced(job, conflict("another replica concluded the round"))) {
    settle(job, Event::kFenced, now);
    return true;
  }
  const bool committed = mine_landed && mine.state == RoundState::kCommitted;
  settle(job, committed ? Event::kCommitted : Event::kRoundFailed, now);
  return true;
}

void RoundDriver::settle(JobEntry& job, Event outcome, double now) {
  JobEntry::Unresolved u = std::move(*job.unresolved);
  job.unresolved.reset();
  rounds::Conclusion& k = u.conclusion;
  const storage::RoundRecord& record = u.record;
  rounds::JobRuntime& runtime = *job.runtime;
  const bool committed = outcome == Event::kCommitted;
  if (committed) {
    runtime.adopt(k);
  } else if (k.state == RoundState::kCommitted) {
    runtime.abandon(k);
  }
  clients_.save(k.invited);
  const char* outcome_name = committed ? "committed" : "failed";
  metrics_.add(metric::kRounds, {{"job", std::to_string(job.id)}, {"outcome", outcome_name}});
  if (record.metrics.contains("secure_aggregation")) {
    const json& summary = record.metrics["secure_aggregation"];
    metrics_.add(metric::kSecAggRounds,
                 {{"outcome", outcome_name}, {"stage", summary.value("failed_in", "done")}});
    for (const auto& [stage, count] : summary["dropouts"].items()) {
      metrics_.add(metric::kSecAggDropouts, {{"stage", stage}}, count.get<double>());
    }
  }
  metrics_.observe(metric::kRoundSeconds, {{"outcome", outcome_name}}, now - record.opened_at);
  publish_outcome(job, outcome, [&](JobStatus& status) {
    status.policy_state = runtime.policy_state();
    if (committed) {
      status.model = runtime.model();
      status.privacy = privacy_view(runtime);
    }
  });
  if (!committed) {
    const std::string why = record.state == RoundState::kFailed ? k.failure : "not committed here";
    log_warn(job_prefix(job) + round_name(record.index) + " failed: " + why);
    return;
  }
  log_info(job_prefix(job) + round_name(record.index) + " committed with " +
           record.metrics["updates"].dump() + " updates after " +
           std::to_string(now - record.opened_at) + " s");
  if (job.config.evaluation.target == "federated") on_federated_evaluation(job, record);
  // The commit's duration (conclusion and store write) is recorded with the evaluation.
  const double commit_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - u.started).count();
  if (job.config.server_evaluated()) evaluate(job, runtime.model(), {{"commit_s", commit_s}});
}

json RoundDriver::merge_partials(
    JobEntry& job, rounds::Round& round,
    const std::function<Status(const storage::PartialRecord&)>& merge) {
  const RoundIndex index = round.index();
  const std::string& self = replication_.replica();
  json summary = {{"merged", json::object()}, {"lost", json::object()}, {"bytes", 0}};
  auto gathered = replication_.gather(job.id, index);
  if (!gathered.ok()) {
    log_warn(job_prefix(job) + "cannot read the partials of " + round_name(index) + ": " +
             gathered.status().to_string());
  }
  const RoundReplication::Gathered none;
  const RoundReplication::Gathered& g = gathered.ok() ? *gathered : none;
  // Each other replica's partial is decoded and merged; a replica whose partial is missing or
  // unusable loses its updates.
  std::set<std::string> merged;
  for (const storage::PartialRecord& p : g.partials) {
    if (p.replica == self) continue;
    const Status added = merge(p);
    if (!added.ok()) {
      log_warn(job_prefix(job) + "cannot merge the partial of replica " + p.replica + " in " +
               round_name(index) + ": " + added.to_string());
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
  for (const storage::UpdateRecord& u : g.updates) {
    if (u.replica == self) continue;
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
    log_warn(job_prefix(job) + round_name(index) + ": " + std::to_string(lost) +
             " admitted updates lost with the replicas that wrote no partial " +
             summary["lost"].dump());
  }
  clients_.apply(completed);
  return summary;
}

bool RoundDriver::close_inputs(JobEntry& job, double now) {
  std::shared_ptr<SecureRound> secure = secure_.find(job.id);
  if (!secure) return false;
  if (replication_.shared()) {
    auto gathered = replication_.gather(job.id, secure->index());
    if (!gathered.ok()) {
      log_warn(job_prefix(job) + "cannot read the masked partials of " +
               round_name(secure->index()) + ": " + gathered.status().to_string());
      return false;  // read again at the next tick
    }
    for (const storage::PartialRecord& p : gathered->partials) {
      if (p.replica == replication_.replica()) continue;
      const Status added = secure->merge_partial(p.replica, p.sum);
      if (!added.ok()) {
        log_warn(job_prefix(job) + "cannot merge the masked partial of replica " + p.replica +
                 " in " + round_name(secure->index()) + ": " + added.to_string());
      }
    }
  }
  Status closed = secure->close_inputs(now);
  // Below the threshold the secure round failed: the next step fails the round.
  if (closed.ok()) publish_outcome(job, Event::kInputsClosed);
  return true;
}

void RoundDriver::evaluate(JobEntry& job, std::shared_ptr<const rounds::GlobalModel> model,
                           json timing) {
  jobs_.update(job, [](JobStatus& status) { status.evaluations_pending += 1; });
  const uint64_t version = model->version;
  const auto submitted = std::chrono::steady_clock::now();
  evaluator_.submit(
      job.evaluated, model->params(),
      [this, &job, version, timing, submitted](const Result<ml::EvalResult>& e) {
        json with_eval = timing;
        with_eval["eval_s"] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - submitted).count();
        on_evaluated(job, version, e, std::move(with_eval));
      });
}

Status RoundDriver::evaluate_unscored(JobEntry& job,
                                      const std::vector<storage::RoundRecord>& rounds) {
  if (!job.config.server_evaluated()) return ok_status();
  for (const auto& r : rounds) {
    if (r.state != RoundState::kCommitted || r.metrics.contains("test_accuracy")) continue;
    auto stored = store_.get_model(job.id, r.index);
    if (!stored.ok()) return stored.status();
    auto model = stored_model(*stored);
    if (!model.ok()) return model.status();
    log_info(job_prefix(job) + "evaluating model " + std::to_string(r.index) +
             ", committed without an evaluation");
    evaluate(job, *model, json::object());
  }
  return ok_status();
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
