// Time to accuracy: random, Oort, Oort with an LRU cache, and FedCaSe (importance sampling and
// importance cache) on the same simulated fleet, in virtual time.
//
//   tta_bench [--config FILE] [--seeds N] [--threads N] [--out DIR] [--root DIR] [--full]
//
// Every policy runs the same job on the same fleet (configs/sim/tta.json: 500 clients, 20 per
// round, an MLP on Fashion-MNIST, target 80% test accuracy) with seeds 1..N (default 3); only
// the selection policy, the sampling and the cache differ. --full runs 5,000 clients with 50
// per round. Runs are spread over --threads workers (default 2), one torch thread each.
// Writes DIR/tta_curves.csv (every run's per-round curve) and DIR/tta.svg (accuracy against
// virtual time), prints a table, and as its last line one JSON object with each policy's median
// time to the target and FedCaSe's speed-ups. Unreached targets count as infinitely late
// (the median then may be null). The default run takes about 5 minutes on 2 cores.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "ml/model.h"
#include "sim/config.h"
#include "sim/inputs.h"
#include "sim/run.h"

namespace {

using namespace fedcase::sim;
using Json = nlohmann::ordered_json;

struct Variant {
  const char* name;
  const char* color;
  const char* patch;  // merged into the base config
};

const Variant kVariants[] = {
    {"random", "#888888",
     R"({"job":{"selection":{"policy":"random"},"training":{"sampling":"uniform","cache":{"policy":"none"}}}})"},
    {"oort", "#1f77b4",
     R"({"job":{"selection":{"policy":"oort"},"training":{"sampling":"uniform","cache":{"policy":"none"}}}})"},
    {"oort_lru", "#2ca02c",
     R"({"job":{"selection":{"policy":"oort"},"training":{"sampling":"uniform","cache":{"policy":"lru","repetition_factor":1}}}})"},
    {"fedcase", "#d62728",
     R"({"job":{"selection":{"policy":"fedcase"},"training":{"sampling":"importance","cache":{"policy":"importance"}}}})"},
};

struct Args {
  std::string root = FEDCASE_SOURCE_DIR;
  std::string config = "configs/sim/tta.json";
  std::string out = "tta_out";
  uint64_t seeds = 3;
  unsigned threads = 2;
  bool full = false;
};

struct Run {
  const Variant* variant = nullptr;
  uint64_t seed = 0;
  SimConfig config;
  std::vector<RoundRecord> curve;
  RunSummary summary;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--full") {
      a.full = true;
      continue;
    }
    if (i + 1 >= argc) throw std::runtime_error("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--config")
      a.config = value;
    else if (flag == "--out")
      a.out = value;
    else if (flag == "--root")
      a.root = value;
    else if (flag == "--seeds")
      a.seeds = std::stoull(value);
    else if (flag == "--threads")
      a.threads = std::max(1u, unsigned(std::stoul(value)));
    else
      throw std::runtime_error("unknown flag " + flag);
  }
  return a;
}

template <class T>
T or_die(fedcase::Result<T> r) {
  if (!r.ok()) throw std::runtime_error(r.status().to_string());
  return std::move(r).value();
}

// The variant's times to target over its seeds, ascending (infinite where it missed).
std::vector<double> times_to_target(const std::vector<Run>& runs, const Variant& v) {
  std::vector<double> t;
  for (const Run& r : runs) {
    if (r.variant != &v) continue;
    t.push_back(r.summary.time_to_target_s.value_or(std::numeric_limits<double>::infinity()));
  }
  std::sort(t.begin(), t.end());
  return t;
}

// The `q` quantile of ascending `t`, interpolated between neighbours; nullopt when it is
// infinite (too many seeds missed the target) or there are none.
std::optional<double> quantile(const std::vector<double>& t, double q) {
  if (t.empty()) return std::nullopt;
  const double at = q * double(t.size() - 1);
  const size_t lo = size_t(std::floor(at)), hi = std::min(t.size() - 1, lo + 1);
  const double v = t[lo] + (at - double(lo)) * (t[hi] - t[lo]);
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

std::string svg_plot(const std::vector<Run>& runs, double target) {
  double x_max = 1;
  for (const Run& r : runs) {
    if (!r.curve.empty()) x_max = std::max(x_max, r.curve.back().close_s);
  }
  const double w = 800, h = 500, left = 70, right = 160, top = 30, bottom = 60;
  const double y_lo = 0.3, y_hi = 0.9;
  auto px = [&](double x) { return left + (w - left - right) * x / x_max; };
  auto py = [&](double y) {
    y = std::clamp(y, y_lo, y_hi);
    return top + (h - top - bottom) * (1 - (y - y_lo) / (y_hi - y_lo));
  };
  char buf[256];
  std::string s;
  std::snprintf(buf, sizeof(buf),
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"100%%\" "
                "height=\"100%%\" fill=\"white\"/>\n",
                w, h);
  s += buf;
  for (int k = 0; k <= 6; ++k) {  // accuracy grid
    const double y = y_lo + (y_hi - y_lo) * k / 6;
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>"
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.2f</text>\n",
                  left, py(y), w - right, py(y), left - 6, py(y) + 4, y);
    s += buf;
  }
  for (int k = 0; k <= 5; ++k) {  // time axis
    const double x = x_max * k / 5;
    std::snprintf(buf, sizeof(buf),
                  "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%.0f</text>\n", px(x),
                  h - bottom + 18, x);
    s += buf;
  }
  std::snprintf(buf, sizeof(buf),
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">virtual time (s)</text>\n"
                "<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" "
                "text-anchor=\"middle\">test accuracy</text>\n",
                (left + w - right) / 2, h - 20, (top + h - bottom) / 2, (top + h - bottom) / 2);
  s += buf;
  std::snprintf(buf, sizeof(buf),
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\" "
                "stroke-dasharray=\"5,4\"/>\n",
                left, py(target), w - right, py(target));
  s += buf;
  for (const Run& r : runs) {
    s += std::string("<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"") + r.variant->color +
         "\" points=\"";
    for (const RoundRecord& rec : r.curve) {
      std::snprintf(buf, sizeof(buf), "%.1f,%.1f ", px(rec.close_s), py(rec.accuracy));
      s += buf;
    }
    s += "\"/>\n";
  }
  double ly = top + 10;
  for (const Variant& v : kVariants) {
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                  "stroke-width=\"3\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                  w - right + 15, ly, w - right + 40, ly, v.color, w - right + 46, ly + 4, v.name);
    s += buf;
    ly += 20;
  }
  return s + "</svg>\n";
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text)) throw std::runtime_error("cannot write " + path.string());
}

int run(const Args& args) {
  const auto start = std::chrono::steady_clock::now();
  nlohmann::json base =
      nlohmann::json::parse(or_die(read_text_file(args.root + "/" + args.config)));
  if (args.full)
    base.merge_patch({{"fleet", {{"clients", 5000}}}, {"job", {{"clients_per_round", 50}}}});
  // The fleet is the same for every run: drawn once from the base config.
  SimConfig fleet_config = or_die(parse_sim_config(base));
  resolve_paths(fleet_config, args.root);
  const Inputs inputs = or_die(load_inputs(fleet_config));
  const std::vector<SimClient> fleet =
      or_die(build_fleet(inputs.devices, fleet_config.fleet, inputs.train.labels));

  std::vector<Run> runs;
  for (const Variant& v : kVariants) {
    for (uint64_t seed = 1; seed <= args.seeds; ++seed) {
      nlohmann::json j = base;
      j.merge_patch(nlohmann::json::parse(v.patch));
      j["job"]["seed"] = seed;
      Run r;
      r.variant = &v;
      r.seed = seed;
      r.config = or_die(parse_sim_config(j));
      runs.push_back(std::move(r));
    }
  }
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::string failure;
  auto worker = [&] {
    fedcase::ml::set_torch_threads(1);
    for (size_t i; (i = next++) < runs.size();) {
      Run& r = runs[i];
      auto sim = Simulator::create(r.config, inputs.train, inputs.test, fleet);
      auto summary = sim.ok()
                         ? run_simulation(**sim, r.config,
                                          [&](const RoundRecord& rec) { r.curve.push_back(rec); })
                         : fedcase::Result<RunSummary>(sim.status());
      std::lock_guard<std::mutex> lock(mu);
      if (!summary.ok()) {
        failure = summary.status().to_string();
        return;
      }
      r.summary = *summary;
      std::fprintf(stderr, "%-9s seed %llu: %s after %llu rounds (%.0f s wall)\n", r.variant->name,
                   static_cast<unsigned long long>(r.seed),
                   r.summary.time_to_target_s
                       ? (std::to_string(int(*r.summary.time_to_target_s)) + " virtual s").c_str()
                       : "target not reached",
                   static_cast<unsigned long long>(r.summary.rounds), r.summary.wall_s);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < args.threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (!failure.empty()) throw std::runtime_error(failure);

  std::filesystem::create_directories(args.out);
  std::string csv = "policy,seed," + round_csv_header() + "\n";
  for (const Run& r : runs) {
    for (const RoundRecord& rec : r.curve) {
      csv += std::string(r.variant->name) + "," + std::to_string(r.seed) + "," +
             round_csv_row(rec) + "\n";
    }
  }
  const std::filesystem::path out(args.out);
  write_file(out / "tta_curves.csv", csv);
  write_file(out / "tta.svg", svg_plot(runs, fleet_config.job.target_accuracy));

  Json medians = Json::object(), iqr = Json::object(), hit = Json::object();
  std::printf("%-9s %18s %14s %10s\n", "policy", "median TTA (s)", "median rounds", "hit ratio");
  auto json_of = [](std::optional<double> x) { return x ? Json(*x) : Json(nullptr); };
  for (const Variant& v : kVariants) {
    const std::vector<double> t = times_to_target(runs, v);
    const std::optional<double> m = quantile(t, 0.5);
    medians[v.name] = json_of(m);
    iqr[v.name] = Json::array({json_of(quantile(t, 0.25)), json_of(quantile(t, 0.75))});
    std::vector<double> rounds;
    double hits = 0;
    for (const Run& r : runs) {
      if (r.variant != &v) continue;
      rounds.push_back(double(r.summary.rounds));
      hits += r.summary.mean_hit_ratio;
    }
    std::sort(rounds.begin(), rounds.end());
    hit[v.name] = hits / double(args.seeds);
    std::printf("%-9s %18s %14.0f %10.3f\n", v.name, m ? std::to_string(int(*m)).c_str() : "-",
                rounds[rounds.size() / 2], hits / double(args.seeds));
  }
  auto ratio = [&](const char* base_name) -> Json {
    if (medians[base_name].is_null() || medians["fedcase"].is_null()) return nullptr;
    return medians[base_name].get<double>() / medians["fedcase"].get<double>();
  };
  Json j;
  j["bench"] = "tta";
  j["clients"] = fleet.size();
  j["clients_per_round"] = fleet_config.job.clients_per_round;
  j["model"] = fleet_config.job.model;
  j["target_accuracy"] = fleet_config.job.target_accuracy;
  j["seeds"] = args.seeds;
  j["median_tta_s"] = medians;
  j["iqr_tta_s"] = iqr;  // 25th and 75th percentiles over the seeds
  // The sanity gate of a like-for-like comparison: Oort (uniform sampling, no cache) reaches
  // the target sooner than random selection, as its paper and its authors' code do.
  j["oort_beats_random"] =
      medians["oort"].is_null()
          ? Json(false)
          : Json(medians["random"].is_null() ||
                 medians["oort"].get<double>() < medians["random"].get<double>());
  j["speedup_vs_oort_lru"] = ratio("oort_lru");
  j["speedup_vs_oort"] = ratio("oort");
  j["speedup_vs_random"] = ratio("random");
  j["mean_hit_ratio"] = hit;
  j["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  j["hardware_threads"] = std::thread::hardware_concurrency();
  j["curves"] = (out / "tta_curves.csv").string();
  j["plot"] = (out / "tta.svg").string();
  std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse_args(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "tta_bench: " << e.what() << "\n";
    return 1;
  }
}
