#pragma once
// Oort selection (Lai et al., OSDI 2021), the heterogeneity-aware baseline, rule by rule as its
// authors' code does it (FedScale: thirdparty/oort/oort.py, _training_selector, driven by
// fedscale/cloud/client_manager.py and fedscale/cloud/aggregation/aggregator.py); the
// references are listed per rule in docs/scheduling.md.
//
// A client is "explored" once a concluded round gave it feedback (ClientProfile::
// feedback_round): kept invitees their own utility, the others the round's mean utility and a
// lower bound on their duration. An explored client scores
//   score = (min(U, clip) - 0.999 minU) / (maxU - 0.999 minU)
//           + sqrt(staleness_weight * ln(round) / feedback_round)
// over the rewards of the eligible clients (an unexplored client's reward is its task's
// distinct samples), clip their clip_quantile; if its duration t (expected, at least its
// lower bound) exceeds the preferred round duration T, the score is multiplied by
// (T / t)^duration_alpha. T is the pacer's percentile of every known client's duration.
//
// The first selection is a uniform draw. Each later one first decays epsilon (by
// exploration_decay, down to exploration_min), then of the n = ceil(K * overcommit)
// invitations n - floor(n * epsilon) exploit: sampled without replacement, proportionally to
// score, among the clients scoring at least exploit_cutoff times the score just past the
// count-th best (at least 10x the count plus one). The rest explore: sampled proportionally
// to distinct samples x the same duration penalty among the explore_window x count best
// unexplored clients by that weight. Either side fills what the other cannot.
// The pacer keeps the mean utility of each round's exploited clients; every pacer_window
// rounds it compares the last window's sum with the one before: a change within 10% raises
// the percentile by pacer_step (longer rounds to reach more utility), a change over 5x
// lowers it. Optionally, clients selected more than blacklist_after times are left out (the
// most selected first, at most blacklist_max_fraction of the available ones, and never so
// many that fewer than n remain).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/status.h"
#include "scheduling/rng.h"
#include "scheduling/selection.h"

namespace fedcase::scheduling {

struct OortConfig {
  double exploration_start = 0.9;
  double exploration_decay = 0.98;
  double exploration_min = 0.3;
  double clip_quantile = 0.9;  // FedScale's clip_bound
  double staleness_weight = 0.1;
  double duration_alpha = 2;
  double pacer_percentile = 30;  // initial percentile (0-100) that defines T
  double pacer_step = 5;         // percentile points per pacer move
  uint32_t pacer_window = 20;    // rounds (>= 1)
  double exploit_cutoff = 0.05;  // FedScale's cut_off_util
  double explore_window = 5;     // unexplored pool: this many times the clients it picks (>= 1)
  uint64_t blacklist_after = 0;  // 0: no blacklist
  double blacklist_max_fraction = 0.3;
};

// Reads the Oort keys of a `selection` config (docs/scheduling.md); kInvalidArgument for an
// unknown key or a bad value.
Result<OortConfig> parse_oort_config(const nlohmann::json& selection);

class OortPolicy : public SelectionPolicy {
 public:
  OortPolicy(const OortConfig& config, uint64_t seed);

  std::string name() const override { return "oort"; }
  std::vector<ClientId> select(const SelectionRequest& request,
                               const std::vector<Candidate>& candidates) override;
  // Feeds the pacer with the mean utility of the clients the round exploited.
  void on_round_end(const RoundOutcome& outcome) override;
  nlohmann::json save_state() const override;
  Status load_state(const nlohmann::json& state) override;

  // The exploitation score of each candidate for `request`, in order: 0 for a candidate that
  // is unavailable, blacklisted or unexplored. select() samples by these.
  std::vector<double> scores(const SelectionRequest& request,
                             const std::vector<Candidate>& candidates) const;

 private:
  struct State {
    Rng rng;
    double exploration;
    double pacer_percentile;
    std::vector<double> window_utility;  // exploited clients' mean utility per round, 2 windows
    uint64_t rounds = 0;                 // on_round_end calls
    uint64_t selections = 0;             // select calls
    std::vector<ClientId> exploited;     // the last round's exploited clients
    RoundIndex selection_round = 0;      // the round of the last select call
    bool uniform_round = false;          // that round drew uniformly (the first one)
  };
  struct Ranking {
    std::vector<uint32_t> explored;  // eligible candidates with feedback
    std::vector<uint32_t> unexplored;
    std::vector<double> scores;  // per candidate; 0 unless explored
    double preferred = 0;        // T
  };

  Ranking rank(const SelectionRequest& request, const std::vector<Candidate>& candidates) const;
  std::vector<char> blacklisted(const std::vector<Candidate>& candidates, size_t invited) const;
  double preferred_duration(const std::vector<Candidate>& candidates) const;
  double penalty(double preferred, double duration) const;
  std::vector<uint32_t> exploit(const Ranking& ranking, size_t count);
  std::vector<uint32_t> explore(const std::vector<Candidate>& candidates, const Ranking& ranking,
                                size_t count);
  // Weighted sampling without replacement of `count` of `pool` (weights by position).
  std::vector<uint32_t> sample(const std::vector<uint32_t>& pool, const std::vector<double>& weight,
                               size_t count);
  void pace();

  OortConfig config_;
  State state_;
};

}  // namespace fedcase::scheduling
