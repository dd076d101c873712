#pragma once
// Oort selection (Lai et al., OSDI 2021), the heterogeneity-aware baseline.
//
// A client that has completed a task is "explored" and scores
//   score = (min(U, clip) - min U) / (clip - min U) + sqrt(staleness_weight * ln(round) / last)
// where U is its statistical utility, clip the clip_quantile of the explored clients'
// utilities and `last` the round it was last selected; if its expected duration t exceeds
// the preferred round duration T, the score is multiplied by (T / t)^duration_alpha.
// T is the pacer's percentile of the explored candidates' expected durations.
//
// Of the n = ceil(K * overcommit) invitations, a fraction (1 - epsilon) exploits: it samples
// without replacement, proportionally to score, among the clients scoring at least
// exploit_cutoff times the n-th best score (at least 10x as many clients as it picks). The
// rest explores unexplored clients, fastest expected duration first. Epsilon starts at
// exploration_start and decays by exploration_decay per round down to exploration_min.
// Every pacer_window rounds the pacer compares the utility collected in the last window with
// the window before: a change within 10% raises the percentile by pacer_step (longer rounds
// to reach more utility), a change over 5x lowers it. Optionally, clients selected more than
// blacklist_after times are left out (the most selected first, at most
// blacklist_max_fraction of the available ones, and never so many that fewer than n remain).

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
  double clip_quantile = 0.95;
  double staleness_weight = 0.1;
  double duration_alpha = 2;
  double pacer_percentile = 30;  // initial percentile (0-100) that defines T
  double pacer_step = 5;         // percentile points per pacer move
  uint32_t pacer_window = 20;    // rounds (>= 1)
  double exploit_cutoff = 0.95;
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
  // Decays epsilon and feeds the pacer with the finished clients' total utility.
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
    std::vector<double> window_utility;  // total utility per round, the last 2 windows
    uint64_t rounds = 0;
  };
  struct Ranking {
    std::vector<uint32_t> explored;  // eligible candidates with a completed task
    std::vector<uint32_t> unexplored;
    std::vector<double> scores;  // per candidate; 0 unless explored
  };

  Ranking rank(const SelectionRequest& request, const std::vector<Candidate>& candidates) const;
  std::vector<char> blacklisted(const std::vector<Candidate>& candidates, size_t invited) const;
  double preferred_duration(const std::vector<Candidate>& candidates,
                            const std::vector<uint32_t>& explored) const;
  std::vector<uint32_t> exploit(const Ranking& ranking, size_t count);
  std::vector<uint32_t> explore(const std::vector<Candidate>& candidates,
                                const std::vector<uint32_t>& unexplored, size_t count);
  void pace();

  OortConfig config_;
  State state_;
};

}  // namespace fedcase::scheduling
