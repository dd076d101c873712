#pragma once
// Reads what a simulation needs from disk: Fashion-MNIST, the bandwidth trace or a fleet CSV.

#include <string>
#include <vector>

#include "common/status.h"
#include "ml/dataset.h"
#include "sim/config.h"
#include "sim/fleet.h"

namespace fedcase::sim {

struct Inputs {
  ml::Dataset train;
  ml::Dataset test;
  std::vector<DeviceRow> devices;  // from config.fleet_csv, else drawn from the trace
};

// The whole file; kNotFound if it cannot be opened.
Result<std::string> read_text_file(const std::string& path);

// Loads the datasets and the device rows of `config` (paths already resolved).
Result<Inputs> load_inputs(const SimConfig& config);
// The device rows alone: config.fleet_csv's, or drawn from the bandwidth trace with the fleet
// params (config.fleet.seed among them).
Result<std::vector<DeviceRow>> load_devices(const SimConfig& config);

}  // namespace fedcase::sim
