// fedcase-sim: runs one simulated federated job on a simulated fleet in virtual time.
//
//   fedcase-sim [--config FILE] [--patch JSON] [--seed N] [--clients N] [--max-rounds N]
//               [--root DIR] [--csv FILE] [--write-fleet FILE]
//
// --config   a simulation config (default configs/sim/default.json under the root)
// --patch    a JSON merge patch applied to the config, e.g. '{"job":{"selection":{"policy":"oort"}}}'
// --root     the repository root that relative paths are resolved against
// --csv      write the per-round CSV there instead of to stdout
// --write-fleet  also write the fleet's device rows as a fleet CSV
// Per-round CSV rows go to stdout (or --csv), a progress line to stderr, and the last line on
// stdout is the run's JSON summary. Exit status 1 on a bad config or a failed run.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "ml/model.h"
#include "sim/config.h"
#include "sim/inputs.h"
#include "sim/run.h"

namespace {

using namespace fedcase::sim;

struct Args {
  std::string root = FEDCASE_SOURCE_DIR;
  std::string config = "configs/sim/default.json";
  nlohmann::json patch = nlohmann::json::object();
  std::string csv;
  std::string write_fleet;
};

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "fedcase-sim: " << why
            << "\nusage: fedcase-sim [--config FILE] [--patch JSON] [--seed N] [--clients N]"
               " [--max-rounds N] [--root DIR] [--csv FILE] [--write-fleet FILE]\n";
  std::exit(1);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--config") {
      a.config = value;
    } else if (flag == "--root") {
      a.root = value;
    } else if (flag == "--csv") {
      a.csv = value;
    } else if (flag == "--write-fleet") {
      a.write_fleet = value;
    } else if (flag == "--patch") {
      a.patch.merge_patch(nlohmann::json::parse(value));
    } else if (flag == "--seed") {
      a.patch["job"]["seed"] = std::stoull(value);
    } else if (flag == "--clients") {
      a.patch["fleet"]["clients"] = std::stoull(value);
    } else if (flag == "--max-rounds") {
      a.patch["job"]["rounds"] = std::stoull(value);
    } else {
      usage("unknown flag " + flag);
    }
  }
  return a;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text)) throw std::runtime_error("cannot write " + path);
}

template <class T>
T or_die(fedcase::Result<T> r) {
  if (!r.ok()) throw std::runtime_error(r.status().to_string());
  return std::move(r).value();
}

int run(const Args& args) {
  std::string config_path = args.config;
  if (!config_path.empty() && config_path[0] != '/') config_path = args.root + "/" + config_path;
  nlohmann::json raw = nlohmann::json::parse(or_die(read_text_file(config_path)));
  raw.merge_patch(args.patch);
  SimConfig config = or_die(parse_sim_config(raw));
  resolve_paths(config, args.root);
  fedcase::ml::set_torch_threads(1);

  Inputs inputs = or_die(load_inputs(config));
  if (!args.write_fleet.empty()) write_file(args.write_fleet, fleet_csv(inputs.devices));
  auto fleet = or_die(build_fleet(inputs.devices, config.fleet, inputs.train.labels));
  auto simulator = or_die(Simulator::create(config, inputs.train, inputs.test, std::move(fleet)));

  std::ofstream csv_file;
  if (!args.csv.empty()) {
    csv_file.open(args.csv);
    if (!csv_file) throw std::runtime_error("cannot write " + args.csv);
  }
  std::ostream& csv = args.csv.empty() ? std::cout : csv_file;
  csv << round_csv_header() << "\n";
  RunSummary summary = or_die(run_simulation(*simulator, config, [&](const RoundRecord& r) {
    csv << round_csv_row(r) << "\n";
    std::fprintf(stderr, "\r%s round %llu  t=%.0fs  acc=%.4f  kept %zu/%zu  dropped %zu  hit %.2f ",
                 simulator->policy().c_str(), static_cast<unsigned long long>(r.round), r.close_s,
                 r.accuracy, r.participants, r.invited, r.dropped, r.hit_ratio);
  }));
  std::fprintf(stderr, "\n");
  csv.flush();
  std::cout << summary_json(summary).dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "fedcase-sim: " << e.what() << "\n";
    return 1;
  }
}
