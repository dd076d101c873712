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
// rho adapts to the round outcomes, by one of two controllers (rho_controller). Both start
// with a warm-up of warmup_rounds rounds in which rho is drawn uniformly in [rho_min, rho_max]
// each round; a round's progress is its loss decrease per second of round time.
//   - perturb: the rho that gave the best warm-up progress is kept as the
//     starting point; then rho is multiplied by rho_step^direction each round, and the
//     direction flips whenever progress fell compared with the round before; clamped to
//     [rho_min, rho_max]. It needs no model of how rho maps to progress (the map is unknown,
//     drifts as training goes on, and is noisy); it climbs towards the rho that makes the loss
//     fall fastest per second and keeps probing around it.
//   - learned (the default; it reached the target sooner on every fleet of bench/tta_bench):
//     every round with a known loss decrease is remembered as (loss decrease, round
//     duration, rho), the last kMaxRhoObservations of them. After the warm-up, each such round
//     refits a regression forest (regression_forest.h, seeded from the policy's generator)
//     from (loss decrease, duration, decrease per second) to rho, and takes the rho it
//     predicts for an aim point past the best rounds seen: the largest loss decrease plus its
//     standard deviation, in the shortest duration minus its standard deviation (the shortest
//     duration itself if that is not positive). An inverse model: the rho that went with the
//     largest loss decrease in the least time. Clamped to [rho_min, rho_max]; with fewer than
//     kMinRhoObservations remembered rounds, rho stays.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "common/status.h"
#include "scheduling/rng.h"
#include "scheduling/selection.h"

namespace fedcase::scheduling {

enum class RhoController { kPerturb, kLearned };

struct FedCaseConfig {
  double time_weight = 0.1;
  double explore_factor = 1.3;
  double rho_initial = 0.5;
  double rho_min = 0.1;
  double rho_max = 1.0;
  double rho_step = 1.25;  // > 1
  uint32_t warmup_rounds = 5;
  double min_survival = 0.5;
  RhoController rho_controller = RhoController::kLearned;
};

// Reads the FedCaSe keys of a `selection` config (docs/scheduling.md); kInvalidArgument for an
// unknown key or a bad value.
Result<FedCaseConfig> parse_fedcase_config(const nlohmann::json& selection);

class FedCasePolicy : public SelectionPolicy {
 public:
  // The learned controller's memory, in rounds, and the fewest rounds it fits a forest on (the
  // fewest a tree with ForestParams' leaves of at least 2 can split).
  static constexpr size_t kMaxRhoObservations = 256;
  static constexpr size_t kMinRhoObservations = 4;

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
  // A round as the learned controller remembers it.
  struct RhoObservation {
    double loss_decrease;  // the last known loss before the round minus the round's
    double duration_s;     // > 0
    double rho;            // the rho the round was selected with
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
    std::deque<RhoObservation> rho_observations;  // the latest, oldest first
    // Over every observation, also those dropped since.
    std::optional<double> max_loss_decrease;
    std::optional<double> min_round_duration_s;
  };

  double random_rho();
  void perturb_rho(std::optional<double> progress);
  void learn_rho(std::optional<double> loss_decrease, double duration_s);
  // Adds the observation to `state` unless it is unusable (a non-finite value, a duration not
  // above 0, a rho out of range); returns whether it was added.
  bool add_rho_observation(State& state, const RhoObservation& observation) const;
  // The learned controller's rho; nullopt while it cannot fit.
  std::optional<double> predicted_rho();

  FedCaseConfig config_;
  State state_;
};

}  // namespace fedcase::scheduling
