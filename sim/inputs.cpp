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
  in.train = std::move(train).value();
  in.test = std::move(test).value();
  if (!config.fleet_csv.empty()) {
    auto text = read_text_file(config.fleet_csv);
    if (!text.ok()) return text.status();
    auto rows = parse_fleet_csv(*text);
    if (!rows.ok()) return rows.status();
    in.devices = std::move(rows).value();
    return in;
  }
  auto text = read_text_file(config.bandwidth_trace);
  if (!text.ok()) return text.status();
  auto trace = parse_bandwidth_trace(*text);
  if (!trace.ok()) return trace.status();
  in.devices = draw_devices(config.fleet, *trace);
  return in;
}

}  // namespace fedcase::sim
