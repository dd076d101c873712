#pragma once
// Running a simulation to its end, and its outputs: one CSV row per round and a JSON summary
// with the time to the target accuracy. Formatting is pure; the caller writes the text.

#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "sim/simulator.h"

namespace fedcase::sim {

// When a run reached the target accuracy, and what the fleet had spent by then.
struct TargetReached {
  double time_s = 0;     // virtual seconds at the close of the round
  RoundIndex round = 0;  // that round
  // The fleet's work until then (client-seconds of tasks, RoundRecord::client_s) and the
  // updates it trained and sent for nothing (RoundRecord::wasted), that round included.
  double client_s = 0;
  size_t wasted = 0;
  uint64_t bytes = 0;  // moved by finished tasks (RoundRecord::bytes)
};

// Two readings of "the run reached the target":
//   first      the first round whose accuracy is at or above the target;
//   sustained  the first round of the first streak of `sustained_evaluations` consecutive
//              evaluations at or above it (a round that commits no model is no new
//              evaluation: it neither extends nor breaks a streak). Its time is the streak's
//              start, so it is later than the first crossing only by the crossings that did
//              not last; a lone evaluation lifted over the target by noise does not count.
// Pure; not thread-safe.
class TargetTracker {
 public:
  TargetTracker(double target, uint32_t sustained_evaluations);

  // One round, in order: whether it committed a model, its accuracy, and where the run stood.
  void observe(bool committed, double accuracy, const TargetReached& now);

  const std::optional<TargetReached>& first() const { return first_; }          // nullopt: never
  const std::optional<TargetReached>& sustained() const { return sustained_; }  // nullopt: never
  uint32_t sustained_evaluations() const { return needed_; }

 private:
  double target_;
  uint32_t needed_;  // >= 1
  std::optional<TargetReached> first_, sustained_;
  std::optional<TargetReached> streak_;  // the start of the current streak at the target
  uint32_t streak_length_ = 0;
};

struct RunSummary {
  std::string policy;
  uint64_t seed = 0;
  size_t clients = 0;
  double target_accuracy = 0;
  uint32_t sustained_evaluations = 1;
  std::optional<TargetReached> first;      // TargetTracker::first; nullopt: never reached
  std::optional<TargetReached> sustained;  // TargetTracker::sustained; nullopt: never
  RoundIndex rounds = 0;
  double virtual_s = 0;
  double final_accuracy = 0;
  double best_accuracy = 0;
  double mean_hit_ratio = 0;  // over rounds
  // The fleet's work in all (as in TargetReached).
  double client_s = 0;
  size_t wasted = 0;
  uint64_t bytes = 0;
  double wall_s = 0;
};

// Runs rounds until the target accuracy is sustained (when config.stop_at_target), job.rounds
// have run, or virtual time passes max_virtual_s. `on_round` sees every round's record.
// Errors are the simulator's, except that running out of available clients ends the run.
Result<RunSummary> run_simulation(Simulator& simulator, const SimConfig& config,
                                  const std::function<void(const RoundRecord&)>& on_round);

// "virtual_s,round,accuracy,loss,participants,dropped,hit_ratio,client_s,wasted,
// mean_staleness" (no newline).
std::string round_csv_header();
// One row, virtual_s being the round's close (no newline).
std::string round_csv_row(const RoundRecord& record);
// The summary as one JSON object: time_to_target_s and rounds_to_target of the first
// crossing, sustained_time_to_target_s and sustained_rounds_to_target, each null when not
// reached.
nlohmann::ordered_json summary_json(const RunSummary& summary);

}  // namespace fedcase::sim
