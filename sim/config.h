#pragma once
// A simulation's configuration (configs/sim/*.json): the fleet, the job run on it (a
// coordinator job config, under "job") and the simulation's own limits. Keys and defaults:
// docs/simulator.md.

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "client_sdk/importance_sampler.h"
#include "common/ids.h"
#include "common/status.h"
#include "rounds/job_config.h"
#include "scheduling/pace.h"
#include "sim/fleet.h"

namespace fedcase::sim {

// Pace steering of the virtual fleet (scheduling/pace.h, docs/scaling.md "Pace steering"): an
// online client checks in, stays checked in (available) for awake_s, and then sleeps until a
// uniform point of the window the coordinator's rule gives it, instead of heartbeating every
// heartbeat_s; a client offline at its check-in checks in when it comes back online.
struct SimPace {
  scheduling::PaceConfig rule;
  double awake_s = 10;  // a task poll's wait (the SDK's poll_wait_s)
};

struct SimConfig {
  // Inputs. Relative paths are resolved by the caller (see resolve_paths).
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string bandwidth_trace = "../shared/traces/mlab-ndt-bandwidth.csv";
  std::string fleet_csv;  // when set, device rows come from this file instead of draw_devices
  FleetParams fleet;

  // The job run on the fleet, parsed by the coordinator's own parser (rounds/job_config.h).
  // Its seed also seeds the clients' samplers and the duration noise; its `rounds` caps the
  // run and its `target_accuracy` is the accuracy whose time the run reports.
  rounds::JobConfig job;
  // The clients' sampler: when to order draws by frequency (client::SamplerOptions).
  client::FrequencyOrder frequency_order = client::FrequencyOrder::kPeriodic;
  uint32_t frequency_order_period = 1;  // periodic: every k-th round (0 = never)

  // The simulation.
  bool stop_at_target = true;  // end the run once the sustained target is reached
  // The sustained target: this many consecutive evaluations at or above the target (>= 1;
  // 1 makes it the first crossing). See sim/run.h.
  uint32_t sustained_evaluations = 3;
  double max_virtual_s = std::numeric_limits<double>::infinity();
  size_t eval_samples = 2000;   // the first n test images
  double heartbeat_s = 30;      // clients' heartbeat period while online
  double idle_wait_s = 60;      // wait when too few clients are available to open a round
  double duration_sigma = 0.1;  // per-task log-normal jitter of the modelled duration
  std::optional<SimPace> pace;  // set: the fleet is steered ("pace" in the config)
};

// Parses a simulation config. kInvalidArgument naming the key for an unknown key or a bad
// value; the job is checked by parse_job_config, as the coordinator checks it.
Result<SimConfig> parse_sim_config(const nlohmann::json& config);

// Makes the relative input paths of `config` relative to `root` (the repository root).
void resolve_paths(SimConfig& config, const std::string& root);

}  // namespace fedcase::sim
