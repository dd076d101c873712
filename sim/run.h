#pragma once
// Running a simulation to its end, and its outputs: one CSV row per round and a JSON summary
// with the time to the target accuracy. Formatting is pure; the caller writes the text.

#include <functional>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "sim/simulator.h"

namespace fedcase::sim {

struct RunSummary {
  std::string policy;
  uint64_t seed = 0;
  size_t clients = 0;
  double target_accuracy = 0;
  std::optional<double> time_to_target_s;  // virtual seconds at the first round reaching it
  std::optional<RoundIndex> rounds_to_target;
  RoundIndex rounds = 0;
  double virtual_s = 0;
  double final_accuracy = 0;
  double best_accuracy = 0;
  double mean_hit_ratio = 0;  // over rounds
  // The fleet's work (client-seconds of tasks, RoundRecord::client_s) and the updates trained
  // and sent for nothing (RoundRecord::wasted), in all and until the target was reached.
  double client_s = 0, client_s_to_target = 0;
  size_t wasted = 0, wasted_to_target = 0;
  double wall_s = 0;
};

// Runs rounds until the target accuracy is reached (when config.stop_at_target), job.rounds
// have run, or virtual time passes max_virtual_s. `on_round` sees every round's record.
// Errors are the simulator's, except that running out of available clients ends the run.
Result<RunSummary> run_simulation(Simulator& simulator, const SimConfig& config,
                                  const std::function<void(const RoundRecord&)>& on_round);

// "virtual_s,round,accuracy,loss,participants,dropped,hit_ratio,client_s,wasted,
// mean_staleness" (no newline).
std::string round_csv_header();
// One row, virtual_s being the round's close (no newline).
std::string round_csv_row(const RoundRecord& record);
// The summary as one JSON object; time_to_target_s and rounds_to_target are null when the
// target was not reached.
nlohmann::ordered_json summary_json(const RunSummary& summary);

}  // namespace fedcase::sim
