#include "rounds/job_runtime.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace fedcase::rounds {
namespace {

using nlohmann::json;

}  // namespace

std::shared_ptr<const GlobalModel> make_global_model(uint64_t version, ModelLayout layout,
                                                     std::vector<float> params) {
  auto model = std::make_shared<GlobalModel>();
  model->version = version;
  model->layout = std::move(layout);
  model->blob = encode_blob(ModelBlob{version, model->layout, std::move(params)});
  model->checksum = blob_checksum(model->blob);
  return model;
}

std::vector<float> GlobalModel::params() const {
  BlobView view;
  if (!view_blob(blob, blob.size(), view).ok()) return {};  // checked when it was made
  std::vector<float> values(view.count);
  decode_values(view, 0, view.count, values.data());
  return values;
}

JobRuntime::JobRuntime(JobParts parts, std::shared_ptr<const GlobalModel> model)
    : config_(std::move(parts.config)),
      model_(std::move(model)),
      update_(rounds::update_layout(config_.trainable, model_->layout)),
      policy_(std::move(parts.policy)),
      optimizer_(std::move(parts.optimizer)) {}

Result<std::unique_ptr<JobRuntime>> JobRuntime::create(JobParts parts,
                                                       std::shared_ptr<const GlobalModel> model,
                                                       const json& policy_state,
                                                       const std::string& optimizer_state,
                                                       RoundIndex last_round, uint64_t dp_secret) {
  if (!model) return invalid_argument("a job needs an initial model");
  if (!parts.policy || !parts.optimizer) {
    return invalid_argument("a job needs its selection policy and server optimizer");
  }
  std::unique_ptr<JobRuntime> job(new JobRuntime(std::move(parts), std::move(model)));
  if (policy_state.is_object() && !policy_state.empty()) {
    FEDCASE_RETURN_IF_ERROR(job->policy_->load_state(policy_state));
    job->policy_state_ = policy_state;
  }
  FEDCASE_RETURN_IF_ERROR(job->optimizer_->load_state(optimizer_state));
  job->last_round_ = std::max<RoundIndex>(last_round, job->model_->version);
  job->dp_secret_ = dp_secret;
  return job;
}

uint64_t JobRuntime::dp_seed(RoundIndex index) const {
  const uint64_t seed = config_.seed * 1000003 + index;
  if (dp_secret_ == 0) return seed;
  // splitmix64 of the secret and the round's seed.
  uint64_t z = dp_secret_ ^ (seed + 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

Status JobRuntime::replay_privacy(const json& metrics) {
  auto it = metrics.find("privacy");
  if (it == metrics.end()) return ok_status();
  const json& p = *it;
  if (!p.is_object() || !p.contains("q") || !p["q"].is_number() ||
      !p.contains("noise_multiplier") || !p["noise_multiplier"].is_number()) {
    return invalid_argument("a round's privacy record lacks q or noise_multiplier");
  }
  return privacy_.add_rounds(p["q"].get<double>(), p["noise_multiplier"].get<double>());
}

Result<scheduling::RoundPlan> JobRuntime::select_and_plan(
    const std::vector<PoolClient>& pool, RoundIndex index, size_t count,
    const std::function<bool(ClientId)>& excluded, bool slots) {
  const uint64_t model_bytes = model_->blob.size();
  std::vector<scheduling::Candidate> candidates;
  candidates.reserve(pool.size());
  std::unordered_map<ClientId, const scheduling::ClientProfile*> profiles;
  for (const PoolClient& c : pool) {
    const bool available = c.available && !(excluded && excluded(c.profile->id));
    candidates.push_back(
        scheduling::make_candidate(*c.profile, available, config_.training, model_bytes));
    profiles[c.profile->id] = c.profile;
  }
  // A synchronous round invites K x overcommit; a buffer's slots are filled one for one.
  const scheduling::SelectionRequest request =
      slots ? scheduling::SelectionRequest{index, count, 1.0, true}
            : scheduling::SelectionRequest{index, count, config_.overcommit, false};
  const std::vector<ClientId> selected = policy_->select(request, candidates);
  if (selected.empty()) return scheduling::RoundPlan{};
  std::vector<const scheduling::ClientProfile*> invited;
  invited.reserve(selected.size());
  for (ClientId id : selected) invited.push_back(profiles.at(id));
  return scheduling::plan_round(config_.training, invited, model_bytes);
}

Result<std::shared_ptr<RoundAggregate>> JobRuntime::make_round_aggregate(RoundIndex index) const {
  aggregation::AggregatorConfig aggregation = config_.aggregation;
  if (private_rounds()) aggregation.dp_seed = dp_seed(index);
  auto aggregator = aggregation::make_aggregator(
      aggregation, {update_.layout.element_count(), update_.layout.parameter_count()});
  if (!aggregator.ok()) return aggregator.status();
  return std::make_shared<RoundAggregate>(std::move(aggregator).value());
}

Result<Round> JobRuntime::follow_round(const Round::Spec& spec, const nlohmann::json& plan) const {
  if (spec.base_version != model_->version) {
    return conflict("round " + std::to_string(spec.index) + " trains from model version " +
                    std::to_string(spec.base_version) + ", this replica holds version " +
                    std::to_string(model_->version));
  }
  auto aggregate = make_round_aggregate(spec.index);
  if (!aggregate.ok()) return aggregate.status();
  return round_from_plan(spec, plan, std::move(aggregate).value());
}

Result<std::optional<Round>> JobRuntime::open_round(const std::vector<PoolClient>& pool,
                                                    double now) {
  size_t available = 0;
  for (const PoolClient& c : pool) available += c.available;
  const RoundIndex index = last_round_ + 1;
  if (config_.asynchronous()) {
    if (carried_.empty() && available < std::max<size_t>(1, config_.min_clients)) {
      return std::optional<Round>();
    }
    auto aggregate = make_round_aggregate(index);
    if (!aggregate.ok()) return aggregate.status();
    last_round_ = index;
    Round::Spec spec{index,
                     model_->version,
                     model_->checksum,
                     now,
                     std::numeric_limits<double>::infinity(),
                     config_.clients_per_round,
                     available,
                     /*buffered=*/true};
    Round buffer(spec, std::move(carried_), std::move(aggregate).value());
    carried_.clear();
    std::vector<ClientId> stale;
    for (const auto& task : buffer.tasks()) {
      if (buffer.staleness(task.client) > config_.async.max_staleness) stale.push_back(task.client);
    }
    for (ClientId client : stale) buffer.drop_stale(client);
    return std::optional<Round>(std::move(buffer));
  }
  if (available < std::max<size_t>(1, config_.min_clients)) return std::optional<Round>();
  auto plan = select_and_plan(pool, index, config_.clients_per_round, {}, false);
  if (!plan.ok()) return plan.status();
  if (plan->tasks.empty()) return std::optional<Round>();
  auto aggregate = make_round_aggregate(index);
  if (!aggregate.ok()) return aggregate.status();
  last_round_ = index;
  Round::Spec spec{index,
                   model_->version,
                   model_->checksum,
                   now,
                   now + plan->deadline_s,
                   config_.clients_per_round,
                   available};
  return std::optional<Round>(
      Round(spec, std::move(plan->tasks), std::move(aggregate).value()));
}

size_t JobRuntime::free_slots(const Round& buffer) const {
  const size_t in_flight = buffer.in_flight_count();
  if (buffer.closed() || in_flight >= config_.async.concurrency) return 0;
  return config_.async.concurrency - in_flight;
}

Result<std::vector<Round::Assignment>> JobRuntime::plan_slots(RoundIndex index, size_t count,
                                                              const std::set<ClientId>& excluded,
                                                              const std::vector<PoolClient>& pool,
                                                              double now) {
  std::vector<Round::Assignment> out;
  // No call when nobody could be picked: a policy's state changes with every selection.
  const bool any = std::any_of(pool.begin(), pool.end(), [&](const PoolClient& c) {
    return c.available && !excluded.count(c.profile->id);
  });
  if (count == 0 || !any) return out;
  auto plan = select_and_plan(
      pool, index, count, [&](ClientId id) { return excluded.count(id) > 0; }, true);
  if (!plan.ok()) return plan.status();
  for (scheduling::ClientTask& task : plan->tasks) {
    out.push_back({std::move(task),
                   {index, model_->version, model_->checksum, now, now + plan->deadline_s},
                   std::nullopt});
  }
  return out;
}

std::vector<ProfileChange> JobRuntime::expire(Round& buffer, double now) const {
  std::vector<ProfileChange> changes;
  for (ClientId client : buffer.expire(now)) {
    changes.push_back({ProfileChange::Kind::kMissedDeadline, client, buffer.index(), {}, {}});
  }
  return changes;
}

double JobRuntime::discount(const Round& round, ClientId client) const {
  if (!round.buffered()) return 1.0;
  return staleness_weight(config_.async, round.staleness(client));
}

namespace {

// What a round's accepted updates add up to: their samples and training loss, where their
// time went (the mean over updates of each phase of a task, the folds' total, and the open to
// the last accepted update) and their clients' evaluation reports.
struct Kept {
  uint64_t samples = 0;
  double loss_sum = 0;
  json timing;
  std::vector<protocol::EvalReport> evaluations;
};

Kept kept_updates(const Round& round) {
  Kept k;
  double dispatch = 0, download = 0, train = 0, upload = 0, fold = 0, last = 0;
  for (const auto& [id, a] : round.accepted_updates()) {
    if (a.evaluation) k.evaluations.push_back(*a.evaluation);
    k.samples += a.samples;
    k.loss_sum += a.loss_sum;
    dispatch += a.dispatch_s;
    download += a.download_s;
    train += a.train_s;
    upload += a.upload_s;
    fold += a.fold_s;
    last = std::max(last, a.at - round.opened_at());
  }
  const double n = std::max<double>(1, double(round.accepted()));
  k.timing = {{"dispatch_s", dispatch / n}, {"download_s", download / n},
              {"train_s", train / n},       {"upload_s", upload / n},
              {"fold_s", fold},             {"last_update_s", last}};
  return k;
}

// The metrics every round records, from its kept updates.
json round_metrics(const Round& round, const Kept& kept, double now) {
  return {{"updates", round.accepted()},
          {"samples", kept.samples},
          {"train_loss", kept.samples > 0 ? kept.loss_sum / double(kept.samples) : 0.0},
          {"aggregation", round.aggregate()->rule()},
          {"round_seconds", now - round.opened_at()},
          {"timing", kept.timing}};
}

}  // namespace

Conclusion JobRuntime::close(Round& round, double now, const std::string& failure,
                             bool stopped_early, bool carry) {
  if (round.buffered()) return close_buffer(round, now, failure, stopped_early, carry);
  round.close();
  const auto& accepted = round.accepted_updates();
  Conclusion c;
  c.round = round.index();
  c.failure = failure;
  c.closed_at = now;

  const Kept kept = kept_updates(round);
  scheduling::RoundOutcome outcome;
  outcome.round = round.index();
  outcome.duration_s = now - round.opened_at();
  if (kept.samples > 0) outcome.loss = kept.loss_sum / double(kept.samples);

  // An invitee without an update was not needed once the round filled; otherwise it missed
  // the deadline, unless the round was stopped early for another reason.
  const bool stopped = stopped_early && now < round.deadline() && !round.filled();
  json dropped = json::object();
  json finished = json::array();
  for (const auto& task : round.tasks()) {
    c.invited.push_back(task.client);
    auto a = accepted.find(task.client);
    scheduling::ClientOutcome& client =
        outcome.clients.emplace_back(scheduling::ClientOutcome{task.client, a != accepted.end()});
    if (client.finished) {
      client.duration_s = a->second.duration_s;
      client.utility = a->second.utility;
      finished.push_back(task.client);
      continue;
    }
    // How long its task had run at the close: a lower bound on its duration.
    client.duration_s = std::max(0.0, now - round.task_started_at(task.client));
    if (round.filled()) {
      dropped[std::to_string(task.client)] = "not needed";
    } else if (stopped) {
      dropped[std::to_string(task.client)] = "round stopped";
    } else {
      dropped[std::to_string(task.client)] = "missed deadline";
      c.profile_changes.push_back(
          {ProfileChange::Kind::kMissedDeadline, task.client, round.index(), {}, {}});
    }
  }
  // Selection feedback for every invitee the round closed without, as FedScale gives the
  // stragglers of a completed round (Aggregator.round_completion_handler): the round's mean
  // utility, and the time its task ran as a lower bound on its duration. Not for a round
  // stopped early (cancelled, target reached, coordinator stopped) or one that kept no update,
  // and not for an invitee that never fetched its task (FedScale drops inactive clients).
  const double mean_utility = scheduling::mean_kept_utility(outcome);
  const bool feedback = !stopped_early && !accepted.empty();
  for (scheduling::ClientOutcome& client : outcome.clients) {
    if (client.finished) continue;
    if (!feedback || !round.fetched(client.id)) {
      client.duration_s = 0;  // nothing learnt about its duration
      continue;
    }
    ProfileChange change{ProfileChange::Kind::kNotKept, client.id, round.index(), {}, {}};
    change.not_kept = {round.index(), mean_utility, client.duration_s};
    c.profile_changes.push_back(change);
  }
  policy_->on_round_end(outcome);
  policy_state_ = policy_->save_state();
  c.policy_state = policy_state_;

  c.metrics = round_metrics(round, kept, now);
  c.metrics["invited"] = round.tasks().size();
  c.metrics["finished"] = finished;
  c.metrics["dropped"] = dropped;
  if (!kept.evaluations.empty()) {
    c.metrics["federated_evaluation"] =
        federated_evaluation_json(round.base_version(), kept.evaluations);
  }
  if (!failure.empty()) c.metrics["failure"] = failure;
  return c;
}

Conclusion JobRuntime::close_buffer(Round& buffer, double now, const std::string& failure,
                                    bool stopped_early, bool carry) {
  buffer.close();
  Conclusion c;
  c.round = buffer.index();
  c.failure = failure;
  c.closed_at = now;
  const Kept kept = kept_updates(buffer);

  // The policy learns per buffer what it learns per round: the kept clients with their task's
  // duration and utility, and the dropped ones as unfinished, their duration unknown. Tasks
  // still in flight are neither: they end in a later buffer.
  scheduling::RoundOutcome outcome;
  outcome.round = buffer.index();
  outcome.duration_s = now - buffer.opened_at();
  if (kept.samples > 0) outcome.loss = kept.loss_sum / double(kept.samples);
  json finished = json::array(), staleness = json::object();
  double staleness_sum = 0;
  // Clients evaluate the version they trained from: the figure is of the newest one reported.
  std::optional<uint64_t> evaluated;
  for (const auto& [id, a] : buffer.accepted_updates()) {
    outcome.clients.push_back({id, true, a.duration_s, a.utility});
    finished.push_back(id);
    c.invited.push_back(id);
    const std::string tau = std::to_string(a.staleness);
    staleness[tau] = staleness.value(tau, 0) + 1;
    staleness_sum += double(a.staleness);
    if (a.evaluation && (!evaluated || a.evaluation->model_version > *evaluated)) {
      evaluated = a.evaluation->model_version;
    }
  }
  json dropped = json::object();
  for (const auto& [id, why] : buffer.dropped()) {
    outcome.clients.push_back({id, false, 0, 0});
    dropped[std::to_string(id)] = why;
    c.invited.push_back(id);
  }
  for (ClientId id : buffer.dispatched()) c.invited.push_back(id);
  std::sort(c.invited.begin(), c.invited.end());
  c.invited.erase(std::unique(c.invited.begin(), c.invited.end()), c.invited.end());
  policy_->on_round_end(outcome);
  policy_state_ = policy_->save_state();
  c.policy_state = policy_state_;

  // A stopped job's tasks end with it (`carry` false); any other buffer's carry over,
  // whatever its outcome.
  const std::vector<Round::Assignment> in_flight = buffer.in_flight(/*committed=*/failure.empty());
  carried_ = carry ? in_flight : std::vector<Round::Assignment>();
  c.metrics = round_metrics(buffer, kept, now);
  c.metrics["invited"] = buffer.dispatched().size();
  c.metrics["in_flight"] = in_flight.size();
  c.metrics["finished"] = finished;
  c.metrics["dropped"] = dropped;
  c.metrics["staleness"] = staleness;
  c.metrics["mean_staleness"] =
      buffer.accepted() > 0 ? staleness_sum / double(buffer.accepted()) : 0.0;
  if (evaluated) {
    std::vector<protocol::EvalReport> newest;
    for (const protocol::EvalReport& e : kept.evaluations) {
      if (e.model_version == *evaluated) newest.push_back(e);
    }
    c.metrics["federated_evaluation"] = federated_evaluation_json(*evaluated, newest);
  }
  if (!failure.empty()) c.metrics["failure"] = failure;
  return c;
}

Result<json> JobRuntime::privacy_after(const Round& round,
                                       aggregation::RdpAccountant& privacy) const {
  // Random selection samples the available clients; the other policies choose, so no
  // amplification by sampling is claimed for them (q = 1). Nor for a buffer: its updates come
  // from clients picked one slot at a time as others finish, not from one uniform sample.
  const double z = config_.aggregation.dp_noise_multiplier;
  const double q = policy_->name() == "random" && !round.buffered() && round.available() > 0
                       ? std::min(1.0, double(round.tasks().size()) / double(round.available()))
                       : 1.0;
  FEDCASE_RETURN_IF_ERROR(privacy.add_rounds(q, z));
  auto spent = privacy.spent(config_.dp_delta);
  if (!spent.ok()) return spent.status();
  return json{{"q", q},
              {"noise_multiplier", z},
              {"epsilon", spent->epsilon},
              {"delta", config_.dp_delta},
              {"rounds", privacy.rounds()}};
}

Status step_model(aggregation::ServerOptimizer& optimizer, const UpdateLayout& update,
                  const std::vector<std::string>& local_buffers, std::vector<float>& model,
                  const std::vector<float>& mean_delta) {
  const ModelLayout& carried = update.layout;
  size_t model_values = 0;
  for (const UpdateLayout::Slice& slice : update.slices) {
    model_values = std::max(model_values, slice.offset + slice.count);
  }
  if (mean_delta.size() != carried.element_count() || model.size() < model_values) {
    return invalid_argument("the model, its update's layout and the mean delta differ in size");
  }
  // The parameters come first in the update as in the model: gathered, stepped, put back.
  const size_t parameters = carried.parameter_count();
  std::vector<float> weights;
  weights.reserve(parameters);
  for (size_t t = 0; t < carried.tensors.size(); ++t) {
    if (carried.tensors[t].kind != TensorKind::kParameter) break;
    const UpdateLayout::Slice& slice = update.slices[t];
    weights.insert(weights.end(), model.begin() + slice.offset,
                   model.begin() + slice.offset + slice.count);
  }
  FEDCASE_RETURN_IF_ERROR(optimizer.step(
      weights, std::vector<float>(mean_delta.begin(), mean_delta.begin() + parameters)));
  size_t at = 0;  // in the update's values
  for (size_t t = 0; t < carried.tensors.size(); ++t) {
    const TensorSpec& tensor = carried.tensors[t];
    const UpdateLayout::Slice& slice = update.slices[t];
    float* values = model.data() + slice.offset;
    if (tensor.kind == TensorKind::kParameter) {
      std::copy_n(weights.begin() + at, slice.count, values);
    } else if (!is_local_buffer(local_buffers, tensor)) {
      for (size_t i = 0; i < slice.count; ++i) {
        const float next = values[i] + mean_delta[at + i];
        values[i] = tensor.kind == TensorKind::kIntegerBuffer ? std::nearbyint(next) : next;
      }
    }
    at += slice.count;
  }
  return ok_status();
}

Conclusion JobRuntime::fail(Round& round, double now, const std::string& why, bool goes_on) {
  return close(round, now, why, /*stopped_early=*/true, /*carry=*/goes_on);
}

Conclusion JobRuntime::conclude(Round& round, double now) {
  if (round.accepted() < config_.min_updates) {
    return close(round, now,
                 std::string(round.buffered() ? "concluded" : "deadline passed") + " with " +
                     std::to_string(round.accepted()) + " updates, " +
                     std::to_string(config_.min_updates) + " needed",
                 /*stopped_early=*/false, /*carry=*/true);
  }
  Conclusion c = close(round, now, "", /*stopped_early=*/false, /*carry=*/true);
  auto failed = [&](const std::string& why) {
    c.state = RoundState::kFailed;
    c.failure = why;
    c.metrics["failure"] = why;
    return c;
  };
  if (private_rounds()) {
    aggregation::RdpAccountant privacy = privacy_;
    auto spent = privacy_after(round, privacy);
    if (!spent.ok()) return failed("privacy accounting failed: " + spent.status().to_string());
    c.metrics["privacy"] = *spent;
    c.privacy = std::move(privacy);
  }
  auto mean = round.aggregate()->result();
  if (!mean.ok()) return failed("aggregation failed: " + mean.status().to_string());
  if (!all_finite(*mean)) return failed("the aggregate holds non-finite values");
  std::vector<float> params = model_->params();
  c.optimizer_state_before = optimizer_->save_state();
  Status stepped =
      step_model(*optimizer_, update_, config_.local_buffers, params, *mean);
  if (stepped.ok() && !all_finite(params)) {
    stepped = unprocessable("the next model holds non-finite values");
  }
  if (!stepped.ok()) {
    Status restored = optimizer_->load_state(c.optimizer_state_before);
    (void)restored;  // the state was saved by this optimizer a moment ago
    return failed("server optimizer failed: " + stepped.to_string());
  }
  c.state = RoundState::kCommitted;
  c.model = make_global_model(round.index(), model_->layout, std::move(params));
  c.optimizer_state = optimizer_->save_state();
  c.metrics["model_version"] = c.model->version;
  c.metrics["checksum"] = c.model->checksum;
  return c;
}

void JobRuntime::adopt(const Conclusion& c) {
  if (c.state != RoundState::kCommitted) return;
  model_ = c.model;
  if (c.privacy) privacy_ = *c.privacy;
}

void JobRuntime::abandon(const Conclusion& c) {
  if (c.state != RoundState::kCommitted) return;
  Status restored = optimizer_->load_state(c.optimizer_state_before);
  (void)restored;  // the state was saved by this optimizer before the step
}

}  // namespace fedcase::rounds
