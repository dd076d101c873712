// Time to accuracy, as an ablation: Oort and FedCaSe selection on every client pipeline
// (uniform sampling with no cache, uniform with LRU, SHADE importance sampling with the
// importance cache) and random selection, on several draws of several fleet models, in
// virtual time. --extended adds random selection on the other pipelines, FedCaSe's other rho
// controller and Oort at FedScale's defaults; --async adds asynchronous training (FedBuff:
// mode "async" with the job's K as the buffer and its default concurrency) with each policy's
// slot selection on the none and importance pipelines; --compression adds FedCaSe on the
// importance pipeline with 8-bit and with top-1% updates (the job's `compression`); --steered
// runs every fleet pace-steered (only the checked-in pool is available: docs/simulator.md). Every run
// also reports the fleet's client-seconds, the updates it sent for nothing (refused or not
// kept) and the bytes its finished tasks moved (models down, updates up) until the target.
//
//   tta_bench [--configs A,B,...] [--fleet-draws D] [--seeds N] [--settings FILE]
//             [--repetition R|adaptive] [--eval-samples N] [--variants V,...] [--extended]
//             [--async] [--compression] [--steered] [--bootstrap B] [--threads N] [--out DIR]
//             [--root DIR] [--full]
//   tta_bench --tune [--configs A,B,...] [--seeds N] [--tune-pipeline P] [--threads N]
//             [--out DIR] [--root DIR]
//
// Fleets. Each config (configs/sim/tta.json and configs/sim/tta-skewed.json by default) is a
// fleet model; its own fleet seed s draws its tuning fleet, and the benchmark judges on D other
// draws (default 3) with fleet seeds 10 s + 1 ... 10 s + D. Every variant runs on every judged
// fleet with job seeds 1..N (default 5).
//
// Settings. Oort and FedCaSe run at the selection settings of --settings (default
// configs/sim/tta-tuned.json), which --tune chose on the tuning fleets. Only the selection
// policy, the pipeline (sampling and cache policy together) and the rho controller differ
// between variants: every cache repeats its hits by the same rule (the config's: the FedCaSe
// artifact's adaptive one, or --repetition), and durations come from the same device profiles.
//
// Time to target. A run reaches the target when its accuracy first reaches it ("first") and
// when it has held it for the config's sustained_evaluations consecutive evaluations (3),
// timed at the first of them ("sustained", the headline; sim/run.h).
//
// Output: DIR/tta_curves.csv (DIR: --out, default var/bench/tta; every run's per-round curve),
// DIR/tta_<model>_<fleet seed>.svg, a table per fleet model, and as the last line one JSON
// object with, per fleet model and variant, the median and interquartile range of both times
// to target, the rounds to target and the mean round duration (over the model's fleets and
// seeds), each fleet's own medians, the speed-ups with 95% bootstrap intervals (--bootstrap
// resamples, default 10,000: fleets, then seeds within each fleet, paired across variants)
// and the targets. Unreached targets count as infinitely late (a median then may be null).
// --full runs 5,000 clients with 50 per round. Runs are spread over --threads workers (default
// 2), one torch thread each.
//
// --tune sweeps Oort's and FedCaSe's knobs, the same number of settings each (8), on the
// tuning fleets with job seeds 101..100+N (default 2) on one pipeline (default lru), and writes
// the best setting of each (the smallest geometric mean over fleets of the median sustained
// time to target) to DIR/tta_tuned.json, in --settings' form. Both print the wall and CPU
// seconds they took and the load average at the end.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "ml/model.h"
#include "sim/config.h"
#include "sim/inputs.h"
#include "sim/run.h"

namespace {

using namespace fedcase::sim;
using Json = nlohmann::ordered_json;

constexpr double kNever = std::numeric_limits<double>::infinity();

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

const Pipeline& pipeline_named(const std::string& name) {
  for (const Pipeline& p : kPipelines) {
    if (name == p.name) return p;
  }
  throw std::runtime_error("unknown pipeline " + name);
}

struct Variant {
  std::string name;  // "<selection>/<pipeline>"
  std::string color;
  nlohmann::json patch;  // merged into the fleet's config
};

// The selection settings Oort and FedCaSe run at (the `selection` object of a job, without
// the policy), and the name of each.
struct Settings {
  nlohmann::json oort = nlohmann::json::object();
  nlohmann::json fedcase = nlohmann::json::object();
  std::string oort_name = "fedscale_defaults", fedcase_name = "defaults";
};

std::string other_controller(const nlohmann::json& fedcase) {
  return fedcase.value("rho_controller", std::string("perturb")) == "perturb" ? "learned"
                                                                              : "perturb";
}

nlohmann::json with_policy(const char* policy, nlohmann::json selection) {
  selection["policy"] = policy;
  return selection;
}

// The job patch that runs `selection` on pipeline `p`; `cache` holds the repetition rule.
nlohmann::json job_patch(const nlohmann::json& selection, const Pipeline& p, nlohmann::json cache) {
  cache["policy"] = p.cache;
  return {{"job",
           {{"selection", selection},
            {"training", {{"sampling", p.sampling}, {"cache", std::move(cache)}}}}}};
}

// The judged core: random selection without a cache (the sanity gate), and Oort and FedCaSe
// on every pipeline. With `extended`, random on the other pipelines, FedCaSe's other rho
// controller on the importance pipeline and Oort at FedScale's defaults on LRU; with `async`,
// FedBuff.
std::vector<Variant> make_variants(const Settings& settings, const nlohmann::json& cache,
                                   bool extended, bool async, bool compression) {
  struct Selection {
    const char* name;
    nlohmann::json selection;
    const char* colors[3];  // per pipeline
  };
  const Selection selections[] = {
      {"random", {{"policy", "random"}}, {"#555555", "#999999", "#cccccc"}},
      {"oort", with_policy("oort", settings.oort), {"#08519c", "#3182bd", "#9ecae1"}},
      {"fedcase", with_policy("fedcase", settings.fedcase), {"#a50f15", "#de2d26", "#fc9272"}},
  };
  std::vector<Variant> out;
  for (const Selection& s : selections) {
    for (size_t k = 0; k < std::size(kPipelines); ++k) {
      if (!extended && std::string(s.name) == "random" && k > 0) continue;
      out.push_back({std::string(s.name) + "/" + kPipelines[k].name, s.colors[k],
                     job_patch(s.selection, kPipelines[k], cache)});
    }
  }
  if (extended) {
    nlohmann::json other = with_policy("fedcase", settings.fedcase);
    other["rho_controller"] = other_controller(settings.fedcase);
    out.push_back({"fedcase_" + other["rho_controller"].get<std::string>() + "/importance",
                   "#ff7f00", job_patch(other, kPipelines[2], cache)});
    out.push_back(
        {"oort_fedscale/lru", "#6baed6", job_patch({{"policy", "oort"}}, kPipelines[1], cache)});
  }
  if (compression) {
    // FedCaSe on the importance pipeline with each update compressor: the same pipeline,
    // only the upload's encoding differs (docs/aggregation.md, "Compressed updates").
    for (const auto& [kind, color] : {std::pair<const char*, const char*>{"q8", "#54278f"},
                                      {"top_k", "#dd3497"}}) {
      Variant v{std::string("fedcase+") + kind + "/importance", color,
                job_patch(with_policy("fedcase", settings.fedcase), kPipelines[2], cache)};
      v.patch["job"]["compression"] = {{"kind", kind}};
      out.push_back(std::move(v));
    }
  }
  if (!async) return out;
  // FedBuff: the same selections filling slots of an asynchronous job.
  const char* async_colors[3][2] = {
      {"#238b45", "#74c476"}, {"#6a51a3", "#9e9ac8"}, {"#d94801", "#fd8d3c"}};
  for (size_t k = 0; k < std::size(selections); ++k) {
    for (size_t p : {size_t(0), size_t(2)}) {
      Variant v{std::string("fedbuff_") + selections[k].name + "/" + kPipelines[p].name,
                async_colors[k][p == 0 ? 0 : 1],
                job_patch(selections[k].selection, kPipelines[p], cache)};
      v.patch["job"]["mode"] = "async";
      out.push_back(std::move(v));
    }
  }
  return out;
}

// The settings --tune compares, the same number for each policy (kTuningSettings). Oort:
// both reference repositories' defaults as they stand (FedScale's: T at the 30th percentile,
// a pacer window of 20 rounds and a step of 5 points, exploration decay 0.98 and floor 0.3;
// the Oort repository's: T at the 10th percentile, decay 0.95, floor 0.2, clip 0.98,
// exploitation cut-off 0.7, step 10), then the pacer scaled to a horizon of 30 to 55 rounds
// (a window of 5 rounds, steps of 5 or 10 points) with T at the 10th, 30th or 50th
// percentile, under either repository's exploration decay and floor. FedCaSe: the rho
// controller (learned or perturb-and-observe), the warm-up (5 or 10 rounds) and the weight of
// time in experience (0.1 or 0.3).
constexpr size_t kTuningSettings = 8;

std::vector<std::pair<std::string, nlohmann::json>> tuning_grid(const char* policy) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  if (std::string(policy) == "oort") {
    out.push_back({"fedscale_defaults", nlohmann::json::object()});
    const nlohmann::json oort_repo = {{"pacer_percentile", 10},    {"pacer_step", 10},
                                      {"exploration_decay", 0.95}, {"exploration_min", 0.2},
                                      {"clip_quantile", 0.98},     {"exploit_cutoff", 0.7}};
    out.push_back({"oort_repository", oort_repo});
    struct Scaled {
      double t, step, decay, floor;
    };
    for (const Scaled& c :
         {Scaled{10, 5, 0.98, 0.3}, Scaled{30, 5, 0.98, 0.3}, Scaled{50, 5, 0.98, 0.3},
          Scaled{30, 10, 0.98, 0.3}, Scaled{30, 5, 0.95, 0.2}, Scaled{10, 10, 0.95, 0.2}}) {
      char name[96];
      std::snprintf(name, sizeof(name), "T%g_w5_s%g_decay%g_min%g", c.t, c.step, c.decay, c.floor);
      out.push_back({name,
                     {{"pacer_percentile", c.t},
                      {"pacer_window", 5},
                      {"pacer_step", c.step},
                      {"exploration_decay", c.decay},
                      {"exploration_min", c.floor}}});
    }
    return out;
  }
  for (const char* controller : {"learned", "perturb"}) {
    for (int warmup : {5, 10}) {
      for (double time_weight : {0.1, 0.3}) {
        char name[96];
        std::snprintf(name, sizeof(name), "%s_warmup%d_time%g", controller, warmup, time_weight);
        out.push_back({name,
                       {{"rho_controller", controller},
                        {"warmup_rounds", warmup},
                        {"time_weight", time_weight}}});
      }
    }
  }
  return out;
}

struct Args {
  std::string root = FEDCASE_SOURCE_DIR;
  std::vector<std::string> configs = {"configs/sim/tta.json", "configs/sim/tta-skewed.json"};
  std::string settings = "configs/sim/tta-tuned.json";  // relative to the root
  std::string out = "var/bench/tta";                    // relative to the working directory
  uint64_t seeds = 5;
  uint64_t fleet_draws = 3;
  std::optional<std::string> repetition;  // a factor, or "adaptive"
  std::optional<size_t> eval_samples;
  std::vector<std::string> variants;  // empty: all
  bool extended = false;
  bool async = false;
  bool compression = false;  // FedCaSe/importance with each update compressor
  bool steered = false;      // every fleet pace-steered (sim "pace" at its defaults)
  size_t bootstrap = 10000;
  unsigned threads = 2;
  bool full = false;
  bool tune = false;
  std::string tune_pipeline = "lru";
  bool seeds_given = false;
};

// One drawn fleet of a fleet model.
struct Fleet {
  std::string model;  // the config's file name without .json
  std::string name;   // "<model>/<fleet seed>"
  uint64_t fleet_seed = 0;
  nlohmann::json base;  // the config every variant patches
  SimConfig config;     // `base`, parsed
  std::vector<SimClient> clients;
  nlohmann::json cache;  // the repetition rule every pipeline reads at
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
    bool* set = flag == "--full"       ? &a.full
                : flag == "--tune"     ? &a.tune
                : flag == "--extended" ? &a.extended
                : flag == "--async"    ? &a.async
                : flag == "--compression" ? &a.compression
                : flag == "--steered"  ? &a.steered
                                       : nullptr;
    if (set) {
      *set = true;
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
    else if (flag == "--settings")
      a.settings = value;
    else if (flag == "--seeds")
      a.seeds = std::max<uint64_t>(1, std::stoull(value)), a.seeds_given = true;
    else if (flag == "--fleet-draws")
      a.fleet_draws = std::max<uint64_t>(1, std::stoull(value));
    else if (flag == "--repetition")
      a.repetition = value;
    else if (flag == "--eval-samples")
      a.eval_samples = std::stoull(value);
    else if (flag == "--variants")
      a.variants = split(value);
    else if (flag == "--bootstrap")
      a.bootstrap = std::max<size_t>(100, std::stoull(value));
    else if (flag == "--threads")
      a.threads = std::max(1u, unsigned(std::stoul(value)));
    else if (flag == "--tune-pipeline")
      a.tune_pipeline = pipeline_named(value).name;
    else
      throw std::runtime_error("unknown flag " + flag);
  }
  if (a.tune && !a.seeds_given) a.seeds = 2;
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

// The median of `t` (any order), infinite when a middle value is.
double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  const size_t n = t.size();
  if (n == 0) return kNever;
  return n % 2 ? t[n / 2] : (std::isinf(t[n / 2]) ? kNever : 0.5 * (t[n / 2 - 1] + t[n / 2]));
}

// How much sooner `fast` is than `slow`: slow / fast of two medians; infinite when only `slow`
// is, NaN when both are.
double ratio(double slow, double fast) {
  if (std::isinf(slow) && std::isinf(fast)) return std::numeric_limits<double>::quiet_NaN();
  return std::isinf(fast) ? 0 : slow / fast;
}

// A variant's figures on a set of runs, over their fleets and seeds: times to target (first
// and sustained; infinite where missed), rounds to the sustained target, mean round duration
// (virtual seconds per round of the run), and until the sustained target the fleet's
// client-seconds and the updates trained and sent for nothing.
struct Figures {
  std::vector<double> first_s, sustained_s, rounds, round_s, client_s, wasted, bytes;
  double hit_ratio = 0;  // mean over runs
};

Figures figures_of(const std::vector<const Run*>& runs) {
  Figures f;
  for (const Run* r : runs) {
    const RunSummary& s = r->summary;
    f.first_s.push_back(s.first ? s.first->time_s : kNever);
    f.sustained_s.push_back(s.sustained ? s.sustained->time_s : kNever);
    f.rounds.push_back(s.sustained ? double(s.sustained->round) : kNever);
    f.round_s.push_back(s.rounds ? s.virtual_s / double(s.rounds) : 0);
    f.client_s.push_back(s.sustained ? s.sustained->client_s : kNever);
    f.wasted.push_back(s.sustained ? double(s.sustained->wasted) : kNever);
    f.bytes.push_back(s.sustained ? double(s.sustained->bytes) : kNever);
    f.hit_ratio += s.mean_hit_ratio;
  }
  for (auto* list :
       {&f.first_s, &f.sustained_s, &f.rounds, &f.round_s, &f.client_s, &f.wasted, &f.bytes}) {
    std::sort(list->begin(), list->end());
  }
  if (!runs.empty()) f.hit_ratio /= double(runs.size());
  return f;
}

Json json_of(std::optional<double> x) { return x ? Json(*x) : Json(nullptr); }
Json json_of(double x) { return std::isfinite(x) ? Json(x) : Json(nullptr); }

// {"median": m, "iqr": [q25, q75]} of ascending `t`.
Json summary_of(const std::vector<double>& t) {
  return {{"median", json_of(quantile(t, 0.5))},
          {"iqr", Json::array({json_of(quantile(t, 0.25)), json_of(quantile(t, 0.75))})}};
}

// The runs of one fleet model, indexed by fleet and seed, to find a variant's runs and to
// resample them.
class RunTable {
 public:
  RunTable(const std::vector<Run>& runs, const std::vector<const Fleet*>& fleets, uint64_t seeds)
      : fleets_(fleets), seeds_(seeds) {
    for (const Run& r : runs) {
      for (size_t k = 0; k < fleets.size(); ++k) {
        if (r.fleet == fleets[k]) by_[{r.variant->name, k, r.seed}] = &r;
      }
    }
  }

  // The variant's runs on fleet k (all fleets when k is npos).
  std::vector<const Run*> runs(const std::string& variant, size_t k = std::string::npos) const {
    std::vector<const Run*> out;
    for (size_t f = 0; f < fleets_.size(); ++f) {
      if (k != std::string::npos && f != k) continue;
      for (uint64_t s = 1; s <= seeds_; ++s) {
        auto it = by_.find({variant, f, s});
        if (it != by_.end()) out.push_back(it->second);
      }
    }
    return out;
  }
  bool has(const std::string& variant) const { return !runs(variant).empty(); }

  // The speed-up of `fast` over `slow` (a ratio of medians over every fleet and seed), and its
  // 95% interval from `resamples` hierarchical bootstrap draws: fleets with replacement, then
  // seeds with replacement within each drawn fleet, the same draws for both variants (their
  // runs share fleets and seeds). Times are the sustained ones, or the first crossings.
  Json speedup(const std::string& slow, const std::string& fast, bool sustained,
               size_t resamples) const {
    if (!has(slow) || !has(fast)) return nullptr;
    auto time = [&](const std::string& variant, size_t k, uint64_t s) {
      auto it = by_.find({variant, k, s});
      if (it == by_.end()) return std::numeric_limits<double>::quiet_NaN();
      const auto& reached = sustained ? it->second->summary.sustained : it->second->summary.first;
      return reached ? reached->time_s : kNever;
    };
    auto ratio_of = [&](const std::vector<std::pair<size_t, uint64_t>>& picks) {
      std::vector<double> a, b;
      for (auto [k, s] : picks) {
        const double ta = time(slow, k, s), tb = time(fast, k, s);
        if (std::isnan(ta) || std::isnan(tb)) continue;
        a.push_back(ta);
        b.push_back(tb);
      }
      return ratio(median(a), median(b));
    };
    std::vector<std::pair<size_t, uint64_t>> all;
    for (size_t k = 0; k < fleets_.size(); ++k) {
      for (uint64_t s = 1; s <= seeds_; ++s) all.push_back({k, s});
    }
    const double point = ratio_of(all);
    std::mt19937_64 rng(0x5eed + std::hash<std::string>{}(slow + "|" + fast));
    std::vector<double> draws;
    size_t undefined = 0;
    for (size_t b = 0; b < resamples; ++b) {
      std::vector<std::pair<size_t, uint64_t>> picks;
      for (size_t f = 0; f < fleets_.size(); ++f) {
        const size_t k = rng() % fleets_.size();
        for (uint64_t s = 0; s < seeds_; ++s) picks.push_back({k, 1 + rng() % seeds_});
      }
      const double r = ratio_of(picks);
      if (std::isnan(r)) {
        ++undefined;
      } else {
        draws.push_back(r);
      }
    }
    std::sort(draws.begin(), draws.end());
    auto at = [&](double q) -> Json {
      if (draws.empty()) return nullptr;
      const double v = draws[std::min(draws.size() - 1, size_t(q * double(draws.size())))];
      return std::isfinite(v) ? Json(v) : Json("inf");
    };
    Json out = {{"median", std::isfinite(point) ? Json(point) : Json(nullptr)},
                {"ci95", Json::array({at(0.025), at(0.975)})}};
    if (undefined) out["undefined_resamples"] = undefined;
    return out;
  }

 private:
  std::vector<const Fleet*> fleets_;
  uint64_t seeds_;
  std::map<std::tuple<std::string, size_t, uint64_t>, const Run*> by_;
};

std::string svg_plot(const std::vector<Run>& runs, const Fleet& fleet,
                     const std::vector<Variant>& variants) {
  const double target = fleet.config.job.target_accuracy;
  double x_max = 1;
  for (const Run& r : runs) {
    if (r.fleet == &fleet && !r.curve.empty()) x_max = std::max(x_max, r.curve.back().close_s);
  }
  const double w = 800, h = 500, left = 70, right = 190, top = 30, bottom = 60;
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

// The Fashion-MNIST sets every fleet trains and evaluates on.
struct Datasets {
  fedcase::ml::Dataset train, test;
};

// The cache settings every pipeline of `config` reads at: the config's repetition rule and
// factor, or --repetition's.
nlohmann::json repetition_of(const Args& args, const nlohmann::json& config) {
  nlohmann::json cache = nlohmann::json::object();
  const nlohmann::json base = config.at("job")
                                  .value("training", nlohmann::json::object())
                                  .value("cache", nlohmann::json::object());
  cache["repetition_factor"] = base.value("repetition_factor", 1.0);
  cache["repetition"] = base.value("repetition", std::string("fixed"));
  if (args.repetition) {
    cache["repetition"] = *args.repetition == "adaptive" ? "adaptive" : "fixed";
    if (*args.repetition != "adaptive") cache["repetition_factor"] = std::stod(*args.repetition);
  }
  return cache;
}

// The fleet model of `config_path` drawn with `fleet_seed` (its own seed when nullopt).
Fleet load_fleet(const Args& args, const std::string& config_path, const Datasets& data,
                 std::optional<uint64_t> fleet_seed) {
  Fleet f;
  f.model = std::filesystem::path(config_path).stem().string();
  f.base = nlohmann::json::parse(or_die(read_text_file(args.root + "/" + config_path)));
  if (args.full)
    f.base.merge_patch({{"fleet", {{"clients", 5000}}}, {"job", {{"clients_per_round", 50}}}});
  if (args.eval_samples) f.base["eval_samples"] = *args.eval_samples;
  if (args.steered) f.base["pace"] = nlohmann::json::object();
  if (fleet_seed) f.base["fleet"]["seed"] = *fleet_seed;
  f.config = or_die(parse_sim_config(f.base));
  resolve_paths(f.config, args.root);
  f.fleet_seed = f.config.fleet.seed;
  f.name = f.model + "/" + std::to_string(f.fleet_seed);
  f.clients =
      or_die(build_fleet(or_die(load_devices(f.config)), f.config.fleet, data.train.labels));
  f.cache = repetition_of(args, f.base);
  return f;
}

// Runs every run, spread over `threads` workers; the first failure ends the bench.
void run_all(std::vector<Run>& runs, unsigned threads, const Datasets& data) {
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::string failure;
  size_t done = 0;
  auto worker = [&] {
    fedcase::ml::set_torch_threads(1);
    for (size_t i; (i = next++) < runs.size();) {
      Run& r = runs[i];
      const Fleet& f = *r.fleet;
      auto sim = Simulator::create(r.config, data.train, data.test, f.clients);
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
      auto at = [](const std::optional<TargetReached>& t) {
        return t ? std::to_string(int(t->time_s)) + " s" : std::string("never");
      };
      std::fprintf(stderr,
                   "[%zu/%zu] %s %-27s seed %llu: first %s, sustained %s, %llu rounds "
                   "(%.0f s wall)\n",
                   ++done, runs.size(), f.name.c_str(), r.variant->name.c_str(),
                   static_cast<unsigned long long>(r.seed), at(r.summary.first).c_str(),
                   at(r.summary.sustained).c_str(),
                   static_cast<unsigned long long>(r.summary.rounds), r.summary.wall_s);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (!failure.empty()) throw std::runtime_error(failure);
}

// The runs of `variants` on `fleets` with job seeds first_seed .. first_seed + seeds - 1.
std::vector<Run> plan_runs(const std::vector<const Fleet*>& fleets,
                           const std::vector<Variant>& variants, uint64_t first_seed,
                           uint64_t seeds, const std::string& root) {
  std::vector<Run> runs;
  for (const Fleet* f : fleets) {
    for (const Variant& v : variants) {
      for (uint64_t seed = first_seed; seed < first_seed + seeds; ++seed) {
        nlohmann::json j = f->base;
        j.merge_patch(v.patch);
        j["job"]["seed"] = seed;
        Run r;
        r.fleet = f;
        r.variant = &v;
        r.seed = seed;
        r.config = or_die(parse_sim_config(j));
        resolve_paths(r.config, root);
        runs.push_back(std::move(r));
      }
    }
  }
  return runs;
}

std::string cell(const std::vector<double>& t, int decimals) {
  char buf[64];
  auto q = [&](double p) { return quantile(t, p).value_or(kNever); };
  std::snprintf(buf, sizeof(buf), "%.*f (%.*f-%.*f)", decimals, q(0.5), decimals, q(0.25), decimals,
                q(0.75));
  return buf;
}

// A speed-up's point and interval, for the table.
std::string speedup_cell(const Json& s) {
  if (s.is_null() || s["median"].is_null()) return "n/a";
  auto num = [](const Json& x) {
    return x.is_number() ? x.get<double>() : std::numeric_limits<double>::infinity();
  };
  char buf[96];
  std::snprintf(buf, sizeof(buf), "%.2fx [%.2f, %.2f]", s["median"].get<double>(),
                num(s["ci95"][0]), num(s["ci95"][1]));
  return buf;
}

// One fleet model's figures: per variant over its fleets and seeds, per fleet, the speed-ups
// the claims rest on with their intervals, and the targets.
Json model_report(const std::vector<Run>& runs, const std::vector<const Fleet*>& fleets,
                  const std::vector<Variant>& variants, const Args& args) {
  const Fleet& first = *fleets.front();
  const RunTable table(runs, fleets, args.seeds);
  std::printf("\nfleet model %s: %zu fleets (seeds", first.model.c_str(), fleets.size());
  for (const Fleet* f : fleets)
    std::printf(" %llu", static_cast<unsigned long long>(f->fleet_seed));
  std::printf(
      ") x %llu job seeds, %zu clients, K = %u, target %.2f sustained over %u "
      "evaluations, repetition %s\n",
      static_cast<unsigned long long>(args.seeds), first.clients.size(),
      unsigned(first.config.job.clients_per_round), first.config.job.target_accuracy,
      first.config.sustained_evaluations, first.cache.dump().c_str());
  std::printf("%-27s %20s %20s %14s %18s %9s %22s %12s\n", "variant", "sustained s (IQR)",
              "first s (IQR)", "rounds (IQR)", "round s (IQR)", "hit ratio", "client-s to target",
              "wasted");
  Json per_variant = Json::object();
  for (const Variant& v : variants) {
    if (!table.has(v.name)) continue;
    const Figures f = figures_of(table.runs(v.name));
    Json per_fleet = Json::object();
    for (size_t k = 0; k < fleets.size(); ++k) {
      const Figures ff = figures_of(table.runs(v.name, k));
      per_fleet[fleets[k]->name] = {{"sustained_s", json_of(quantile(ff.sustained_s, 0.5))},
                                    {"first_s", json_of(quantile(ff.first_s, 0.5))}};
    }
    per_variant[v.name] = {{"sustained_tta_s", summary_of(f.sustained_s)},
                           {"first_tta_s", summary_of(f.first_s)},
                           {"rounds_to_target", summary_of(f.rounds)},
                           {"round_s", summary_of(f.round_s)},
                           {"mean_hit_ratio", f.hit_ratio},
                           {"client_s_to_target", summary_of(f.client_s)},
                           {"wasted_updates_to_target", summary_of(f.wasted)},
                           {"bytes_to_target", summary_of(f.bytes)},
                           {"per_fleet_median", per_fleet}};
    std::printf("%-27s %20s %20s %14s %18s %9.3f %22s %12s\n", v.name.c_str(),
                cell(f.sustained_s, 0).c_str(), cell(f.first_s, 0).c_str(),
                cell(f.rounds, 0).c_str(), cell(f.round_s, 2).c_str(), f.hit_ratio,
                cell(f.client_s, 0).c_str(), cell(f.wasted, 0).c_str());
  }
  auto speedup = [&](const std::string& slow, const std::string& fast) -> Json {
    Json s = table.speedup(slow, fast, true, args.bootstrap);
    if (s.is_null()) return s;
    s["first_crossing"] = table.speedup(slow, fast, false, args.bootstrap);
    return s;
  };
  Json out;
  Json fleet_list = Json::array();
  for (const Fleet* f : fleets) fleet_list.push_back(f->name);
  out["fleets"] = fleet_list;
  out["job_seeds"] = Json::array({1, args.seeds});
  out["clients"] = first.clients.size();
  out["clients_per_round"] = first.config.job.clients_per_round;
  out["target_accuracy"] = first.config.job.target_accuracy;
  out["sustained_evaluations"] = first.config.sustained_evaluations;
  out["eval_samples"] = first.config.eval_samples;
  out["cache_repetition"] = first.cache;
  out["frequency_order"] = fedcase::client::frequency_order_name(first.config.frequency_order);

  Json same = Json::object();  // selection alone, pipeline by pipeline
  for (const Pipeline& p : kPipelines)
    same[p.name] = speedup(std::string("oort/") + p.name, std::string("fedcase/") + p.name);
  const Json full_stack = speedup("oort/lru", "fedcase/importance");
  const Json oort_vs_random = speedup("random/none", "oort/none");
  out["speedup_fedcase_vs_oort_same_pipeline"] = same;
  out["speedup_fedcase_vs_oort_lru"] = full_stack;
  out["speedup_fedcase_vs_random"] = speedup("random/none", "fedcase/importance");
  out["speedup_oort_vs_random"] = oort_vs_random;
  out["speedup_tuned_vs_fedscale_oort_lru"] = speedup("oort_fedscale/lru", "oort/lru");
  for (const Variant& v : variants) {  // the default rho controller against the other one
    if (v.name.rfind("fedcase_", 0) == 0 && v.name.find("/importance") != std::string::npos) {
      out["speedup_default_vs_other_rho_controller"] = speedup(v.name, "fedcase/importance");
    }
  }
  // Asynchronous training: FedBuff against synchronous rounds, selection by selection, and
  // FedCaSe's slot selection against FedBuff's random one.
  if (table.has("fedbuff_random/none")) {
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
  }

  // Compressed updates against the same variant uncompressed: the speed-up of the sustained
  // time to target (below 1: slower), and the median bytes moved until then, as a ratio.
  if (table.has("fedcase+q8/importance")) {
    const Figures plain = figures_of(table.runs("fedcase/importance"));
    Json compression = Json::object();
    for (const char* kind : {"q8", "top_k"}) {
      const std::string name = std::string("fedcase+") + kind + "/importance";
      const Figures f = figures_of(table.runs(name));
      const auto bytes = quantile(f.bytes, 0.5), plain_bytes = quantile(plain.bytes, 0.5);
      compression[kind] = {
          {"speedup_vs_uncompressed", speedup("fedcase/importance", name)},
          {"bytes_to_target_vs_uncompressed",
           bytes && plain_bytes && std::isfinite(*bytes) && std::isfinite(*plain_bytes)
               ? Json(*bytes / *plain_bytes)
               : Json(nullptr)}};
    }
    out["compression_vs_uncompressed"] = compression;
  }

  // The targets, on the sustained times.
  auto lower = [](const Json& s) {
    return s.is_object() && s["ci95"][0].is_number() ? s["ci95"][0].get<double>()
           : s.is_object() && s["ci95"][0] == "inf"  ? kNever
                                                     : 0.0;
  };
  auto point = [](const Json& s) {
    return s.is_object() && s["median"].is_number() ? s["median"].get<double>() : 0.0;
  };
  Json targets = Json::object();
  Json per_pipeline = Json::object();
  bool all_pipelines = true;
  for (const Pipeline& p : kPipelines) {
    const bool met = lower(same[p.name]) > 1.2;
    per_pipeline[p.name] = met;
    all_pipelines = all_pipelines && met;
  }
  targets["selection_ci_lower_above_1.2"] = per_pipeline;
  targets["selection_ci_lower_above_1.2_every_pipeline"] = all_pipelines;
  targets["full_stack_median_at_least_1.5"] = point(full_stack) >= 1.5;
  targets["oort_beats_random"] = point(oort_vs_random) > 1;
  out["targets"] = targets;
  out["variants"] = per_variant;

  std::printf(
      "speed-ups on the sustained target (median over %zu fleets x %llu seeds, 95%% "
      "bootstrap interval):\n",
      fleets.size(), static_cast<unsigned long long>(args.seeds));
  for (const Pipeline& p : kPipelines) {
    std::printf("  fedcase/%s vs oort/%s (selection alone): %s\n", p.name, p.name,
                speedup_cell(same[p.name]).c_str());
  }
  std::printf("  fedcase/importance vs oort/lru (full stack): %s\n",
              speedup_cell(full_stack).c_str());
  std::printf("  oort/none vs random/none: %s\n", speedup_cell(oort_vs_random).c_str());
  std::printf("  tuned oort/lru vs oort_fedscale/lru: %s\n",
              speedup_cell(out["speedup_tuned_vs_fedscale_oort_lru"]).c_str());
  return out;
}

std::filesystem::path prepare_out(const Args& args) {
  std::filesystem::create_directories(args.out);
  return args.out;
}

void write_curves(const std::vector<Run>& runs, const std::filesystem::path& path) {
  std::string csv = "fleet,variant,seed," + round_csv_header() + "\n";
  for (const Run& r : runs) {
    for (const RoundRecord& rec : r.curve) {
      csv += r.fleet->name + "," + r.variant->name + "," + std::to_string(r.seed) + "," +
             round_csv_row(rec) + "\n";
    }
  }
  write_file(path, csv);
}

Datasets load_datasets(const Args& args) {
  nlohmann::json first =
      nlohmann::json::parse(or_die(read_text_file(args.root + "/" + args.configs.front())));
  SimConfig config = or_die(parse_sim_config(first));
  resolve_paths(config, args.root);
  Datasets d;
  d.train = or_die(fedcase::ml::load_fashion_mnist(config.data_dir, fedcase::ml::Split::kTrain));
  d.test = or_die(fedcase::ml::load_fashion_mnist(config.data_dir, fedcase::ml::Split::kTest));
  return d;
}

Settings load_settings(const Args& args) {
  const nlohmann::json j =
      nlohmann::json::parse(or_die(read_text_file(args.root + "/" + args.settings)));
  Settings s;
  s.oort = j.at("oort").at("selection");
  s.fedcase = j.at("fedcase").at("selection");
  s.oort_name = j.at("oort").value("name", "");
  s.fedcase_name = j.at("fedcase").value("name", "");
  return s;
}

// What the bench cost since `start`: wall seconds, the process's CPU seconds (all threads)
// and the machine's load average at the end, so a wall time taken on a shared machine can be
// read against the CPU time it needed.
void add_costs(Json& j, std::chrono::steady_clock::time_point start) {
  j["wall_s"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  j["cpu_s"] = double(std::clock()) / CLOCKS_PER_SEC;
  double load[3] = {0, 0, 0};
  if (getloadavg(load, 3) == 3) j["load_average_1_5_15"] = Json::array({load[0], load[1], load[2]});
  j["hardware_threads"] = std::thread::hardware_concurrency();
}

int tune(const Args& args, const Datasets& data) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Fleet> fleets;
  for (const std::string& config : args.configs)
    fleets.push_back(load_fleet(args, config, data, std::nullopt));
  const Pipeline& pipeline = pipeline_named(args.tune_pipeline);
  // Per policy, its candidates as variants named "<policy>:<setting>" (one cache rule: the
  // first fleet's).
  std::vector<Variant> variants;
  std::map<std::string, nlohmann::json> selection_of;
  for (const char* policy : {"oort", "fedcase"}) {
    const auto grid = tuning_grid(policy);
    if (grid.size() != kTuningSettings) throw std::logic_error("unequal tuning budgets");
    for (const auto& [name, selection] : grid) {
      const std::string variant = std::string(policy) + ":" + name;
      selection_of[variant] = selection;
      variants.push_back({variant, "#000000",
                          job_patch(with_policy(policy, selection), pipeline, fleets[0].cache)});
    }
  }
  constexpr uint64_t kFirstTuningSeed = 101;
  std::vector<const Fleet*> tuning_fleets_of;
  for (const Fleet& f : fleets) tuning_fleets_of.push_back(&f);
  std::vector<Run> runs =
      plan_runs(tuning_fleets_of, variants, kFirstTuningSeed, args.seeds, args.root);
  run_all(runs, args.threads, data);
  const std::filesystem::path out = prepare_out(args);
  write_curves(runs, out / "tta_tune_curves.csv");

  Json per_setting = Json::object();
  std::map<std::string, std::pair<std::string, double>> best;  // per policy: setting, score
  std::printf(
      "\ntuning on the %s pipeline, job seeds %llu-%llu; score: geometric mean over "
      "fleets of the median sustained time to target\n",
      pipeline.name, static_cast<unsigned long long>(kFirstTuningSeed),
      static_cast<unsigned long long>(kFirstTuningSeed + args.seeds - 1));
  std::printf("%-40s", "setting");
  for (const Fleet& f : fleets) std::printf(" %16s", f.name.c_str());
  std::printf(" %10s\n", "score");
  for (const Variant& v : variants) {
    Json fleet_medians = Json::object();
    double log_sum = 0;
    std::printf("%-40s", v.name.c_str());
    for (const Fleet& f : fleets) {
      std::vector<const Run*> mine;
      for (const Run& r : runs) {
        if (r.fleet == &f && r.variant == &v) mine.push_back(&r);
      }
      const Figures fig = figures_of(mine);
      const double m = median(fig.sustained_s);
      fleet_medians[f.name] = {{"sustained_s", json_of(m)},
                               {"first_s", json_of(median(fig.first_s))},
                               {"round_s", json_of(median(fig.round_s))}};
      log_sum += std::log(m);
      std::printf(" %16.0f", m);
    }
    const double score = std::exp(log_sum / double(fleets.size()));
    std::printf(" %10.0f\n", score);
    const std::string policy = v.name.substr(0, v.name.find(':'));
    per_setting[v.name] = {{"selection", selection_of[v.name]},
                           {"per_fleet_median", fleet_medians},
                           {"score_s", json_of(score)}};
    auto it = best.find(policy);
    if (it == best.end() || score < it->second.second) best[policy] = {v.name, score};
  }
  Json chosen = Json::object();
  Json settings_file;
  settings_file["note"] =
      "Selection settings of bench/tta_bench, chosen by its --tune mode on the tuning fleets "
      "(each fleet model's own seed), never on the judged ones.";
  Json tuning_fleets = Json::array();
  for (const Fleet& f : fleets) tuning_fleets.push_back(f.name);
  settings_file["tuning"] = {
      {"fleets", tuning_fleets},
      {"pipeline", pipeline.name},
      {"job_seeds", Json::array({kFirstTuningSeed, kFirstTuningSeed + args.seeds - 1})}};
  for (const auto& [policy, choice] : best) {
    const std::string setting = choice.first.substr(policy.size() + 1);
    chosen[policy] = {{"name", setting},
                      {"selection", selection_of[choice.first]},
                      {"score_s", json_of(choice.second)}};
    settings_file[policy] = {{"name", setting}, {"selection", selection_of[choice.first]}};
    std::printf("chosen for %s: %s (%.0f s)\n", policy.c_str(), setting.c_str(), choice.second);
  }
  write_file(out / "tta_tuned.json", settings_file.dump(2) + "\n");
  Json j;
  j["bench"] = "tta_tune";
  j["fleets"] = tuning_fleets;
  j["pipeline"] = pipeline.name;
  j["job_seeds"] = Json::array({kFirstTuningSeed, kFirstTuningSeed + args.seeds - 1});
  j["settings_per_policy"] = variants.size() / 2;
  j["settings"] = per_setting;
  j["chosen"] = chosen;
  add_costs(j, start);
  j["tuned_settings"] = (out / "tta_tuned.json").string();
  std::cout << j.dump() << std::endl;
  return 0;
}

int run(const Args& args) {
  const auto start = std::chrono::steady_clock::now();
  if (args.configs.empty()) throw std::runtime_error("--configs names no config");
  const Datasets data = load_datasets(args);
  if (args.tune) return tune(args, data);
  const Settings settings = load_settings(args);

  // The judged fleets: draws 10 s + 1 ... 10 s + D of each fleet model (s its own seed).
  std::vector<Fleet> fleets;
  std::vector<std::string> models;
  for (const std::string& config : args.configs) {
    const Fleet tuning = load_fleet(args, config, data, std::nullopt);
    if (std::find(models.begin(), models.end(), tuning.model) != models.end())
      throw std::runtime_error("two configs are named " + tuning.model);
    models.push_back(tuning.model);
    for (uint64_t k = 1; k <= args.fleet_draws; ++k)
      fleets.push_back(load_fleet(args, config, data, 10 * tuning.fleet_seed + k));
  }
  std::vector<std::vector<Variant>> variants;  // per fleet (its cache rule)
  std::vector<Run> runs;
  variants.reserve(fleets.size());
  for (const Fleet& f : fleets) {
    std::vector<Variant> all =
        make_variants(settings, f.cache, args.extended, args.async, args.compression);
    if (!args.variants.empty()) {
      all.erase(std::remove_if(all.begin(), all.end(),
                               [&](const Variant& v) {
                                 return std::find(args.variants.begin(), args.variants.end(),
                                                  v.name) == args.variants.end();
                               }),
                all.end());
    }
    variants.push_back(std::move(all));
  }
  for (size_t k = 0; k < fleets.size(); ++k) {
    std::vector<Run> planned = plan_runs({&fleets[k]}, variants[k], 1, args.seeds, args.root);
    std::move(planned.begin(), planned.end(), std::back_inserter(runs));
  }
  run_all(runs, args.threads, data);

  const std::filesystem::path out = prepare_out(args);
  write_curves(runs, out / "tta_curves.csv");
  Json j;
  j["bench"] = "tta";
  j["model"] = fleets.front().config.job.model;
  j["job_seeds"] = args.seeds;
  j["fleet_draws"] = args.fleet_draws;
  j["steered"] = args.steered;
  j["settings"] = {{"file", args.settings},
                   {"oort", {{"name", settings.oort_name}, {"selection", settings.oort}}},
                   {"fedcase", {{"name", settings.fedcase_name}, {"selection", settings.fedcase}}}};
  j["bootstrap_resamples"] = args.bootstrap;
  Json per_model = Json::object();
  for (const std::string& model : models) {
    std::vector<const Fleet*> mine;
    size_t k0 = 0;
    for (size_t k = 0; k < fleets.size(); ++k) {
      if (fleets[k].model != model) continue;
      if (mine.empty()) k0 = k;
      mine.push_back(&fleets[k]);
      write_file(out / ("tta_" + model + "_" + std::to_string(fleets[k].fleet_seed) + ".svg"),
                 svg_plot(runs, fleets[k], variants[k]));
    }
    per_model[model] = model_report(runs, mine, variants[k0], args);
  }
  j["fleet_models"] = per_model;
  add_costs(j, start);
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
