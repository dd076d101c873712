#include "sim/inputs.h"

#include <fstream>
#include <sstream>

namespace fedcase::sim {

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

Result<Inputs> load_inputs(const SimConfig& config) {
  Inputs in;
  auto train = ml::load_fashion_mnist(config.data_dir, ml::Split::kTrain);
  if (!train.ok()) return train.status();
  auto test = ml::load_fashion_mnist(config.data_dir, ml::Split::kTest);
  if (!test.ok()) return test.status();
  auto devices = load_devices(config);
  if (!devices.ok()) return devices.status();
  in.train = std::move(train).value();
  in.test = std::move(test).value();
  in.devices = std::move(devices).value();
  return in;
}

Result<std::vector<DeviceRow>> load_devices(const SimConfig& config) {
  const bool from_csv = !config.fleet_csv.empty();
  auto text = read_text_file(from_csv ? config.fleet_csv : config.bandwidth_trace);
  if (!text.ok()) return text.status();
  if (from_csv) return parse_fleet_csv(*text);
  auto trace = parse_bandwidth_trace(*text);
  if (!trace.ok()) return trace.status();
  return draw_devices(config.fleet, *trace);
}

}  // namespace fedcase::sim
