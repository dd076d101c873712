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

bool explored(const Candidate& c) { return c.profile != nullptr && c.profile->utility_round > 0; }

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
      state_{Rng(seed), config.exploration_start, config.pacer_percentile, {}, 0} {}

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

double OortPolicy::preferred_duration(const std::vector<Candidate>& candidates,
                                      const std::vector<uint32_t>& explored) const {
  if (state_.pacer_percentile >= 100) return kInf;
  std::vector<double> durations;
  durations.reserve(explored.size());
  for (uint32_t i : explored) {
    if (candidates[i].expected_duration_s > 0)
      durations.push_back(candidates[i].expected_duration_s);
  }
  if (durations.empty()) return kInf;
  return percentile(std::move(durations), state_.pacer_percentile / 100.0);
}

OortPolicy::Ranking OortPolicy::rank(const SelectionRequest& request,
                                     const std::vector<Candidate>& candidates) const {
  Ranking out;
  out.scores.assign(candidates.size(), 0.0);
  const std::vector<char> black =
      blacklisted(candidates, invited_count(request.target, request.overcommit));
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!candidates[i].available || black[i]) continue;
    (explored(candidates[i]) ? out.explored : out.unexplored).push_back(static_cast<uint32_t>(i));
  }
  if (out.explored.empty()) return out;

  std::vector<double> utilities;
  utilities.reserve(out.explored.size());
  for (uint32_t i : out.explored) utilities.push_back(candidates[i].profile->utility);
  const double lowest = *std::min_element(utilities.begin(), utilities.end());
  const double clip = percentile(std::move(utilities), config_.clip_quantile);
  const double preferred = preferred_duration(candidates, out.explored);
  const double staleness_scale =
      config_.staleness_weight *
      std::log(static_cast<double>(std::max<RoundIndex>(request.round, 1)));

  for (uint32_t i : out.explored) {
    const Candidate& c = candidates[i];
    const ClientProfile& p = *c.profile;
    const double utility =
        clip > lowest ? (std::min(p.utility, clip) - lowest) / (clip - lowest) : 0.0;
    const double last = static_cast<double>(std::max<RoundIndex>(p.last_selected_round, 1));
    double score = utility + std::sqrt(staleness_scale / last);
    const double t = c.expected_duration_s;
    if (t > preferred) score *= std::pow(preferred / t, config_.duration_alpha);
    out.scores[i] = score;
  }
  return out;
}

std::vector<double> OortPolicy::scores(const SelectionRequest& request,
                                       const std::vector<Candidate>& candidates) const {
  return rank(request, candidates).scores;
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
  keep_best(pool, std::max(above, 10 * count), higher);

  // Weighted sampling without replacement (Efraimidis-Spirakis): the `count` largest keys
  // ln(u) / weight, u uniform in (0, 1], are a sample proportional to weight.
  struct Keyed {
    double key;
    uint32_t index;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(pool.size());
  for (uint32_t i : pool) {
    keyed.push_back({std::log(1.0 - state_.rng.unit()) / std::max(score[i], 1e-12), i});
  }
  keep_best(keyed, count, [](const Keyed& a, const Keyed& b) {
    return a.key != b.key ? a.key > b.key : a.index < b.index;
  });
  return indices_of(keyed);
}

std::vector<uint32_t> OortPolicy::explore(const std::vector<Candidate>& candidates,
                                          const std::vector<uint32_t>& unexplored, size_t count) {
  if (count == 0) return {};
  // Fastest expected duration first; ties (e.g. clients known only by priors) in random order.
  struct Keyed {
    double duration;
    uint64_t tie;
    uint32_t index;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(unexplored.size());
  for (uint32_t i : unexplored)
    keyed.push_back({duration_or_inf(candidates[i]), state_.rng.next(), i});
  keep_best(keyed, count, [](const Keyed& a, const Keyed& b) {
    if (a.duration != b.duration) return a.duration < b.duration;
    return a.tie != b.tie ? a.tie < b.tie : a.index < b.index;
  });
  return indices_of(keyed);
}

std::vector<ClientId> OortPolicy::select(const SelectionRequest& request,
                                         const std::vector<Candidate>& candidates) {
  Ranking ranking = rank(request, candidates);
  const size_t invited = invited_count(request.target, request.overcommit);
  const size_t wanted_exploit = static_cast<size_t>(
      std::floor(static_cast<double>(invited) * (1.0 - state_.exploration) + 1e-9));
  // Each side takes whatever the other cannot fill.
  size_t exploit_count = std::min(ranking.explored.size(), wanted_exploit);
  const size_t explore_count = std::min(ranking.unexplored.size(), invited - exploit_count);
  exploit_count = std::min(ranking.explored.size(), invited - explore_count);
  std::vector<uint32_t> picked = exploit(ranking, exploit_count);
  std::vector<uint32_t> explored_now = explore(candidates, ranking.unexplored, explore_count);
  picked.insert(picked.end(), explored_now.begin(), explored_now.end());
  return ids_of(candidates, picked);
}

void OortPolicy::on_round_end(const RoundOutcome& outcome) {
  state_.exploration =
      std::max(state_.exploration * config_.exploration_decay, config_.exploration_min);
  double total = 0;
  for (const ClientOutcome& c : outcome.clients) {
    if (c.finished && c.utility > 0 && std::isfinite(c.utility)) total += c.utility;
  }
  state_.window_utility.push_back(total);
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
  return out;
}

Status OortPolicy::load_state(const nlohmann::json& json) {
  State s = state_;
  ObjectReader r(json, "oort state");
  FEDCASE_RETURN_IF_ERROR(read_policy_state(r, kName, s.rng));
  r.number("exploration", s.exploration, 0, 1)
      .number("pacer_percentile", s.pacer_percentile, 0, 100)
      .integer("rounds", s.rounds);
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
  state_ = std::move(s);
  return ok_status();
}

}  // namespace fedcase::scheduling
