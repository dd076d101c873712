#include "rounds/round.h"

#include <algorithm>

#include "protocol/sampling.h"

namespace fedcase::rounds {

RoundAggregate::RoundAggregate(std::unique_ptr<aggregation::Aggregator> aggregator)
    : aggregator_(std::move(aggregator)) {}

Status RoundAggregate::add(const UnalignedFloat* values, size_t count, double weight) {
  return add(values, count, weight, 1.0);
}

Status RoundAggregate::add(const UnalignedFloat* values, size_t count, double weight,
                           double discount) {
  MutexLock lock(mu_);
  return aggregator_->add(values, count, weight, discount);
}

Status RoundAggregate::add(const BlobView& update, double weight, double discount) {
  return add(aggregation::UpdateValues::of(update), update.count, weight, discount);
}

Status RoundAggregate::add(const aggregation::UpdateValues& values, size_t count, double weight,
                           double discount) {
  MutexLock lock(mu_);
  return aggregator_->add(values, count, weight, discount);
}

Status RoundAggregate::add_sum(const float* sum, size_t count, double total_weight,
                               size_t updates) {
  MutexLock lock(mu_);
  return aggregator_->add_sum(sum, count, total_weight, updates);
}

Result<std::vector<float>> RoundAggregate::result() const {
  MutexLock lock(mu_);
  return aggregator_->result();
}

Result<aggregation::EncodedPartial> RoundAggregate::partial() const {
  MutexLock lock(mu_);
  return aggregator_->partial();
}

Status RoundAggregate::merge_partial(std::string_view bytes, size_t updates) {
  MutexLock lock(mu_);
  return aggregator_->merge_partial(bytes, updates);
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
    case Admission::kTooStale:
      return "too stale";
    case Admission::kReady:
      return "reported ready";
  }
  return "unknown";
}

Round::Round(Spec spec, std::vector<scheduling::ClientTask> tasks,
             std::shared_ptr<RoundAggregate> aggregate)
    : spec_(spec), tasks_(std::move(tasks)), aggregate_(std::move(aggregate)) {
  terms_.assign(tasks_.size(), Terms{spec_.index, spec_.base_version, spec_.base_checksum,
                                     spec_.opened_at, spec_.deadline});
  index_tasks();
}

Round::Round(Spec spec, std::vector<Assignment> carried, std::shared_ptr<RoundAggregate> aggregate)
    : spec_(spec), aggregate_(std::move(aggregate)) {
  for (Assignment& a : carried) {
    if (a.fetched_at) handed_out_[a.task.client] = *a.fetched_at;
    if (a.ready) ready_.push_back(a.task.client);
    tasks_.push_back(std::move(a.task));
    terms_.push_back(a.terms);
  }
  index_tasks();
}

void Round::index_tasks() {
  task_index_.clear();
  for (size_t i = 0; i < tasks_.size(); ++i) task_index_[tasks_[i].client] = i;
}

std::vector<ClientId> Round::invited() const {
  if (spec_.buffered) return dispatched_;
  std::vector<ClientId> ids;
  ids.reserve(tasks_.size());
  for (const auto& task : tasks_) ids.push_back(task.client);
  return ids;
}

const scheduling::ClientTask* Round::task_for(ClientId client) const {
  auto it = task_index_.find(client);
  return it == task_index_.end() ? nullptr : &tasks_[it->second];
}

const Round::Terms* Round::terms_for(ClientId client) const {
  auto it = task_index_.find(client);
  return it == task_index_.end() ? nullptr : &terms_[it->second];
}

bool Round::holds_task_of(ClientId client, RoundIndex round) const {
  const Terms* terms = terms_for(client);
  return terms != nullptr && terms->round == round;
}

Status Round::check_task_round(ClientId client, RoundIndex round) const {
  const Terms* terms = terms_for(client);
  // A buffer's dropped task is answered why by admission().
  // A cohort's member sends its masked input to the buffer's own index (its cohort's).
  const bool reaches = !spec_.buffered    ? round == spec_.index
                       : in_cohort(client) ? round == spec_.index
                       : terms != nullptr ? terms->round == round
                                          : round == spec_.index || dropped_why_.count(client) > 0;
  if (reaches) return ok_status();
  return conflict("round " + std::to_string(round) +
                  " is not open for updates (the open round is " + std::to_string(spec_.index) +
                  ")");
}

void Round::assign(scheduling::ClientTask task, Terms terms) {
  dispatched_.push_back(task.client);
  dispatched_expected_s_ += std::max(0.0, task.expected_duration_s);
  task_index_[task.client] = tasks_.size();
  tasks_.push_back(std::move(task));
  terms_.push_back(terms);
}

void Round::drop(ClientId client, const std::string& why, double until) {
  auto it = task_index_.find(client);
  if (it == task_index_.end()) return;
  const Terms& terms = terms_[it->second];
  dropped_client_s_ += std::max(0.0, until - std::max(spec_.opened_at, terms.assigned_at));
  tasks_.erase(tasks_.begin() + it->second);
  terms_.erase(terms_.begin() + it->second);
  ready_.erase(std::remove(ready_.begin(), ready_.end(), client), ready_.end());
  dropped_why_[client] = why;
  index_tasks();
}

std::vector<ClientId> Round::expire(double now) {
  std::vector<ClientId> expired;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const ClientId client = tasks_[i].client;
    if (now >= terms_[i].deadline && !accepted_.count(client) && !reserved_.count(client) &&
        !in_cohort(client)) {
      expired.push_back(client);
    }
  }
  for (ClientId client : expired) {
    drop(client, "missed deadline", terms_[task_index_.at(client)].deadline);
  }
  return expired;
}

void Round::drop_stale(ClientId client) { drop(client, "too stale", spec_.opened_at); }

std::vector<Round::Assignment> Round::in_flight(bool committed) const {
  std::vector<Assignment> out;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    const ClientId client = tasks_[i].client;
    if (accepted_.count(client) && (committed || !in_cohort(client))) continue;
    auto fetched = handed_out_.find(client);
    const bool ready = is_ready(client);
    out.push_back(
        {tasks_[i], terms_[i],
         fetched == handed_out_.end() ? std::nullopt : std::optional<double>(fetched->second),
         ready});
  }
  return out;
}

Status Round::report_ready(ClientId client, double now) {
  if (in_cohort(client) || is_ready(client)) {
    return conflict("client " + std::to_string(client) + " already reported its update ready");
  }
  // While a cohort runs, only its members' places are held: a report waits for the next one.
  const bool for_next_cohort =
      cohort_opened_at_ && !closed_ && admission(client, now) == Admission::kHeld;
  if (!for_next_cohort) FEDCASE_RETURN_IF_ERROR(check_admission(client, now));
  ready_.push_back(client);
  return ok_status();
}

bool Round::is_ready(ClientId client) const {
  return std::find(ready_.begin(), ready_.end(), client) != ready_.end();
}

void Round::open_cohort(const std::vector<ClientId>& members, double now) {
  for (ClientId client : members) {
    cohort_.insert(client);
    ready_.erase(std::remove(ready_.begin(), ready_.end(), client), ready_.end());
  }
  cohort_opened_at_ = now;
}

size_t Round::in_flight_count() const {
  size_t waiting = ready_.size();  // ready for a cohort: trained, no longer training
  for (ClientId client : cohort_) waiting += accepted_.count(client) == 0;
  return tasks_.size() - accepted_.size() - waiting;
}

uint64_t Round::staleness(ClientId client) const {
  const Terms* terms = terms_for(client);
  if (terms == nullptr || terms->base_version >= spec_.base_version) return 0;
  return spec_.base_version - terms->base_version;
}

std::optional<double> Round::next_deadline() const {
  if (!spec_.buffered) return spec_.deadline;
  std::optional<double> next;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    if (accepted_.count(tasks_[i].client) || in_cohort(tasks_[i].client)) continue;
    if (!next || terms_[i].deadline < *next) next = terms_[i].deadline;
  }
  return next;
}

bool Round::holds_task(ClientId client) const {
  return !closed_ && task_index_.count(client) && !accepted_.count(client);
}

std::vector<ProfileChange> Round::selection_changes() const {
  std::vector<ProfileChange> changes;
  for (ClientId client : invited()) {
    changes.push_back({ProfileChange::Kind::kSelected, client, spec_.index, {}, {}});
  }
  return changes;
}

void Round::hand_out(ClientId client, double now) {
  if (task_index_.count(client)) handed_out_.emplace(client, now);
}

Admission Round::admission(ClientId client, double now) const {
  auto dropped = dropped_why_.find(client);
  const Terms* terms = terms_for(client);
  const bool uploaded =
      accepted_.count(client) || reserved_.count(client) || admitted_elsewhere_.count(client);
  // A buffer that filled or closed carries its tasks in flight over to the next buffer, which
  // takes their uploads in a moment.
  const bool carried = spec_.buffered && terms && !uploaded && dropped == dropped_why_.end();
  if (closed_) return carried ? Admission::kHeld : Admission::kClosed;
  if (dropped != dropped_why_.end()) {
    return dropped->second == "too stale" ? Admission::kTooStale : Admission::kPastDeadline;
  }
  if (terms == nullptr) return Admission::kNotInvited;
  if (uploaded) return Admission::kAlreadyUploaded;
  // A cohort's members send their masked inputs, whatever their tasks' deadlines; the others'
  // updates wait for the next cohort.
  if (in_cohort(client)) return Admission::kWanted;
  if (is_ready(client)) return Admission::kReady;
  if (accepted_.size() >= spec_.target) return carried ? Admission::kHeld : Admission::kFilled;
  if (accepted_.size() + reserved_.size() >= spec_.target) return Admission::kHeld;
  if (now > terms->deadline) return Admission::kPastDeadline;
  if (cohort_opened_at_) return Admission::kHeld;
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
      return unavailable(round + " has no place free now (its places are held by uploads being "
                         "checked, or the buffer commits and carries the task over); retry");
    case Admission::kTooStale:
      return conflict("the update of client " + std::to_string(client) +
                      " trained on a version too far behind the model (" + admission_reason(a) +
                      "): the job takes updates at most its " +
                      "async.max_staleness versions behind");
    case Admission::kReady:
      return conflict("client " + std::to_string(client) + " reported its update of " + round +
                      " ready: it is sent masked in a cohort");
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
  const Terms* terms = terms_for(client);
  Accepted& a = accepted_[client];
  a.at = now;
  a.duration_s = now - start;
  a.dispatch_s = start - (terms ? terms->assigned_at : spec_.opened_at);
  a.staleness = staleness(client);
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
  if (handed != handed_out_.end()) return handed->second;
  const Terms* terms = terms_for(client);
  return terms ? terms->assigned_at : spec_.opened_at;
}

void Round::release(ClientId client) { reserved_.erase(client); }

bool Round::due(double now) const {
  if (!reserved_.empty()) return false;
  return closed_ || filled() || (!spec_.buffered && now >= spec_.deadline);
}

double Round::client_seconds(double closed_at) const {
  double total = dropped_client_s_;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    auto it = accepted_.find(tasks_[i].client);
    const double until = it == accepted_.end() ? closed_at : std::min(it->second.at, closed_at);
    total += std::max(0.0, until - std::max(spec_.opened_at, terms_[i].assigned_at));
  }
  return total;
}

double Round::expected_client_seconds() const {
  if (spec_.buffered) return dispatched_expected_s_;
  double total = 0;
  for (const auto& task : tasks_) total += std::max(0.0, task.expected_duration_s);
  return total;
}

namespace {

// 1: a synchronous round's tasks; 2: adds buffers (each task with its terms) and revisions.
constexpr int kPlanFormat = 2;

nlohmann::json task_json(const scheduling::ClientTask& t) {
  return {{"client", t.client},
          {"samples", t.samples},
          {"unique_samples", t.unique_samples},
          {"local_steps", t.local_steps},
          {"batch_size", t.batch_size},
          {"learning_rate", t.learning_rate},
          {"momentum", t.momentum},
          {"weight_decay", t.weight_decay},
          {"prox_mu", t.prox_mu},
          {"sampling", protocol::sampling_name(t.sampling)},
          {"cache",
           {{"policy", protocol::cache_policy_name(t.cache.policy)},
            {"budget_bytes", t.cache.budget_bytes},
            {"repetition_factor", t.cache.repetition_factor},
            {"repetition", protocol::repetition_name(t.cache.repetition)}}},
          {"expected_duration_s", t.expected_duration_s}};
}

// Throws nlohmann's exceptions for a missing or mistyped member (caught by round_from_plan).
Result<scheduling::ClientTask> read_task(const nlohmann::json& j) {
  scheduling::ClientTask t;
  t.client = j.at("client").get<ClientId>();
  t.samples = j.at("samples").get<uint64_t>();
  t.unique_samples = j.at("unique_samples").get<uint64_t>();
  t.local_steps = j.at("local_steps").get<uint64_t>();
  t.batch_size = j.at("batch_size").get<uint32_t>();
  t.learning_rate = j.at("learning_rate").get<double>();
  t.momentum = j.at("momentum").get<double>();
  t.weight_decay = j.at("weight_decay").get<double>();
  t.prox_mu = j.at("prox_mu").get<double>();
  t.expected_duration_s = j.at("expected_duration_s").get<double>();
  auto sampling = protocol::parse_sampling(j.at("sampling").get<std::string>());
  if (!sampling.ok()) return sampling.status();
  t.sampling = *sampling;
  const nlohmann::json& cache = j.at("cache");
  auto policy = protocol::parse_cache_policy(cache.at("policy").get<std::string>());
  if (!policy.ok()) return policy.status();
  auto repetition = protocol::parse_repetition(cache.at("repetition").get<std::string>());
  if (!repetition.ok()) return repetition.status();
  t.cache = {*policy, cache.at("budget_bytes").get<uint64_t>(),
             cache.at("repetition_factor").get<double>(), *repetition};
  return t;
}

}  // namespace

nlohmann::json round_plan_json(const Round& round) {
  nlohmann::json tasks = nlohmann::json::array();
  for (const scheduling::ClientTask& t : round.tasks()) {
    nlohmann::json task = task_json(t);
    if (round.buffered()) {
      const Round::Terms& terms = *round.terms_for(t.client);
      task["terms"] = {{"round", terms.round},
                       {"base_version", terms.base_version},
                       {"base_checksum", terms.base_checksum},
                       {"assigned_at", terms.assigned_at},
                       {"deadline", terms.deadline}};
    }
    tasks.push_back(std::move(task));
  }
  return {{"format", kPlanFormat},
          {"base_checksum", round.base_checksum()},
          {"available", round.available()},
          {"buffered", round.buffered()},
          {"revision", round.buffered() ? round.dispatched().size() : 0},
          {"tasks", std::move(tasks)}};
}

namespace {

// The tasks of `plan` with their terms (a synchronous round's: `spec`'s), in order. Throws
// nlohmann's exceptions for a missing or mistyped member.
Result<std::vector<Round::Assignment>> plan_tasks(const Round::Spec& spec,
                                                  const nlohmann::json& plan) {
  const int format = plan.at("format").get<int>();
  if (format != 1 && format != kPlanFormat) {
    return invalid_argument("round plan format " + std::to_string(format) + " is not known");
  }
  if (plan.value("buffered", false) != spec.buffered) {
    return invalid_argument(spec.buffered ? "a buffer's plan must be a buffer's"
                                          : "a round's plan must not be a buffer's");
  }
  std::vector<Round::Assignment> out;
  for (const nlohmann::json& task : plan.at("tasks")) {
    auto read = read_task(task);
    if (!read.ok()) return invalid_argument("round plan: " + read.status().message());
    Round::Terms terms{spec.index, spec.base_version, plan.at("base_checksum").get<std::string>(),
                       spec.opened_at, spec.deadline};
    if (spec.buffered) {
      const nlohmann::json& t = task.at("terms");
      terms = {t.at("round").get<RoundIndex>(), t.at("base_version").get<uint64_t>(),
               t.at("base_checksum").get<std::string>(), t.at("assigned_at").get<double>(),
               t.at("deadline").get<double>()};
    }
    out.push_back({*read, std::move(terms), std::nullopt});
  }
  return out;
}

}  // namespace

Result<Round> round_from_plan(Round::Spec spec, const nlohmann::json& plan,
                              std::shared_ptr<RoundAggregate> aggregate) {
  try {
    spec.base_checksum = plan.at("base_checksum").get<std::string>();
    spec.available = plan.at("available").get<size_t>();
    auto tasks = plan_tasks(spec, plan);
    if (!tasks.ok()) return tasks.status();
    if (spec.buffered) return Round(spec, std::move(tasks).value(), std::move(aggregate));
    if (tasks->empty()) return invalid_argument("round plan without a task");
    std::vector<scheduling::ClientTask> plain;
    for (Round::Assignment& a : *tasks) plain.push_back(std::move(a.task));
    return Round(spec, std::move(plain), std::move(aggregate));
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("round plan: ") + e.what());
  }
}

Result<std::vector<ClientId>> assign_from_plan(Round& buffer, const nlohmann::json& plan) {
  if (!buffer.buffered()) return invalid_argument("only a buffer takes tasks from a new plan");
  try {
    Round::Spec spec;
    spec.index = buffer.index();
    spec.base_version = buffer.base_version();
    spec.buffered = true;
    auto tasks = plan_tasks(spec, plan);
    if (!tasks.ok()) return tasks.status();
    std::vector<ClientId> assigned;
    for (Round::Assignment& a : *tasks) {
      const ClientId client = a.task.client;
      if (buffer.task_for(client) || buffer.accepted_updates().count(client)) continue;
      buffer.assign(std::move(a.task), a.terms);
      assigned.push_back(client);
    }
    return assigned;
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument(std::string("round plan: ") + e.what());
  }
}

}  // namespace fedcase::rounds
