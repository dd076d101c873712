#include "scheduling/fedcase.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/json_read.h"
#include "scheduling/regression_forest.h"
#include "scheduling/selection_util.h"

namespace fedcase::scheduling {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMaxFinite = std::numeric_limits<double>::max();
constexpr const char* kName = "fedcase";
constexpr const char* kPerturbName = "perturb";
constexpr const char* kLearnedName = "learned";

const char* controller_name(RhoController controller) {
  return controller == RhoController::kLearned ? kLearnedName : kPerturbName;
}

// ceil(k * factor) for factor >= 0.
size_t scaled(size_t k, double factor) {
  return static_cast<size_t>(std::ceil(static_cast<double>(k) * factor - 1e-9));
}

// (x - lo) / (hi - lo) clamped to [0, 1]; for an empty or degenerate range, 1 at or beyond
// its upper edge and 0 below it.
double normalised(double x, double lo, double hi) {
  if (!(hi > lo)) return x >= hi ? 1.0 : 0.0;
  return std::clamp((x - lo) / (hi - lo), 0.0, 1.0);
}

// The sample standard deviation (n - 1 in the denominator); 0 for fewer than two values.
double sample_deviation(const std::vector<double>& xs) {
  if (xs.size() < 2) return 0;
  double mean = 0;
  for (double x : xs) mean += x;
  mean /= static_cast<double>(xs.size());
  double squares = 0;
  for (double x : xs) squares += (x - mean) * (x - mean);
  return std::sqrt(squares / static_cast<double>(xs.size() - 1));
}

// What the learned controller's forest reads of a round.
std::vector<double> rho_features(double loss_decrease, double duration_s) {
  return {loss_decrease, duration_s, loss_decrease / duration_s};
}

}  // namespace

Result<FedCaseConfig> parse_fedcase_config(const nlohmann::json& selection) {
  FedCaseConfig c;
  std::string controller = controller_name(c.rho_controller);
  ObjectReader r(selection, "selection");
  r.skip("policy")
      .skip("overcommit")
      .number("time_weight", c.time_weight, 0, 1)
      .number("explore_factor", c.explore_factor, 0, 100)
      .number("rho_initial", c.rho_initial, 0, 100)
      .number("rho_min", c.rho_min, 1e-3, 100)
      .number("rho_max", c.rho_max, 1e-3, 100)
      .number("rho_step", c.rho_step, 1, 10)
      .integer("warmup_rounds", c.warmup_rounds)
      .number("min_survival", c.min_survival, 0, 1)
      .text("rho_controller", controller);
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  if (controller == kLearnedName) {
    c.rho_controller = RhoController::kLearned;
  } else if (controller == kPerturbName) {
    c.rho_controller = RhoController::kPerturb;
  } else {
    return invalid_argument("selection.rho_controller must be \"perturb\" or \"learned\"");
  }
  if (!(c.rho_min <= c.rho_initial && c.rho_initial <= c.rho_max)) {
    return invalid_argument("selection: need rho_min <= rho_initial <= rho_max");
  }
  return c;
}

void FedCasePolicy::Range::add(double x) {
  lo = std::min(lo, x);
  hi = std::max(hi, x);
}

FedCasePolicy::FedCasePolicy(const FedCaseConfig& config, uint64_t seed)
    : config_(config), state_(Rng(seed), config.rho_initial) {}

std::optional<double> FedCasePolicy::experience(const Candidate& c) const {
  if (c.profile == nullptr || c.profile->utility_round == 0) return std::nullopt;
  const double d = c.expected_duration_s;
  // Durations enter negated: shorter is better.
  const double time = d > 0 ? normalised(-d, -state_.duration_s.hi, -state_.duration_s.lo) : 0.0;
  const double utility = normalised(c.profile->utility, state_.utility.lo, state_.utility.hi);
  return config_.time_weight * time + (1.0 - config_.time_weight) * utility;
}

std::vector<ClientId> FedCasePolicy::select(const SelectionRequest& request,
                                            const std::vector<Candidate>& candidates) {
  const size_t invited = invited_count(request.target, request.overcommit);
  std::vector<uint32_t> available = available_indices(candidates);
  const size_t drawn = std::min(available.size(), scaled(request.target, config_.explore_factor));
  partial_shuffle(available, drawn, state_.rng);

  std::vector<char> chosen(candidates.size(), 0);
  std::vector<uint32_t> pool(available.begin(),
                             available.begin() + static_cast<std::ptrdiff_t>(drawn));
  for (uint32_t i : pool) chosen[i] = 1;

  // The most experienced of the clients the draw left out.
  struct Ranked {
    double experience;
    uint32_t index;
  };
  std::vector<Ranked> ranked;
  for (size_t pos = drawn; pos < available.size(); ++pos) {
    if (auto e = experience(candidates[available[pos]])) ranked.push_back({*e, available[pos]});
  }
  keep_best(ranked, scaled(request.target, state_.rho), [](const Ranked& a, const Ranked& b) {
    return a.experience != b.experience ? a.experience > b.experience : a.index < b.index;
  });
  for (const Ranked& r : ranked) {
    pool.push_back(r.index);
    chosen[r.index] = 1;
  }

  auto survives = [&](uint32_t i) {
    const Candidate& c = candidates[i];
    return c.profile == nullptr ||
           survival_probability(*c.profile, std::max(c.expected_duration_s, 0.0)) >=
               config_.min_survival;
  };
  size_t survivors = static_cast<size_t>(std::count_if(pool.begin(), pool.end(), survives));
  // Short of survivors: keep drawing at random (continuing the shuffle) until enough.
  for (size_t pos = drawn; pos < available.size() && survivors < invited; ++pos) {
    std::swap(available[pos], available[pos + state_.rng.below(available.size() - pos)]);
    const uint32_t i = available[pos];
    if (chosen[i]) continue;
    chosen[i] = 1;
    pool.push_back(i);
    if (survives(i)) ++survivors;
  }

  // Survivors first, then the fastest; the pool's (random, then ranked) order breaks ties.
  struct Keyed {
    bool set_aside;
    double duration;
    uint32_t position;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(pool.size());
  for (size_t k = 0; k < pool.size(); ++k) {
    keyed.push_back(
        {!survives(pool[k]), duration_or_inf(candidates[pool[k]]), static_cast<uint32_t>(k)});
  }
  keep_best(keyed, invited, [](const Keyed& a, const Keyed& b) {
    if (a.set_aside != b.set_aside) return b.set_aside;
    if (a.duration != b.duration) return a.duration < b.duration;
    return a.position < b.position;
  });
  std::vector<uint32_t> picked;
  picked.reserve(keyed.size());
  for (const Keyed& k : keyed) picked.push_back(pool[k.position]);
  return ids_of(candidates, picked);
}

void FedCasePolicy::on_round_end(const RoundOutcome& outcome) {
  for (const ClientOutcome& c : outcome.clients) {
    if (!c.finished) continue;
    if (c.duration_s > 0 && std::isfinite(c.duration_s)) state_.duration_s.add(c.duration_s);
    if (c.utility >= 0 && std::isfinite(c.utility)) state_.utility.add(c.utility);
  }
  std::optional<double> loss_decrease;
  if (std::isfinite(outcome.loss)) {
    if (state_.last_loss) loss_decrease = *state_.last_loss - outcome.loss;
    state_.last_loss = outcome.loss;
  }
  ++state_.rounds;
  if (config_.rho_controller == RhoController::kLearned) {
    learn_rho(loss_decrease, outcome.duration_s);
    return;
  }
  std::optional<double> progress;
  if (loss_decrease && outcome.duration_s > 0) progress = *loss_decrease / outcome.duration_s;
  perturb_rho(progress);
}

double FedCasePolicy::random_rho() {
  return config_.rho_min + state_.rng.unit() * (config_.rho_max - config_.rho_min);
}

void FedCasePolicy::perturb_rho(std::optional<double> progress) {
  State& s = state_;
  if (s.rounds <= config_.warmup_rounds) {
    if (progress && (!s.best_warmup_progress || *progress > *s.best_warmup_progress)) {
      s.best_warmup_rho = s.rho;
      s.best_warmup_progress = progress;
    }
    if (s.rounds < config_.warmup_rounds) {
      s.rho = random_rho();
    } else if (s.best_warmup_rho) {
      s.rho = *s.best_warmup_rho;
    }
  } else if (progress) {
    if (s.last_progress && *progress < *s.last_progress) s.direction = -s.direction;
    s.rho = std::clamp(s.rho * std::pow(config_.rho_step, s.direction), config_.rho_min,
                       config_.rho_max);
  }
  if (progress) s.last_progress = progress;
}

void FedCasePolicy::learn_rho(std::optional<double> loss_decrease, double duration_s) {
  State& s = state_;
  const bool observed =
      loss_decrease && add_rho_observation(s, {*loss_decrease, duration_s, s.rho});
  if (s.rounds < config_.warmup_rounds) {
    s.rho = random_rho();
  } else if (observed) {
    if (std::optional<double> rho = predicted_rho()) s.rho = *rho;
  }
}

bool FedCasePolicy::add_rho_observation(State& s, const RhoObservation& o) const {
  const bool usable = std::isfinite(o.loss_decrease) && o.duration_s > 0 &&
                      std::isfinite(o.duration_s) &&
                      std::isfinite(o.loss_decrease / o.duration_s) && o.rho >= config_.rho_min &&
                      o.rho <= config_.rho_max;
  if (!usable) return false;
  s.rho_observations.push_back(o);
  if (s.rho_observations.size() > kMaxRhoObservations) s.rho_observations.pop_front();
  s.max_loss_decrease = std::max(s.max_loss_decrease.value_or(-kInf), o.loss_decrease);
  s.min_round_duration_s = std::min(s.min_round_duration_s.value_or(kInf), o.duration_s);
  return true;
}

std::optional<double> FedCasePolicy::predicted_rho() {
  State& s = state_;
  if (s.rho_observations.size() < kMinRhoObservations) return std::nullopt;
  std::vector<std::vector<double>> rows;
  std::vector<double> rhos, loss_decreases, durations;
  for (const RhoObservation& o : s.rho_observations) {
    rows.push_back(rho_features(o.loss_decrease, o.duration_s));
    rhos.push_back(o.rho);
    loss_decreases.push_back(o.loss_decrease);
    durations.push_back(o.duration_s);
  }
  // The reference's aim point. Past the observations' extremes the standard-deviation
  // offsets take the same branches as the extremes themselves (docs/scheduling.md); they are
  // kept so that the point is the reference's.
  const double aim_loss_decrease = *s.max_loss_decrease + sample_deviation(loss_decreases);
  double aim_duration = *s.min_round_duration_s - sample_deviation(durations);
  // A tree compares each feature with thresholds between observed values, so every aim
  // duration in (0, shortest] takes the same branches; one at or below 0 would turn the aim's
  // decrease per second negative, below the rounds it should lie beyond.
  if (!(aim_duration > 0)) aim_duration = *s.min_round_duration_s;
  Result<RegressionForest> forest = RegressionForest::fit(rows, rhos, ForestParams{}, s.rng.next());
  if (!forest.ok()) return std::nullopt;
  return std::clamp(forest->predict(rho_features(aim_loss_decrease, aim_duration)), config_.rho_min,
                    config_.rho_max);
}

nlohmann::json FedCasePolicy::save_state() const {
  const State& s = state_;
  nlohmann::json out = policy_state(kName, s.rng);
  out["rho_controller"] = controller_name(config_.rho_controller);
  out["rho"] = s.rho;
  out["direction"] = s.direction;
  out["rounds"] = s.rounds;
  auto put_range = [&out](const char* key, const Range& range) {
    if (range.lo <= range.hi) out[key] = {range.lo, range.hi};
  };
  auto put = [&out](const char* key, const std::optional<double>& value) {
    if (value) out[key] = *value;
  };
  put_range("duration_range", s.duration_s);
  put_range("utility_range", s.utility);
  put("last_loss", s.last_loss);
  put("last_progress", s.last_progress);
  put("best_warmup_rho", s.best_warmup_rho);
  put("best_warmup_progress", s.best_warmup_progress);
  for (const RhoObservation& o : s.rho_observations) {
    out["rho_observations"].push_back({o.loss_decrease, o.duration_s, o.rho});
  }
  put("max_loss_decrease", s.max_loss_decrease);
  put("min_round_duration", s.min_round_duration_s);
  return out;
}

Status FedCasePolicy::load_state(const nlohmann::json& json) {
  State s(state_.rng, config_.rho_initial);
  // A state saved before there was a choice holds what both controllers share (and no
  // observations): either controller continues from it.
  std::string controller = controller_name(config_.rho_controller);
  ObjectReader r(json, "fedcase state");
  FEDCASE_RETURN_IF_ERROR(read_policy_state(r, kName, s.rng));
  r.text("rho_controller", controller)
      .number("rho", s.rho, config_.rho_min, config_.rho_max)
      .number("direction", s.direction, -1, 1)
      .integer("rounds", s.rounds)
      .number("last_loss", s.last_loss, -kInf, kInf)
      .number("last_progress", s.last_progress, -kInf, kInf)
      .number("best_warmup_rho", s.best_warmup_rho, config_.rho_min, config_.rho_max)
      .number("best_warmup_progress", s.best_warmup_progress, -kInf, kInf)
      .number("max_loss_decrease", s.max_loss_decrease, -kMaxFinite, kMaxFinite)
      .number("min_round_duration", s.min_round_duration_s,
              std::numeric_limits<double>::denorm_min(), kMaxFinite);
  for (auto [key, range] : {std::pair<const char*, Range*>{"duration_range", &s.duration_s},
                            {"utility_range", &s.utility}}) {
    const nlohmann::json* v = r.member(key);
    if (v == nullptr) continue;
    if (!v->is_array() || v->size() != 2 || !(*v)[0].is_number() || !(*v)[1].is_number() ||
        (*v)[0].get<double>() > (*v)[1].get<double>()) {
      return invalid_argument(r.path(key) + " must be [lo, hi] with lo <= hi");
    }
    range->add((*v)[0].get<double>());
    range->add((*v)[1].get<double>());
  }
  if (const nlohmann::json* rows = r.member("rho_observations")) {
    const std::string bad_rows =
        r.path("rho_observations") + " must be at most " + std::to_string(kMaxRhoObservations) +
        " rows [loss_decrease, duration_s > 0, rho in [rho_min, rho_max]] of finite numbers";
    if (!rows->is_array() || rows->size() > kMaxRhoObservations) return invalid_argument(bad_rows);
    for (const nlohmann::json& row : *rows) {
      if (!row.is_array() || row.size() != 3 ||
          !std::all_of(row.begin(), row.end(),
                       [](const nlohmann::json& x) { return x.is_number(); }) ||
          !add_rho_observation(
              s, {row[0].get<double>(), row[1].get<double>(), row[2].get<double>()})) {
        return invalid_argument(bad_rows);
      }
    }
  }
  FEDCASE_RETURN_IF_ERROR(r.status());
  if (s.direction != 1 && s.direction != -1) {
    return invalid_argument("fedcase state.direction must be 1 or -1");
  }
  if (controller != controller_name(config_.rho_controller)) {
    return invalid_argument("fedcase state.rho_controller is \"" + controller +
                            "\", the config's is \"" + controller_name(config_.rho_controller) +
                            "\"");
  }
  state_ = std::move(s);
  return ok_status();
}

}  // namespace fedcase::scheduling
