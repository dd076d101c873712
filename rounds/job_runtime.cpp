#include "rounds/job_runtime.h"

#include <algorithm>
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
  model->params = std::move(params);
  model->blob = encode_blob(ModelBlob{version, model->layout, model->params});
  model->checksum = blob_checksum(model->blob);
  return model;
}

JobRuntime::JobRuntime(JobParts parts, std::shared_ptr<const GlobalModel> model)
    : config_(std::move(parts.config)),
      model_(std::move(model)),
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

Result<std::optional<Round>> JobRuntime::open_round(const std::vector<PoolClient>& pool,
                                                    double now) {
  const uint64_t model_bytes = model_->blob.size();
  std::vector<scheduling::Candidate> candidates;
  candidates.reserve(pool.size());
  std::unordered_map<ClientId, const scheduling::ClientProfile*> profiles;
  size_t available = 0;
  for (const PoolClient& c : pool) {
    available += c.available;
    candidates.push_back(
        scheduling::make_candidate(*c.profile, c.available, config_.training, model_bytes));
    profiles[c.profile->id] = c.profile;
  }
  if (available < std::max<size_t>(1, config_.min_clients)) return std::optional<Round>();
  const RoundIndex index = last_round_ + 1;
  const std::vector<ClientId> selected =
      policy_->select({index, config_.clients_per_round, config_.overcommit}, candidates);
  if (selected.empty()) return std::optional<Round>();
  std::vector<const scheduling::ClientProfile*> invited;
  invited.reserve(selected.size());
  for (ClientId id : selected) invited.push_back(profiles.at(id));
  auto plan = scheduling::plan_round(config_.training, invited, model_bytes);
  if (!plan.ok()) return plan.status();

  aggregation::AggregatorConfig aggregation = config_.aggregation;
  if (private_rounds()) aggregation.dp_seed = dp_seed(index);
  auto aggregator = aggregation::make_aggregator(aggregation, model_->layout.element_count());
  if (!aggregator.ok()) return aggregator.status();

  last_round_ = index;
  Round::Spec spec{
      index, model_->version, now, now + plan->deadline_s, config_.clients_per_round, available};
  return std::optional<Round>(
      Round(spec, std::move(plan->tasks),
            std::make_shared<RoundAggregate>(std::move(aggregator).value())));
}

Conclusion JobRuntime::close(Round& round, double now, const std::string& failure,
                             bool stopped_early) {
  round.close();
  const auto& accepted = round.accepted_updates();
  Conclusion c;
  c.round = round.index();
  c.failure = failure;
  c.closed_at = now;

  uint64_t samples = 0;
  double loss_sum = 0;
  // Where the round's time went: the mean over accepted updates of each phase of a task, the
  // folds' total, and the open to the last accepted update.
  double dispatch = 0, download = 0, train = 0, upload = 0, fold = 0, last = 0;
  std::vector<protocol::EvalReport> evaluations;
  for (const auto& [id, a] : accepted) {
    if (a.evaluation) evaluations.push_back(*a.evaluation);
    samples += a.samples;
    loss_sum += a.loss_sum;
    dispatch += a.dispatch_s;
    download += a.download_s;
    train += a.train_s;
    upload += a.upload_s;
    fold += a.fold_s;
    last = std::max(last, a.at - round.opened_at());
  }
  const double n = std::max<double>(1, double(accepted.size()));
  scheduling::RoundOutcome outcome;
  outcome.round = round.index();
  outcome.duration_s = now - round.opened_at();
  if (samples > 0) outcome.loss = loss_sum / double(samples);

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

  c.metrics = {{"updates", accepted.size()},
               {"invited", round.tasks().size()},
               {"samples", samples},
               {"train_loss", samples > 0 ? loss_sum / double(samples) : 0.0},
               {"aggregation", round.aggregate()->rule()},
               {"finished", finished},
               {"dropped", dropped},
               {"round_seconds", now - round.opened_at()},
               {"timing",
                {{"dispatch_s", dispatch / n},
                 {"download_s", download / n},
                 {"train_s", train / n},
                 {"upload_s", upload / n},
                 {"fold_s", fold},
                 {"last_update_s", last}}}};
  if (!evaluations.empty()) {
    c.metrics["federated_evaluation"] =
        federated_evaluation_json(round.base_version(), evaluations);
  }
  if (!failure.empty()) c.metrics["failure"] = failure;
  return c;
}

Result<json> JobRuntime::privacy_after(const Round& round,
                                       aggregation::RdpAccountant& privacy) const {
  // Random selection samples the available clients; the other policies choose, so no
  // amplification by sampling is claimed for them (q = 1).
  const double z = config_.aggregation.dp_noise_multiplier;
  const double q = policy_->name() == "random" && round.available() > 0
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

Conclusion JobRuntime::fail(Round& round, double now, const std::string& why) {
  return close(round, now, why, /*stopped_early=*/true);
}

Conclusion JobRuntime::conclude(Round& round, double now) {
  if (round.accepted() < config_.min_updates) {
    return close(round, now,
                 "deadline passed with " + std::to_string(round.accepted()) + " updates, " +
                     std::to_string(config_.min_updates) + " needed",
                 /*stopped_early=*/false);
  }
  Conclusion c = close(round, now, "", /*stopped_early=*/false);
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
  std::vector<float> params = model_->params;
  c.optimizer_state_before = optimizer_->save_state();
  Status stepped = optimizer_->step(params, *mean);
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
