#include "scheduling/round_plan.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/json_read.h"
#include "scheduling/percentile.h"

namespace fedcase::scheduling {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Status parse_deadline(ObjectReader& parent, DeadlineConfig& out) {
  const nlohmann::json* member = parent.member("deadline");
  if (member == nullptr) return ok_status();
  ObjectReader r(*member, parent.path("deadline"));
  DeadlineConfig d;
  std::string mode = "percentile";
  r.text("mode", mode)
      .number("seconds", d.fixed_s, 1e-3, kInf)
      .number("percentile", d.percentile, 0, 1)
      .number("slack", d.slack, 1e-3, kInf)
      .number("min_seconds", d.min_s, 0, kInf)
      .number("max_seconds", d.max_s, 1e-3, kInf);
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  if (mode == "fixed") {
    d.mode = DeadlineMode::kFixed;
  } else if (mode != "percentile") {
    return invalid_argument(r.path("mode") + " must be \"fixed\" or \"percentile\"");
  }
  if (d.min_s > d.max_s) return invalid_argument(r.path("min_seconds") + " exceeds max_seconds");
  out = d;
  return ok_status();
}

// A name of `parse` at `key` of `r` (kept in `out` when absent).
template <class Enum>
Status parse_name(ObjectReader& r, const char* key, Result<Enum> (*parse)(std::string_view),
                  Enum& out) {
  std::string name;
  const bool present = r.member(key) != nullptr;
  r.text(key, name);
  if (!present || !r.status().ok()) return ok_status();
  Result<Enum> parsed = parse(name);
  if (!parsed.ok()) return invalid_argument(r.path(key) + ": " + parsed.status().message());
  out = *parsed;
  return ok_status();
}

Status parse_cache(ObjectReader& parent, protocol::CacheDirectives& out) {
  const nlohmann::json* member = parent.member("cache");
  if (member == nullptr) return ok_status();
  ObjectReader r(*member, parent.path("cache"));
  protocol::CacheDirectives c;
  r.merge(parse_name(r, "policy", protocol::parse_cache_policy, c.policy))
      .integer("budget_bytes", c.budget_bytes)
      .number("repetition_factor", c.repetition_factor, 1, kInf)
      .merge(parse_name(r, "repetition", protocol::parse_repetition, c.repetition));
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  out = c;
  return ok_status();
}

Status parse_priors(ObjectReader& parent, DurationPriors& out) {
  const nlohmann::json* member = parent.member("priors");
  if (member == nullptr) return ok_status();
  Result<DurationPriors> priors = parse_duration_priors(*member, parent.path("priors"));
  if (!priors.ok()) return priors.status();
  out = *priors;
  return ok_status();
}

}  // namespace

Result<TrainingParams> parse_training_params(const nlohmann::json& training) {
  TrainingParams p;
  ObjectReader r(training, "training");
  r.integer("local_epochs", p.local_epochs)
      .integer("sample_budget", p.sample_budget)
      .integer("batch_size", p.batch_size, 1, protocol::kMaxBatchSize)
      .number("lr", p.learning_rate, 1e-12, protocol::kMaxLearningRate)
      .number("momentum", p.momentum, 0, 0.999)
      .number("weight_decay", p.weight_decay, 0, protocol::kMaxWeightDecay)
      .number("prox_mu", p.prox_mu, 0, protocol::kMaxProxMu)
      .merge(parse_name(r, "sampling", protocol::parse_sampling, p.sampling))
      .merge(parse_deadline(r, p.deadline))
      .merge(parse_cache(r, p.cache))
      .merge(parse_priors(r, p.priors));
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  if (p.sample_budget == 0 && p.local_epochs == 0) {
    return invalid_argument("training: local_epochs must be >= 1 when sample_budget is 0");
  }
  return p;
}

TaskShape task_shape(const TrainingParams& params, const ClientProfile& profile,
                     uint64_t model_bytes) {
  uint64_t samples = params.sample_budget > 0
                         ? params.sample_budget
                         : static_cast<uint64_t>(params.local_epochs) * profile.dataset_size;
  TaskShape shape;
  shape.samples = std::max<uint64_t>(samples, params.batch_size);
  shape.download_bytes = model_bytes;
  shape.upload_bytes = model_bytes;
  return shape;
}

Candidate make_candidate(const ClientProfile& profile, bool available, const TrainingParams& params,
                         uint64_t model_bytes) {
  Candidate c;
  c.id = profile.id;
  c.available = available;
  c.profile = &profile;
  const TaskShape shape = task_shape(params, profile, model_bytes);
  c.expected_duration_s = expected_duration(profile, shape, params.priors).total_s();
  c.unique_samples = unique_samples(shape.samples, profile.dataset_size);
  return c;
}

Result<RoundPlan> plan_round(const TrainingParams& params,
                             const std::vector<const ClientProfile*>& selected,
                             uint64_t model_bytes) {
  if (selected.empty()) return invalid_argument("plan_round: no clients selected");
  RoundPlan plan;
  plan.tasks.reserve(selected.size());
  std::vector<double> durations;
  durations.reserve(selected.size());
  for (const ClientProfile* profile : selected) {
    if (profile == nullptr) return invalid_argument("plan_round: null profile");
    const TaskShape shape = task_shape(params, *profile, model_bytes);
    ClientTask task;
    task.client = profile->id;
    task.samples = shape.samples;
    task.unique_samples = unique_samples(shape.samples, profile->dataset_size);
    task.local_steps = (shape.samples + params.batch_size - 1) / params.batch_size;
    task.batch_size = params.batch_size;
    task.learning_rate = params.learning_rate;
    task.momentum = params.momentum;
    task.weight_decay = params.weight_decay;
    task.prox_mu = params.prox_mu;
    task.sampling = params.sampling;
    task.cache = params.cache;
    if (profile->cache_capacity_bytes > 0) {
      task.cache.budget_bytes = std::min(task.cache.budget_bytes, profile->cache_capacity_bytes);
    }
    task.expected_duration_s = expected_duration(*profile, shape, params.priors).total_s();
    durations.push_back(task.expected_duration_s);
    plan.tasks.push_back(task);
  }
  const DeadlineConfig& d = params.deadline;
  plan.deadline_s =
      d.mode == DeadlineMode::kFixed
          ? d.fixed_s
          : std::clamp(d.slack * percentile(std::move(durations), d.percentile), d.min_s, d.max_s);
  return plan;
}

}  // namespace fedcase::scheduling
