#include "rounds/round.h"

#include <algorithm>

namespace fedcase::rounds {

RoundAggregate::RoundAggregate(std::unique_ptr<aggregation::Aggregator> aggregator)
    : aggregator_(std::move(aggregator)) {}

Status RoundAggregate::add(const UnalignedFloat* values, size_t count, double weight) {
  MutexLock lock(mu_);
  return aggregator_->add(values, count, weight);
}

Result<std::vector<float>> RoundAggregate::result() const {
  MutexLock lock(mu_);
  return aggregator_->result();
}

std::string RoundAggregate::rule() const {
  MutexLock lock(mu_);
  return aggregator_->name();
}

Status apply_profile_change(const ProfileChange& change, scheduling::ClientProfile& profile,
                            const scheduling::ProfileParams& params) {
  switch (change.kind) {
    case ProfileChange::Kind::kSelected:
      scheduling::observe_selected(profile, change.round);
      return ok_status();
    case ProfileChange::Kind::kCompleted:
      return scheduling::observe_completion(profile, change.report, params);
    case ProfileChange::Kind::kMissedDeadline:
      scheduling::observe_missed_deadline(profile);
      return ok_status();
    case ProfileChange::Kind::kNotKept:
      return scheduling::observe_not_kept(profile, change.not_kept);
  }
  return internal_error("unknown profile change");
}

const char* admission_reason(Admission admission) {
  switch (admission) {
    case Admission::kWanted:
      return "open";
    case Admission::kNotInvited:
      return "not invited";
    case Admission::kClosed:
      return "round closed";
    case Admission::kPastDeadline:
      return "deadline passed";
    case Admission::kAlreadyUploaded:
      return "already uploaded";
    case Admission::kFilled:
      return "round filled";
    case Admission::kHeld:
      return "places held";
  }
  return "unknown";
}

Round::Round(Spec spec, std::vector<scheduling::ClientTask> tasks,
             std::shared_ptr<RoundAggregate> aggregate)
    : spec_(spec), tasks_(std::move(tasks)), aggregate_(std::move(aggregate)) {
  for (size_t i = 0; i < tasks_.size(); ++i) task_index_[tasks_[i].client] = i;
}

std::vector<ClientId> Round::invited() const {
  std::vector<ClientId> ids;
  ids.reserve(tasks_.size());
  for (const auto& task : tasks_) ids.push_back(task.client);
  return ids;
}

const scheduling::ClientTask* Round::task_for(ClientId client) const {
  auto it = task_index_.find(client);
  return it == task_index_.end() ? nullptr : &tasks_[it->second];
}

bool Round::holds_task(ClientId client) const {
  return !closed_ && task_index_.count(client) && !accepted_.count(client);
}

std::vector<ProfileChange> Round::selection_changes() const {
  std::vector<ProfileChange> changes;
  for (const auto& task : tasks_) {
    changes.push_back({ProfileChange::Kind::kSelected, task.client, spec_.index, {}, {}});
  }
  return changes;
}

void Round::hand_out(ClientId client, double now) {
  if (task_index_.count(client)) handed_out_.emplace(client, now);
}

Admission Round::admission(ClientId client, double now) const {
  if (closed_) return Admission::kClosed;
  if (!task_index_.count(client)) return Admission::kNotInvited;
  if (accepted_.count(client) || reserved_.count(client)) return Admission::kAlreadyUploaded;
  if (accepted_.size() >= spec_.target) return Admission::kFilled;
  if (accepted_.size() + reserved_.size() >= spec_.target) return Admission::kHeld;
  if (now > spec_.deadline) return Admission::kPastDeadline;
  return Admission::kWanted;
}

Status Round::check_admission(ClientId client, double now) const {
  const Admission a = admission(client, now);
  const std::string round = "round " + std::to_string(spec_.index);
  switch (a) {
    case Admission::kWanted:
      return ok_status();
    case Admission::kNotInvited:
      return permission_denied("client " + std::to_string(client) + " was not invited to " + round);
    case Admission::kAlreadyUploaded:
      return conflict("client " + std::to_string(client) + " already uploaded to " + round);
    case Admission::kFilled:
      return conflict(round + " already has its " + std::to_string(spec_.target) + " updates");
    case Admission::kHeld:
      return unavailable(round + "'s remaining places are held by uploads being checked; retry");
    case Admission::kClosed:
    case Admission::kPastDeadline:
      return conflict(round + " is not open for updates (" + admission_reason(a) + ")");
  }
  return internal_error("unknown admission");
}

Result<std::shared_ptr<RoundAggregate>> Round::reserve(ClientId client, double now) {
  FEDCASE_RETURN_IF_ERROR(check_admission(client, now));
  reserved_.insert(client);
  return aggregate_;
}

ProfileChange Round::accept(ClientId client, const scheduling::RoundReport& report, double now,
                            double fold_s, std::optional<protocol::EvalReport> evaluation) {
  reserved_.erase(client);
  const double start = task_started_at(client);
  Accepted& a = accepted_[client];
  a.at = now;
  a.duration_s = now - start;
  a.dispatch_s = start - spec_.opened_at;
  a.samples = report.samples;
  a.loss_sum = report.loss_sum;
  const scheduling::ClientTask* task = task_for(client);
  const uint64_t unique = task != nullptr && task->unique_samples > 0
                              ? std::min(report.samples, task->unique_samples)
                              : report.samples;
  a.utility = scheduling::statistical_utility(unique, report.samples, report.loss_sq_sum);
  a.download_s = report.download_s;
  a.train_s = report.compute_s + report.io_s;
  a.upload_s = report.upload_s;
  a.fold_s = fold_s;
  a.evaluation = std::move(evaluation);
  ProfileChange change{ProfileChange::Kind::kCompleted, client, spec_.index, report, {}};
  change.report.round = spec_.index;
  return change;
}

double Round::task_started_at(ClientId client) const {
  auto handed = handed_out_.find(client);
  return handed != handed_out_.end() ? handed->second : spec_.opened_at;
}

void Round::release(ClientId client) { reserved_.erase(client); }

bool Round::due(double now) const {
  if (!reserved_.empty()) return false;
  return closed_ || filled() || now >= spec_.deadline;
}

double Round::client_seconds(double closed_at) const {
  double total = 0;
  for (const auto& task : tasks_) {
    auto it = accepted_.find(task.client);
    const double until = it == accepted_.end() ? closed_at : std::min(it->second.at, closed_at);
    total += std::max(0.0, until - spec_.opened_at);
  }
  return total;
}

double Round::expected_client_seconds() const {
  double total = 0;
  for (const auto& task : tasks_) total += std::max(0.0, task.expected_duration_s);
  return total;
}

}  // namespace fedcase::rounds
