// Time to accuracy, as an ablation: every selection policy (random, Oort, FedCaSe) on every
// client pipeline (uniform sampling with no cache, uniform with LRU, SHADE importance sampling
// with the importance cache), FedCaSe's two rho controllers, and asynchronous training
// (FedBuff: mode "async" with the job's K as the buffer and its default concurrency) with each
// policy's slot selection on the none and importance pipelines, on several simulated fleets, in
// virtual time. Every run also reports the fleet's client-seconds and the updates it sent for
// nothing (refused or not kept) until the target.
//
//   tta_bench [--configs A,B,...] [--seeds N] [--repetition R] [--threads N] [--out DIR]
//             [--root DIR] [--full]
//
// Each fleet (configs/sim/tta.json and configs/sim/tta-skewed.json by default) is drawn once
// from its config; every variant runs the same job on it with seeds 1..N (default 5). Only
// the selection policy, the pipeline (sampling and cache policy together) and the rho
// controller differ: every
// cache reads at the same repetition factor (the config's, or --repetition), and durations
// come from the same device profiles. --full runs 5,000 clients with 50 per round. Runs are
// spread over --threads workers (default 2), one torch thread each. Writes DIR/tta_curves.csv
// (DIR: --out, default var/bench/tta; every run's per-round curve) and DIR/tta_<fleet>.svg, prints a table per fleet, and as its
// last line one JSON object with, per fleet and variant, the median and interquartile range
// of time to target, rounds to target and mean round duration, the sanity gate
// oort_beats_random and FedCaSe's speed-ups. Unreached targets count as infinitely late (the
// median then may be null). The default run takes about 18 minutes on 2 cores.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
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

struct Pipeline {
  const char* name;
  const char* sampling;
  const char* cache;
};

const Pipeline kPipelines[] = {
    {"none", "uniform", "none"},
    {"lru", "uniform", "lru"},
    {"importance", "importance", "importance"},
};

struct Variant {
  std::string name;  // "<selection>/<pipeline>"
  std::string color;
  nlohmann::json patch;  // merged into the base config
};

// Every selection on every pipeline (FedCaSe with its default, learned, rho controller), then
// FedCaSe's perturb-and-observe controller on the importance pipeline.
std::vector<Variant> make_variants(double repetition_factor) {
  struct Selection {
    const char* name;
    nlohmann::json selection;
    const char* colors[3];  // per pipeline
  };
  const Selection selections[] = {
      {"random", {{"policy", "random"}}, {"#555555", "#999999", "#cccccc"}},
      {"oort", {{"policy", "oort"}}, {"#08519c", "#3182bd", "#9ecae1"}},
      {"fedcase", {{"policy", "fedcase"}}, {"#a50f15", "#de2d26", "#fc9272"}},
  };
  auto variant = [&](std::string name, std::string color, const nlohmann::json& selection,
                     const Pipeline& p) {
    nlohmann::json cache = {{"policy", p.cache}, {"repetition_factor", repetition_factor}};
    nlohmann::json training = {{"sampling", p.sampling}, {"cache", cache}};
    return Variant{std::move(name),
                   std::move(color),
                   {{"job", {{"selection", selection}, {"training", training}}}}};
  };
  std::vector<Variant> out;
  for (const Selection& s : selections) {
    for (size_t k = 0; k < std::size(kPipelines); ++k) {
      out.push_back(variant(std::string(s.name) + "/" + kPipelines[k].name, s.colors[k],
                            s.selection, kPipelines[k]));
    }
  }
  out.push_back(variant("fedcase_perturb/importance", "#ff7f00",
                        {{"policy", "fedcase"}, {"rho_controller", "perturb"}}, kPipelines[2]));
  // FedBuff: the same selections filling slots of an asynchronous job.
  const char* async_colors[3][2] = {
      {"#238b45", "#74c476"}, {"#6a51a3", "#9e9ac8"}, {"#d94801", "#fd8d3c"}};
  for (size_t k = 0; k < std::size(selections); ++k) {
    for (size_t p : {size_t(0), size_t(2)}) {
      Variant v = variant(std::string("fedbuff_") + selections[k].name + "/" + kPipelines[p].name,
                          async_colors[k][p == 0 ? 0 : 1], selections[k].selection, kPipelines[p]);
      v.patch["job"]["mode"] = "async";
      out.push_back(std::move(v));
    }
  }
  return out;
}

struct Args {
  std::string root = FEDCASE_SOURCE_DIR;
  std::vector<std::string> configs = {"configs/sim/tta.json", "configs/sim/tta-skewed.json"};
  std::string out = "var/bench/tta";  // relative to the working directory
  uint64_t seeds = 5;
  std::optional<double> repetition_factor;
  unsigned threads = 2;
  bool full = false;
};

struct Fleet {
  std::string name;     // the config's file name without .json
  nlohmann::json base;  // the config every variant patches
  SimConfig config;     // `base`, parsed
  Inputs inputs;
  std::vector<SimClient> clients;
  double repetition_factor = 1;
};

struct Run {
  const Fleet* fleet = nullptr;
  const Variant* variant = nullptr;
  uint64_t seed = 0;
  SimConfig config;
  std::vector<RoundRecord> curve;
  RunSummary summary;
};

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= list.size();) {
    const size_t comma = std::min(list.find(',', start), list.size());
    if (comma > start) out.push_back(list.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

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
    if (flag == "--configs")
      a.configs = split(value);
    else if (flag == "--out")
      a.out = value;
    else if (flag == "--root")
      a.root = value;
    else if (flag == "--seeds")
      a.seeds = std::max<uint64_t>(1, std::stoull(value));
    else if (flag == "--repetition")
      a.repetition_factor = std::stod(value);
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

// The `q` quantile of ascending `t`, interpolated between neighbours; nullopt when it is
// infinite (too many seeds missed the target) or there are none.
std::optional<double> quantile(const std::vector<double>& t, double q) {
  if (t.empty()) return std::nullopt;
  const double at = q * double(t.size() - 1);
  const size_t lo = size_t(std::floor(at)), hi = std::min(t.size() - 1, lo + 1);
  const double fraction = at - double(lo);
  // A neighbour that is not needed must not turn an infinite (missed) one into a NaN.
  const double v = fraction == 0 ? t[lo] : t[lo] + fraction * (t[hi] - t[lo]);
  if (!std::isfinite(v)) return std::nullopt;
  return v;
}

constexpr double kNever = std::numeric_limits<double>::infinity();

// A variant's figures on one fleet, over its seeds: time to target, rounds to target (both
// infinite where the target was missed) and mean round duration (virtual seconds per round
// of the run).
struct Figures {
  std::vector<double> tta_s, rounds, round_s;
  // Until the target (infinite where it was missed): the fleet's client-seconds and the updates
  // trained and sent for nothing.
  std::vector<double> client_s, wasted;
  double hit_ratio = 0;  // mean over seeds
};

Figures figures_of(const std::vector<Run>& runs, const Fleet& fleet, const Variant& v) {
  Figures f;
  for (const Run& r : runs) {
    if (r.fleet != &fleet || r.variant != &v) continue;
    f.tta_s.push_back(r.summary.time_to_target_s.value_or(kNever));
    f.rounds.push_back(r.summary.rounds_to_target ? double(*r.summary.rounds_to_target) : kNever);
    f.round_s.push_back(r.summary.rounds ? r.summary.virtual_s / double(r.summary.rounds) : 0);
    const bool reached = r.summary.time_to_target_s.has_value();
    f.client_s.push_back(reached ? r.summary.client_s_to_target : kNever);
    f.wasted.push_back(reached ? double(r.summary.wasted_to_target) : kNever);
    f.hit_ratio += r.summary.mean_hit_ratio;
  }
  for (auto* list : {&f.tta_s, &f.rounds, &f.round_s, &f.client_s, &f.wasted}) {
    std::sort(list->begin(), list->end());
  }
  if (!f.tta_s.empty()) f.hit_ratio /= double(f.tta_s.size());
  return f;
}

Json json_of(std::optional<double> x) { return x ? Json(*x) : Json(nullptr); }

// {"median": m, "iqr": [q25, q75]} of ascending `t`.
Json summary_of(const std::vector<double>& t) {
  return {{"median", json_of(quantile(t, 0.5))},
          {"iqr", Json::array({json_of(quantile(t, 0.25)), json_of(quantile(t, 0.75))})}};
}

std::string svg_plot(const std::vector<Run>& runs, const Fleet& fleet,
                     const std::vector<Variant>& variants) {
  const double target = fleet.config.job.target_accuracy;
  double x_max = 1;
  for (const Run& r : runs) {
    if (r.fleet == &fleet && !r.curve.empty()) x_max = std::max(x_max, r.curve.back().close_s);
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
    if (r.fleet != &fleet) continue;
    s += "<polyline fill=\"none\" stroke-width=\"1.5\" stroke=\"" + r.variant->color +
         "\" points=\"";
    for (const RoundRecord& rec : r.curve) {
      std::snprintf(buf, sizeof(buf), "%.1f,%.1f ", px(rec.close_s), py(rec.accuracy));
      s += buf;
    }
    s += "\"/>\n";
  }
  double ly = top + 10;
  for (const Variant& v : variants) {
    std::snprintf(buf, sizeof(buf),
                  "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                  "stroke-width=\"3\"/><text x=\"%.1f\" y=\"%.1f\">%s</text>\n",
                  w - right + 15, ly, w - right + 40, ly, v.color.c_str(), w - right + 46, ly + 4,
                  v.name.c_str());
    s += buf;
    ly += 20;
  }
  return s + "</svg>\n";
}

void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text)) throw std::runtime_error("cannot write " + path.string());
}

Fleet load_fleet(const Args& args, const std::string& config_path) {
  Fleet f;
  f.name = std::filesystem::path(config_path).stem().string();
  f.base = nlohmann::json::parse(or_die(read_text_file(args.root + "/" + config_path)));
  if (args.full)
    f.base.merge_patch({{"fleet", {{"clients", 5000}}}, {"job", {{"clients_per_round", 50}}}});
  f.config = or_die(parse_sim_config(f.base));
  resolve_paths(f.config, args.root);
  f.inputs = or_die(load_inputs(f.config));
  f.clients = or_die(build_fleet(f.inputs.devices, f.config.fleet, f.inputs.train.labels));
  f.repetition_factor =
      args.repetition_factor.value_or(f.config.job.training.cache.repetition_factor);
  return f;
}

// Runs every run, spread over `threads` workers; the first failure ends the bench.
void run_all(std::vector<Run>& runs, unsigned threads) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::string failure;
  size_t done = 0;
  auto worker = [&] {
    fedcase::ml::set_torch_threads(1);
    for (size_t i; (i = next++) < runs.size();) {
      Run& r = runs[i];
      const Fleet& f = *r.fleet;
      auto sim = Simulator::create(r.config, f.inputs.train, f.inputs.test, f.clients);
      auto summary = sim.ok()
                         ? run_simulation(**sim, r.config,
                                          [&](const RoundRecord& rec) { r.curve.push_back(rec); })
                         : fedcase::Result<RunSummary>(sim.status());
      std::lock_guard<std::mutex> lock(mu);
      if (!summary.ok()) {
        failure = summary.status().to_string();
        next = runs.size();
        return;
      }
      r.summary = *summary;
      std::fprintf(stderr, "[%zu/%zu] %s %-27s seed %llu: %s after %llu rounds (%.0f s wall)\n",
                   ++done, runs.size(), f.name.c_str(), r.variant->name.c_str(),
                   static_cast<unsigned long long>(r.seed),
                   r.summary.time_to_target_s
                       ? (std::to_string(int(*r.summary.time_to_target_s)) + " virtual s").c_str()
                       : "target not reached",
                   static_cast<unsigned long long>(r.summary.rounds), r.summary.wall_s);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (!failure.empty()) throw std::runtime_error(failure);
}

// One fleet's figures: per variant, and the comparisons the claims rest on.
Json fleet_report(const std::vector<Run>& runs, const Fleet& fleet,
                  const std::vector<Variant>& variants) {
  Json per_variant = Json::object();
  std::printf("\nfleet %s (%zu clients, K = %u, target %.2f, repetition factor %g)\n",
              fleet.name.c_str(), fleet.clients.size(),
              unsigned(fleet.config.job.clients_per_round), fleet.config.job.target_accuracy,
              fleet.repetition_factor);
  std::printf("%-27s %20s %16s %18s %9s %24s %14s\n", "variant", "TTA s (IQR)", "rounds (IQR)",
              "round s (IQR)", "hit ratio", "client-s to target (IQR)", "wasted (IQR)");
  auto cell = [](const std::vector<double>& t, int decimals) {
    char buf[64];
    auto q = [&](double p) { return quantile(t, p).value_or(kNever); };
    std::snprintf(buf, sizeof(buf), "%.*f (%.*f-%.*f)", decimals, q(0.5), decimals, q(0.25),
                  decimals, q(0.75));
    return std::string(buf);
  };
  std::map<std::string, Figures> figures;
  for (const Variant& v : variants) {
    const Figures& f = figures[v.name] = figures_of(runs, fleet, v);
    per_variant[v.name] = {{"tta_s", summary_of(f.tta_s)},
                           {"rounds_to_target", summary_of(f.rounds)},
                           {"round_s", summary_of(f.round_s)},
                           {"mean_hit_ratio", f.hit_ratio},
                           {"client_s_to_target", summary_of(f.client_s)},
                           {"wasted_updates_to_target", summary_of(f.wasted)}};
    std::printf("%-27s %20s %16s %18s %9.3f %24s %14s\n", v.name.c_str(), cell(f.tta_s, 0).c_str(),
                cell(f.rounds, 0).c_str(), cell(f.round_s, 2).c_str(), f.hit_ratio,
                cell(f.client_s, 0).c_str(), cell(f.wasted, 0).c_str());
  }
  auto median_tta = [&](const std::string& name) { return quantile(figures.at(name).tta_s, 0.5); };
  // How much sooner `fast` reaches the target than `slow` (median over median); null when
  // either median is infinite.
  auto speedup = [&](const std::string& slow, const std::string& fast) -> Json {
    const auto s = median_tta(slow), f = median_tta(fast);
    return s && f ? Json(*s / *f) : Json(nullptr);
  };
  const auto oort = median_tta("oort/none"), random = median_tta("random/none");
  Json out;
  out["clients"] = fleet.clients.size();
  out["clients_per_round"] = fleet.config.job.clients_per_round;
  out["target_accuracy"] = fleet.config.job.target_accuracy;
  out["repetition_factor"] = fleet.repetition_factor;
  out["frequency_order"] = fedcase::client::frequency_order_name(fleet.config.frequency_order);
  // The sanity gate of a like-for-like comparison: Oort (uniform sampling, no cache) reaches
  // the target sooner than random selection, as its paper and its authors' code do.
  out["oort_beats_random"] = oort.has_value() && (!random || *oort < *random);
  out["speedup_fedcase_vs_oort_lru"] = speedup("oort/lru", "fedcase/importance");
  Json same = Json::object();  // selection alone, pipeline by pipeline
  for (const Pipeline& p : kPipelines)
    same[p.name] = speedup(std::string("oort/") + p.name, std::string("fedcase/") + p.name);
  out["speedup_fedcase_vs_oort_same_pipeline"] = same;
  out["speedup_fedcase_vs_random"] = speedup("random/none", "fedcase/importance");
  out["speedup_oort_vs_random"] = speedup("random/none", "oort/none");
  out["speedup_learned_vs_perturb_rho"] =
      speedup("fedcase_perturb/importance", "fedcase/importance");
  // Asynchronous training: FedBuff against synchronous rounds, selection by selection, and
  // FedCaSe's slot selection against FedBuff's random one.
  Json async_vs_sync = Json::object();
  for (const char* policy : {"random", "oort", "fedcase"}) {
    for (const char* pipeline : {"none", "importance"}) {
      const std::string name = std::string(policy) + "/" + pipeline;
      async_vs_sync[name] = speedup(name, "fedbuff_" + name);
    }
  }
  out["speedup_fedbuff_vs_sync"] = async_vs_sync;
  out["speedup_fedbuff_random_vs_random"] = speedup("random/none", "fedbuff_random/none");
  out["speedup_fedbuff_fedcase_vs_fedbuff_random"] =
      speedup("fedbuff_random/none", "fedbuff_fedcase/none");
  out["speedup_fedbuff_fedcase_importance_vs_fedbuff_random"] =
      speedup("fedbuff_random/none", "fedbuff_fedcase/importance");
  out["variants"] = per_variant;
  return out;
}

int run(const Args& args) {
  const auto start = std::chrono::steady_clock::now();
  if (args.configs.empty()) throw std::runtime_error("--configs names no config");
  std::vector<Fleet> fleets;
  for (const std::string& config : args.configs) {
    fleets.push_back(load_fleet(args, config));
    for (size_t k = 0; k + 1 < fleets.size(); ++k) {
      if (fleets[k].name == fleets.back().name)
        throw std::runtime_error("two configs are named " + fleets[k].name);
    }
  }

  std::vector<std::vector<Variant>> variants;  // per fleet (its repetition factor)
  for (const Fleet& f : fleets) variants.push_back(make_variants(f.repetition_factor));
  std::vector<Run> runs;
  for (size_t k = 0; k < fleets.size(); ++k) {
    for (const Variant& v : variants[k]) {
      for (uint64_t seed = 1; seed <= args.seeds; ++seed) {
        nlohmann::json j = fleets[k].base;
        j.merge_patch(v.patch);
        j["job"]["seed"] = seed;
        Run r;
        r.fleet = &fleets[k];
        r.variant = &v;
        r.seed = seed;
        r.config = or_die(parse_sim_config(j));
        runs.push_back(std::move(r));
      }
    }
  }
  run_all(runs, args.threads);

  std::filesystem::create_directories(args.out);
  const std::filesystem::path out(args.out);
  std::string csv = "fleet,variant,seed," + round_csv_header() + "\n";
  for (const Run& r : runs) {
    for (const RoundRecord& rec : r.curve) {
      csv += r.fleet->name + "," + r.variant->name + "," + std::to_string(r.seed) + "," +
             round_csv_row(rec) + "\n";
    }
  }
  write_file(out / "tta_curves.csv", csv);
  Json j;
  j["bench"] = "tta";
  j["model"] = fleets.front().config.job.model;
  j["seeds"] = args.seeds;
  Json per_fleet = Json::object();
  for (size_t k = 0; k < fleets.size(); ++k) {
    per_fleet[fleets[k].name] = fleet_report(runs, fleets[k], variants[k]);
    write_file(out / ("tta_" + fleets[k].name + ".svg"), svg_plot(runs, fleets[k], variants[k]));
  }
  j["fleets"] = per_fleet;
  j["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  j["hardware_threads"] = std::thread::hardware_concurrency();
  j["curves"] = (out / "tta_curves.csv").string();
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
