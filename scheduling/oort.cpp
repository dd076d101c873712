#include "scheduling/oort.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/json_read.h"
#include "scheduling/percentile.h"
#include "scheduling/selection_util.h"

namespace fedcase::scheduling {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr const char* kName = "oort";

bool explored(const Candidate& c) { return c.profile != nullptr && c.profile->feedback_round > 0; }

// The client's round duration as the reference's selector records it: the expected duration
// of its task, or the lower bound a round it was not kept in left, whichever is longer; 0 when
// unknown.
double duration_of(const Candidate& c) {
  const double floor = c.profile != nullptr ? c.profile->duration_floor_s : 0.0;
  return std::max(c.expected_duration_s, floor);
}

// An unexplored client's reward: the distinct samples its task would train on.
double size_reward(const Candidate& c) {
  return static_cast<double>(std::max<uint64_t>(c.unique_samples, 1));
}

// The candidate indices of keyed entries, in order.
template <class Keyed>
std::vector<uint32_t> indices_of(const std::vector<Keyed>& keyed) {
  std::vector<uint32_t> out;
  out.reserve(keyed.size());
  for (const Keyed& k : keyed) out.push_back(k.index);
  return out;
}

}  // namespace

Result<OortConfig> parse_oort_config(const nlohmann::json& selection) {
  OortConfig c;
  ObjectReader r(selection, "selection");
  r.skip("policy")
      .skip("overcommit")
      .number("exploration_start", c.exploration_start, 0, 1)
      .number("exploration_decay", c.exploration_decay, 0, 1)
      .number("exploration_min", c.exploration_min, 0, 1)
      .number("clip_quantile", c.clip_quantile, 0, 1)
      .number("staleness_weight", c.staleness_weight, 0, kInf)
      .number("duration_alpha", c.duration_alpha, 0, kInf)
      .number("pacer_percentile", c.pacer_percentile, 0, 100)
      .number("pacer_step", c.pacer_step, 0, 100)
      .integer("pacer_window", c.pacer_window)
      .number("exploit_cutoff", c.exploit_cutoff, 0, 1)
      .number("explore_window", c.explore_window, 1, kInf)
      .integer("blacklist_after", c.blacklist_after)
      .number("blacklist_max_fraction", c.blacklist_max_fraction, 0, 1);
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  if (c.pacer_window == 0) return invalid_argument("selection.pacer_window must be >= 1");
  if (c.exploration_min > c.exploration_start) {
    return invalid_argument("selection.exploration_min must not exceed exploration_start");
  }
  return c;
}

OortPolicy::OortPolicy(const OortConfig& config, uint64_t seed)
    : config_(config),
      state_{Rng(seed), config.exploration_start, config.pacer_percentile, {}, 0, 0, {}} {}

std::vector<char> OortPolicy::blacklisted(const std::vector<Candidate>& candidates,
                                          size_t invited) const {
  std::vector<char> out(candidates.size(), 0);
  if (config_.blacklist_after == 0) return out;
  std::vector<uint32_t> over;
  size_t available = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Candidate& c = candidates[i];
    if (!c.available) continue;
    ++available;
    if (c.profile != nullptr && c.profile->times_selected > config_.blacklist_after) {
      over.push_back(static_cast<uint32_t>(i));
    }
  }
  const size_t by_fraction =
      static_cast<size_t>(config_.blacklist_max_fraction * static_cast<double>(available));
  const size_t cap = std::min(by_fraction, available > invited ? available - invited : 0);
  keep_best(over, cap, [&](uint32_t a, uint32_t b) {
    const uint64_t sa = candidates[a].profile->times_selected;
    const uint64_t sb = candidates[b].profile->times_selected;
    return sa != sb ? sa > sb : a < b;
  });
  for (uint32_t i : over) out[i] = 1;
  return out;
}

double OortPolicy::preferred_duration(const std::vector<Candidate>& candidates) const {
  if (state_.pacer_percentile >= 100) return kInf;
  // Every known client, available or not, explored or not (the reference's totalArms).
  std::vector<double> durations;
  durations.reserve(candidates.size());
  for (const Candidate& c : candidates) {
    const double d = duration_of(c);
    if (d > 0 && std::isfinite(d)) durations.push_back(d);
  }
  if (durations.empty()) return kInf;
  return percentile(std::move(durations), state_.pacer_percentile / 100.0);
}

double OortPolicy::penalty(double preferred, double duration) const {
  if (!(duration > preferred)) return 1.0;
  return std::pow(preferred / std::max(1e-4, duration), config_.duration_alpha);
}

OortPolicy::Ranking OortPolicy::rank(const SelectionRequest& request,
                                     const std::vector<Candidate>& candidates) const {
  Ranking out;
  out.scores.assign(candidates.size(), 0.0);
  out.preferred = preferred_duration(candidates);
  const std::vector<char> black =
      blacklisted(candidates, invited_count(request.target, request.overcommit));
  // The rewards the normalisation runs over: every eligible client's, an unexplored one's
  // being its distinct samples, as the reference keeps them side by side.
  std::vector<double> rewards;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].available || black[i]) continue;
    const bool known = explored(candidates[i]);
    (known ? out.explored : out.unexplored).push_back(static_cast<uint32_t>(i));
    const double reward =
        known ? candidates[i].profile->feedback_utility : size_reward(candidates[i]);
    if (reward > 0 && std::isfinite(reward)) rewards.push_back(reward);
  }
  if (out.explored.empty() || rewards.empty()) return out;

  const auto [lo, hi] = std::minmax_element(rewards.begin(), rewards.end());
  const double lowest = *lo * 0.999;
  const double range = std::max(*hi - lowest, 1e-4);
  const double clip = percentile(std::move(rewards), config_.clip_quantile);
  const double staleness_scale =
      config_.staleness_weight *
      std::log(static_cast<double>(std::max<RoundIndex>(request.round, 1)));

  for (uint32_t i : out.explored) {
    const Candidate& c = candidates[i];
    const ClientProfile& p = *c.profile;
    const double utility = std::max(0.0, (std::min(p.feedback_utility, clip) - lowest) / range);
    const double last = static_cast<double>(p.feedback_round);
    out.scores[i] =
        (utility + std::sqrt(staleness_scale / last)) * penalty(out.preferred, duration_of(c));
  }
  return out;
}

std::vector<double> OortPolicy::scores(const SelectionRequest& request,
                                       const std::vector<Candidate>& candidates) const {
  return rank(request, candidates).scores;
}

std::vector<uint32_t> OortPolicy::sample(const std::vector<uint32_t>& pool,
                                         const std::vector<double>& weight, size_t count) {
  // Efraimidis-Spirakis: the `count` largest keys ln(u) / weight, u uniform in (0, 1], are a
  // sample without replacement proportional to weight, as successive weighted draws are.
  struct Keyed {
    double key;
    uint32_t index;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(pool.size());
  for (uint32_t i : pool) {
    keyed.push_back({std::log(1.0 - state_.rng.unit()) / std::max(weight[i], 1e-12), i});
  }
  keep_best(keyed, count, [](const Keyed& a, const Keyed& b) {
    return a.key != b.key ? a.key > b.key : a.index < b.index;
  });
  return indices_of(keyed);
}

std::vector<uint32_t> OortPolicy::exploit(const Ranking& ranking, size_t count) {
  if (count == 0) return {};
  const std::vector<double>& score = ranking.scores;
  auto higher = [&](uint32_t a, uint32_t b) {
    return score[a] != score[b] ? score[a] > score[b] : a < b;
  };
  std::vector<uint32_t> pool = ranking.explored;
  // The cut-off is a fraction of the score just past the count-th best.
  const size_t cut_rank = std::min(count, pool.size() - 1);
  std::nth_element(pool.begin(), pool.begin() + static_cast<std::ptrdiff_t>(cut_rank), pool.end(),
                   higher);
  const double cutoff = score[pool[cut_rank]] * config_.exploit_cutoff;
  const size_t above = static_cast<size_t>(
      std::count_if(pool.begin(), pool.end(), [&](uint32_t i) { return score[i] >= cutoff; }));
  keep_best(pool, std::max(above, 10 * count + 1), higher);
  return sample(pool, score, count);
}

std::vector<uint32_t> OortPolicy::explore(const std::vector<Candidate>& candidates,
                                          const Ranking& ranking, size_t count) {
  if (count == 0) return {};
  // Weight: distinct samples x the duration penalty; the pool is the heaviest
  // explore_window x count, ties in random order.
  std::vector<double> weight(candidates.size(), 0.0);
  std::vector<uint32_t> pool = ranking.unexplored;
  partial_shuffle(pool, pool.size(), state_.rng);
  for (uint32_t i : pool) {
    weight[i] = size_reward(candidates[i]) * penalty(ranking.preferred, duration_of(candidates[i]));
  }
  std::stable_sort(pool.begin(), pool.end(),
                   [&](uint32_t a, uint32_t b) { return weight[a] > weight[b]; });
  const size_t window = static_cast<size_t>(config_.explore_window * static_cast<double>(count));
  pool.resize(std::min(pool.size(), std::max(window, count)));
  return sample(pool, weight, count);
}

std::vector<ClientId> OortPolicy::select(const SelectionRequest& request,
                                         const std::vector<Candidate>& candidates) {
  const size_t invited = invited_count(request.target, request.overcommit);
  // Slots of one buffer continue its round: one decay, one uniform first round, and the
  // exploited clients of every call, for on_round_end.
  const bool continuing =
      request.slots && state_.selections > 0 && request.round == state_.selection_round;
  state_.selection_round = request.round;
  if (!continuing) state_.exploited.clear();
  if (state_.selections++ == 0 || (continuing && state_.uniform_round)) {
    // The first round is a uniform draw, as FedScale's client manager makes it.
    state_.uniform_round = true;
    std::vector<uint32_t> pool = available_indices(candidates);
    partial_shuffle(pool, invited, state_.rng);
    pool.resize(std::min(pool.size(), invited));
    return ids_of(candidates, pool);
  }
  state_.uniform_round = false;
  if (!continuing) {
    state_.exploration =
        std::max(state_.exploration * config_.exploration_decay, config_.exploration_min);
  }
  Ranking ranking = rank(request, candidates);
  const double share = static_cast<double>(invited) * state_.exploration;
  size_t exploring = static_cast<size_t>(std::floor(share + 1e-9));
  // A few slots at a time would round every share down to nothing: a slot explores with the
  // probability of the fraction left, so the share holds in expectation.
  if (request.slots && state_.rng.unit() < share - static_cast<double>(exploring)) {
    ++exploring;
  }
  // Each side takes whatever the other cannot fill.
  size_t exploit_count = std::min(ranking.explored.size(), invited - std::min(invited, exploring));
  const size_t explore_count = std::min(ranking.unexplored.size(), invited - exploit_count);
  exploit_count = std::min(ranking.explored.size(), invited - explore_count);
  std::vector<uint32_t> picked = exploit(ranking, exploit_count);
  for (ClientId id : ids_of(candidates, picked)) state_.exploited.push_back(id);
  std::vector<uint32_t> explored_now = explore(candidates, ranking, explore_count);
  picked.insert(picked.end(), explored_now.begin(), explored_now.end());
  return ids_of(candidates, picked);
}

void OortPolicy::on_round_end(const RoundOutcome& outcome) {
  // The mean feedback utility of the exploited clients: their own when kept, the round's
  // mean otherwise (the count starts at 1e-4, as the reference's).
  const double mean_kept = mean_kept_utility(outcome);
  double sum = 0, count = 1e-4;
  for (const ClientOutcome& c : outcome.clients) {
    if (std::find(state_.exploited.begin(), state_.exploited.end(), c.id) ==
        state_.exploited.end()) {
      continue;
    }
    const bool own = c.finished && c.utility >= 0 && std::isfinite(c.utility);
    sum += own ? c.utility : mean_kept;
    count += 1;
  }
  state_.exploited.clear();
  state_.window_utility.push_back(sum / count);
  const size_t keep = 2 * static_cast<size_t>(config_.pacer_window);
  if (state_.window_utility.size() > keep)
    state_.window_utility.erase(state_.window_utility.begin());
  ++state_.rounds;
  if (state_.rounds % config_.pacer_window == 0 && state_.window_utility.size() == keep) pace();
}

void OortPolicy::pace() {
  const auto middle = state_.window_utility.begin() + config_.pacer_window;
  const double previous = std::accumulate(state_.window_utility.begin(), middle, 0.0);
  const double current = std::accumulate(middle, state_.window_utility.end(), 0.0);
  const double change = std::abs(current - previous);
  if (change <= 0.1 * previous) {
    state_.pacer_percentile = std::min(100.0, state_.pacer_percentile + config_.pacer_step);
  } else if (change >= 5 * previous) {
    state_.pacer_percentile =
        std::max(config_.pacer_step, state_.pacer_percentile - config_.pacer_step);
  }
}

nlohmann::json OortPolicy::save_state() const {
  nlohmann::json out = policy_state(kName, state_.rng);
  out["exploration"] = state_.exploration;
  out["pacer_percentile"] = state_.pacer_percentile;
  out["window_utility"] = state_.window_utility;
  out["rounds"] = state_.rounds;
  out["selections"] = state_.selections;
  out["exploited"] = state_.exploited;
  out["selection_round"] = state_.selection_round;
  out["uniform_round"] = state_.uniform_round;
  return out;
}

Status OortPolicy::load_state(const nlohmann::json& json) {
  State s = state_;
  ObjectReader r(json, "oort state");
  FEDCASE_RETURN_IF_ERROR(read_policy_state(r, kName, s.rng));
  r.number("exploration", s.exploration, 0, 1)
      .number("pacer_percentile", s.pacer_percentile, 0, 100)
      .integer("rounds", s.rounds);
  // A state saved before selections were counted had made one per round.
  s.selections = s.rounds;
  r.integer("selections", s.selections)
      .integer("selection_round", s.selection_round)
      .boolean("uniform_round", s.uniform_round);
  const nlohmann::json* exploited = r.member("exploited");
  const nlohmann::json* window = r.member("window_utility");
  FEDCASE_RETURN_IF_ERROR(r.status());
  if (window != nullptr) {
    if (!window->is_array() || window->size() > 2 * static_cast<size_t>(config_.pacer_window)) {
      return invalid_argument("oort state.window_utility must be an array of at most 2 windows");
    }
    s.window_utility.clear();
    for (const auto& v : *window) {
      if (!v.is_number() || !(v.get<double>() >= 0)) {
        return invalid_argument("oort state.window_utility must hold non-negative numbers");
      }
      s.window_utility.push_back(v.get<double>());
    }
  }
  s.exploited.clear();
  if (exploited != nullptr) {
    if (!exploited->is_array()) return invalid_argument("oort state.exploited must be an array");
    for (const auto& v : *exploited) {
      if (!v.is_number_unsigned()) {
        return invalid_argument("oort state.exploited must hold client ids");
      }
      s.exploited.push_back(v.get<ClientId>());
    }
  }
  state_ = std::move(s);
  return ok_status();
}

}  // namespace fedcase::scheduling
