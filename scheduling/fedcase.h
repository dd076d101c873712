#pragma once
// FedCaSe selection: pick clients by "experience", a mix of how useful their data is and how
// fast they finish, where finishing time includes the local I/O their cache shortens.
//
// Experience of a client with a completed task (utility U, expected duration d):
//   E = time_weight * normtime + (1 - time_weight) * normutil
//   normtime = (maxT - d) / (maxT - minT),  normutil = (U - minU) / (maxU - minU)
// clamped to [0, 1], over the running min/max of the durations and utilities the finished
// clients of past rounds showed (a degenerate range gives 1 at or beyond its edge, else 0).
//
// A round with target K invites n = ceil(K * overcommit):
//   1. a uniform random draw of ceil(K * explore_factor) available clients, plus
//   2. the ceil(rho * K) other available clients with the highest experience;
//   3. clients whose survival_probability over their expected duration is below
//      min_survival are set aside (used only if too few others remain; if the union is short,
//      more available clients are drawn at random first);
//   4. the n with the smallest expected duration are kept (unknown durations last).
// With rho <= 1 at most rho * K of the random draw are displaced, so with the default
// explore_factor = overcommit = 1.3 at least (1.3 - rho) * K invitations stay random.
//
// rho adapts to progress, the round's loss decrease per second of round time:
//   - warm-up (warmup_rounds rounds): rho is drawn uniformly in [rho_min, rho_max] each round,
//     and the rho that gave the best progress is kept as the starting point;
//   - then perturb-and-observe: rho is multiplied by rho_step^direction each round, and the
//     direction flips whenever progress fell compared with the round before; clamped to
//     [rho_min, rho_max].
// The controller needs no model of how rho maps to progress (the map is unknown, drifts as
// training goes on, and is noisy); it climbs towards the rho that makes the loss fall fastest
// per second and keeps probing around it.

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "common/status.h"
#include "scheduling/rng.h"
#include "scheduling/selection.h"

namespace fedcase::scheduling {

struct FedCaseConfig {
  double time_weight = 0.1;
  double explore_factor = 1.3;
  double rho_initial = 0.5;
  double rho_min = 0.1;
  double rho_max = 1.0;
  double rho_step = 1.25;  // > 1
  uint32_t warmup_rounds = 5;
  double min_survival = 0.5;
};

// Reads the FedCaSe keys of a `selection` config (docs/scheduling.md); kInvalidArgument for an
// unknown key or a bad value.
Result<FedCaseConfig> parse_fedcase_config(const nlohmann::json& selection);

class FedCasePolicy : public SelectionPolicy {
 public:
  FedCasePolicy(const FedCaseConfig& config, uint64_t seed);

  std::string name() const override { return "fedcase"; }
  std::vector<ClientId> select(const SelectionRequest& request,
                               const std::vector<Candidate>& candidates) override;
  // Widens the running ranges with the finished clients and steps the rho controller.
  void on_round_end(const RoundOutcome& outcome) override;
  nlohmann::json save_state() const override;
  Status load_state(const nlohmann::json& state) override;

  // The candidate's experience in [0, 1]; nullopt when it has no completed task.
  std::optional<double> experience(const Candidate& candidate) const;
  double rho() const { return state_.rho; }

 private:
  // Running [lo, hi] of the values added; empty while lo > hi.
  struct Range {
    double lo = std::numeric_limits<double>::infinity();
    double hi = -std::numeric_limits<double>::infinity();
    void add(double x);
  };
  struct State {
    State(const Rng& generator, double initial_rho) : rng(generator), rho(initial_rho) {}
    Rng rng;
    double rho;
    double direction = 1;  // +1 or -1: the way rho moves next
    uint64_t rounds = 0;
    Range duration_s;
    Range utility;
    std::optional<double> last_loss;
    std::optional<double> last_progress;
    std::optional<double> best_warmup_rho;
    std::optional<double> best_warmup_progress;
  };

  void step_rho(std::optional<double> progress);

  FedCaseConfig config_;
  State state_;
};

}  // namespace fedcase::scheduling
