#pragma once
// A simulation's configuration (configs/sim/*.json): the fleet, the job run on it (the same
// selection, training, aggregation and server_optimizer sections a coordinator job has) and
// the simulation's own limits. Keys and defaults: docs/simulator.md.

#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "aggregation/aggregator.h"
#include "common/ids.h"
#include "common/status.h"
#include "scheduling/round_plan.h"
#include "sim/fleet.h"

namespace fedcase::sim {

struct SimConfig {
  uint64_t seed = 1;  // the run: model init, policy, samplers, duration noise
  // Inputs. Relative paths are resolved by the caller (see resolve_paths).
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string bandwidth_trace = "../shared/traces/mlab-ndt-bandwidth.csv";
  std::string fleet_csv;  // when set, device rows come from this file instead of draw_devices
  FleetParams fleet;

  // The job.
  std::string model = "mlp";
  size_t clients_per_round = 20;  // K
  size_t min_clients = 1;         // available clients needed to open a round
  size_t min_updates = 1;         // updates needed to commit a round at its deadline
  nlohmann::json selection = {{"policy", "random"}};
  scheduling::TrainingParams training;
  double overcommit = scheduling::kDefaultOvercommit;
  aggregation::AggregatorConfig aggregation;
  nlohmann::json server_optimizer = nlohmann::json::object();
  // The clients' sampler: order draws by frequency every k-th round (0 = never).
  uint32_t frequency_order_period = 1;

  // The simulation.
  double target_accuracy = 0.75;
  bool stop_at_target = true;
  RoundIndex max_rounds = 500;
  double max_virtual_s = std::numeric_limits<double>::infinity();
  size_t eval_samples = 2000;   // the first n test images
  double heartbeat_s = 30;      // clients' heartbeat period while online
  double idle_wait_s = 60;      // wait when too few clients are available to open a round
  double duration_sigma = 0.1;  // per-task log-normal jitter of the modelled duration
};

// Parses a simulation config. kInvalidArgument naming the key for an unknown key or a bad
// value (the job sections are checked by their own libraries' parsers).
Result<SimConfig> parse_sim_config(const nlohmann::json& config);

// Makes the relative input paths of `config` relative to `root` (the repository root).
void resolve_paths(SimConfig& config, const std::string& root);

}  // namespace fedcase::sim
