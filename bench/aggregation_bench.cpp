// Aggregation throughput and memory: streaming FedAvg against memcpy bandwidth measured in the
// same run, central-DP FedAvg, a hold-all-then-average baseline, and the buffered robust rules.
//
//   aggregation_bench [--updates N] [--params P] [--threads T]
//                     [--robust-updates N] [--robust-params P]
//
// Defaults: N = 100 updates of P = 10M float32 parameters on T = 2 threads; the robust rules
// run on N updates of P / 10 parameters (Krum's pairwise distances cost N^2 / 2 * P).
//
// Bandwidth: GB/s is bytes of update data folded (or copied) per second, 1 GB = 1e9 bytes.
// memcpy runs on the same WorkerPool with the same thread count, interleaved with the folds so
// both see the same machine; it and each fold read a different input, last touched several
// 40 MB streams earlier, so neither reads from cache.
//
// Memory: before each phase the kernel's peak-RSS counter is reset (writing 5 to
// /proc/self/clear_refs) and VmRSS is read; after it, VmHWM minus that baseline is the phase's
// peak. Inputs are allocated before the baseline (they stand for the decoded upload), so the
// figure is what the aggregation itself holds. Allocations of 1 MiB and more are mmapped
// (mallopt), so freed buffers return to the OS and cannot hide the next phase's growth.
// The last line of output is one JSON object with every figure.

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "aggregation/aggregator.h"
#include "aggregation/fedavg.h"
#include "aggregation/vector_ops.h"
#include "aggregation/worker_pool.h"
#include "bench/peak_probe.h"
#include "bench/synthetic_update.h"

namespace {

using fedcase::BlobView;
using fedcase::ModelBlob;
using fedcase::ModelLayout;
using fedcase::encode_blob;
using fedcase::encode_blob_quantized;
using fedcase::encode_blob_sparse;
using fedcase::view_blob;
using fedcase::aggregation::Aggregator;
using fedcase::aggregation::kMinParallelRange;
using fedcase::aggregation::StreamingFedAvg;
using fedcase::aggregation::WorkerPool;
using fedcase::bench::fill_update;
using fedcase::bench::PeakProbe;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

struct Options {
  size_t updates = 100;
  size_t params = 10'000'000;
  size_t threads = 2;
  size_t robust_updates = 0;  // 0: same as updates
  size_t robust_params = 0;   // 0: params / 10
};

constexpr size_t kDistinctInputs = 4;  // fedavg inputs, cycled; each larger than the L3 cache
constexpr double kGB = 1e9;

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    size_t* target = flag == "--updates"          ? &o.updates
                     : flag == "--params"         ? &o.params
                     : flag == "--threads"        ? &o.threads
                     : flag == "--robust-updates" ? &o.robust_updates
                     : flag == "--robust-params"  ? &o.robust_params
                                                  : nullptr;
    if (target == nullptr || i + 1 >= argc) return std::nullopt;
    char* end = nullptr;
    const unsigned long long value = std::strtoull(argv[++i], &end, 10);
    if (*end != '\0' || value == 0) return std::nullopt;
    *target = static_cast<size_t>(value);
  }
  if (o.robust_updates == 0) o.robust_updates = o.updates;
  if (o.robust_params == 0) o.robust_params = std::max<size_t>(1, o.params / 10);
  return o;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double time_it(const std::function<void()>& work) {
  const auto start = Clock::now();
  work();
  return seconds_since(start);
}

std::vector<std::vector<float>> make_updates(size_t count, size_t params, uint64_t seed) {
  std::vector<std::vector<float>> updates(count, std::vector<float>(params));
  for (size_t i = 0; i < count; ++i) fill_update(updates[i], seed + i);
  return updates;
}

double weight_of(size_t i) { return 50.0 + static_cast<double>(i % 7) * 25.0; }

Json peak_json(const PeakProbe& probe, size_t model_bytes) {
  Json j;
  if (auto peak = probe.peak_bytes()) {
    j["peak_bytes"] = *peak;
    j["peak_models"] = static_cast<double>(*peak) / static_cast<double>(model_bytes);
  } else {
    j["peak_bytes"] = nullptr;
    j["peak_models"] = nullptr;
  }
  return j;
}

std::string models_text(const Json& j) {
  if (j["peak_models"].is_null()) return "peak n/a";
  char text[64];
  std::snprintf(text, sizeof(text), "peak %.2f models", j["peak_models"].get<double>());
  return text;
}

// Streaming FedAvg folds, each preceded by a memcpy of another input of the same size.
Json run_fedavg(const Options& o, const std::vector<std::vector<float>>& inputs,
                std::vector<float>& copy_target, WorkerPool& copy_pool) {
  const size_t bytes = o.params * sizeof(float);
  double copy_seconds = 0, fold_seconds = 0, mean_seconds = 0;
  PeakProbe probe;
  {
    StreamingFedAvg avg(o.params, o.threads);
    for (size_t i = 0; i < o.updates; ++i) {
      const float* copy_source = inputs[(i + 2) % inputs.size()].data();
      copy_seconds += time_it([&] {
        copy_pool.for_ranges(o.params, kMinParallelRange, [&](size_t, size_t b, size_t e) {
          std::memcpy(copy_target.data() + b, copy_source + b, (e - b) * sizeof(float));
        });
      });
      const float* update = inputs[i % inputs.size()].data();
      fold_seconds += time_it([&] {
        if (!avg.add(update, o.params, weight_of(i)).ok()) std::abort();
      });
    }
    mean_seconds = time_it([&] {
      if (!avg.mean().ok()) std::abort();
    });
  }
  const double total = static_cast<double>(bytes) * static_cast<double>(o.updates);
  Json j;
  j["memcpy_gbps"] = total / copy_seconds / kGB;
  j["fold_gbps"] = total / fold_seconds / kGB;
  j["ratio_to_memcpy"] = copy_seconds / fold_seconds;
  j["with_mean_gbps"] = total / (fold_seconds + mean_seconds) / kGB;
  j["mean_seconds"] = mean_seconds;
  j.update(peak_json(probe, bytes));
  return j;
}

// One Aggregator from `config` fed `count` updates; add and result timed separately.
Json run_aggregator(const nlohmann::json& config, size_t params, size_t count,
                    const std::function<const float*(size_t)>& update_at) {
  const size_t bytes = params * sizeof(float);
  double add_seconds = 0, result_seconds = 0;
  PeakProbe probe;
  {
    auto agg = fedcase::aggregation::make_aggregator(config, params);
    if (!agg.ok()) {
      std::cerr << agg.status().to_string() << "\n";
      std::abort();
    }
    for (size_t i = 0; i < count; ++i) {
      const float* update = update_at(i);
      add_seconds += time_it([&] {
        if (!(*agg)->add(update, params, weight_of(i)).ok()) std::abort();
      });
    }
    result_seconds = time_it([&] {
      auto r = (*agg)->result();
      if (!r.ok()) {
        std::cerr << r.status().to_string() << "\n";
        std::abort();
      }
    });
  }
  const double total = static_cast<double>(bytes) * static_cast<double>(count);
  Json j;
  j["add_gbps"] = total / add_seconds / kGB;
  j["result_seconds"] = result_seconds;
  j["gbps"] = total / (add_seconds + result_seconds) / kGB;
  j.update(peak_json(probe, bytes));
  return j;
}

// FedAvg fed compressed updates (`kind`: "q8" or "top_k" at 1%) as the coordinator takes them,
// straight from their blobs, each fold preceded by a memcpy of a dense update: bytes against
// float32, fold throughput in decoded bytes against memcpy, and peak memory.
Json run_compressed(const Options& o, const std::vector<std::vector<float>>& inputs,
                    std::vector<float>& copy_target, WorkerPool& copy_pool,
                    const std::string& kind) {
  const size_t bytes = o.params * sizeof(float);
  const ModelLayout layout{{{"w", {o.params}}}};
  std::vector<std::string> bodies;
  for (size_t i = 0; i < inputs.size(); ++i) {
    ModelBlob blob{0, layout, inputs[i]};
    if (kind == "q8") {
      bodies.push_back(encode_blob_quantized(blob, 256, i));
    } else {
      std::vector<uint32_t> kept;  // every 100th value: the size of a top-1% update
      for (uint32_t k = uint32_t(i); k < o.params; k += 100) kept.push_back(k);
      bodies.push_back(encode_blob_sparse(blob, kept));
    }
  }
  double copy_seconds = 0, fold_seconds = 0;
  PeakProbe probe;
  {
    auto agg = fedcase::aggregation::make_aggregator(
        nlohmann::json{{"rule", "fedavg"}, {"threads", o.threads}}, o.params);
    if (!agg.ok()) std::abort();
    BlobView view;
    for (size_t i = 0; i < o.updates; ++i) {
      const float* copy_source = inputs[(i + 2) % inputs.size()].data();
      copy_seconds += time_it([&] {
        copy_pool.for_ranges(o.params, kMinParallelRange, [&](size_t, size_t b, size_t e) {
          std::memcpy(copy_target.data() + b, copy_source + b, (e - b) * sizeof(float));
        });
      });
      const std::string& body = bodies[i % bodies.size()];
      fold_seconds += time_it([&] {
        if (!view_blob(body, body.size(), view).ok()) std::abort();
        if (!(*agg)->add(view, weight_of(i), 1.0).ok()) std::abort();
      });
    }
    if (!(*agg)->result().ok()) std::abort();
  }
  const double total = static_cast<double>(bytes) * static_cast<double>(o.updates);
  Json j;
  j["bytes_ratio"] = double(bodies[0].size()) / double(encode_blob({0, layout, inputs[0]}).size());
  j["memcpy_gbps"] = total / copy_seconds / kGB;
  j["fold_gbps"] = total / fold_seconds / kGB;  // decoded bytes, checks included
  j["ratio_to_memcpy"] = copy_seconds / fold_seconds;
  j.update(peak_json(probe, bytes));
  return j;
}

// The way frameworks that keep every result do it: copy all N updates, then average them.
Json run_hold_all(const Options& o, const std::vector<std::vector<float>>& inputs,
                  WorkerPool& pool) {
  const size_t bytes = o.params * sizeof(float);
  PeakProbe probe;
  const double seconds = time_it([&] {
    std::vector<std::vector<float>> held;
    held.reserve(o.updates);
    double total_weight = 0;
    for (size_t i = 0; i < o.updates; ++i) {
      const float* update = inputs[i % inputs.size()].data();
      held.emplace_back(update, update + o.params);
      total_weight += weight_of(i);
    }
    std::vector<float> mean(o.params);
    pool.for_ranges(o.params, kMinParallelRange, [&](size_t, size_t b, size_t e) {
      for (size_t i = 0; i < held.size(); ++i) {
        const float a = static_cast<float>(weight_of(i) / total_weight);
        if (i == 0) {
          fedcase::aggregation::scale_copy(mean.data() + b, held[i].data() + b, a, e - b);
        } else {
          fedcase::aggregation::scale_add(mean.data() + b, held[i].data() + b, a, e - b);
        }
      }
    });
  });
  Json j;
  j["gbps"] = static_cast<double>(bytes) * static_cast<double>(o.updates) / seconds / kGB;
  j["seconds"] = seconds;
  j.update(peak_json(probe, bytes));
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  const auto options = parse_options(argc, argv);
  if (!options) {
    std::cerr << "usage: aggregation_bench [--updates N] [--params P] [--threads T]"
                 " [--robust-updates N] [--robust-params P]   (all positive integers)\n";
    return 2;
  }
  const Options& o = *options;
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  const auto start = Clock::now();
  const size_t model_bytes = o.params * sizeof(float);

  std::cout << "aggregation_bench: " << o.updates << " updates x " << o.params
            << " float32 params (" << model_bytes / 1e6 << " MB per model), " << o.threads
            << " threads, " << std::thread::hardware_concurrency() << " hardware threads\n";

  const auto inputs = make_updates(kDistinctInputs, o.params, 1);
  std::vector<float> copy_target(o.params, 0.0f);
  WorkerPool pool(o.threads);

  Json fedavg = run_fedavg(o, inputs, copy_target, pool);
  std::printf("memcpy          %7.2f GB/s (same pool, %zu threads)\n",
              fedavg["memcpy_gbps"].get<double>(), o.threads);
  std::printf("fedavg fold     %7.2f GB/s = %.2fx memcpy; with mean() %.2f GB/s; %s\n",
              fedavg["fold_gbps"].get<double>(), fedavg["ratio_to_memcpy"].get<double>(),
              fedavg["with_mean_gbps"].get<double>(), models_text(fedavg).c_str());

  const nlohmann::json dp_config = {{"rule", "fedavg"},
                                    {"clip_norm", 10.0},
                                    {"dp_noise_multiplier", 1.0},
                                    {"dp_seed", 7},
                                    {"threads", o.threads}};
  Json fedavg_dp = run_aggregator(dp_config, o.params, o.updates,
                                  [&](size_t i) { return inputs[i % inputs.size()].data(); });
  std::printf("fedavg+clip+dp  %7.2f GB/s add, noise+mean %.3f s; %s\n",
              fedavg_dp["add_gbps"].get<double>(), fedavg_dp["result_seconds"].get<double>(),
              models_text(fedavg_dp).c_str());

  Json compressed;
  for (const char* kind : {"q8", "top_k"}) {
    Json c = run_compressed(o, inputs, copy_target, pool, kind);
    std::printf("fedavg %-8s %7.2f GB/s decoded = %.2fx memcpy; %.3fx the float32 bytes; %s\n",
                kind, c["fold_gbps"].get<double>(), c["ratio_to_memcpy"].get<double>(),
                c["bytes_ratio"].get<double>(), models_text(c).c_str());
    compressed[kind] = c;
  }

  Json hold_all = run_hold_all(o, inputs, pool);
  std::printf("hold-all mean   %7.2f GB/s (copy all, then average); %s\n",
              hold_all["gbps"].get<double>(), models_text(hold_all).c_str());

  const size_t rn = o.robust_updates, rp = o.robust_params;
  std::cout << "robust rules on " << rn << " updates x " << rp
            << " params (Krum costs N^2/2 x P)\n";
  const auto robust_inputs = make_updates(rn, rp, 1000);
  const size_t f = rn >= 5 ? std::min<size_t>(rn / 10 + 1, (rn - 3) / 2) : 0;
  Json robust;
  robust["updates"] = rn;
  robust["params"] = rp;
  robust["byzantine_f"] = f;
  const std::vector<std::pair<std::string, nlohmann::json>> rules = {
      {"median", {{"rule", "median"}}},
      {"trimmed_mean", {{"rule", "trimmed_mean"}, {"trim_beta", 0.1}}},
      {"krum", {{"rule", "krum"}, {"byzantine_f", f}}},
      {"multi_krum", {{"rule", "multi_krum"}, {"byzantine_f", f}}},
  };
  for (const auto& [name, base] : rules) {
    if (rn < 2 * f + 3 && (name == "krum" || name == "multi_krum")) continue;
    nlohmann::json config = base;
    config["threads"] = o.threads;
    config["max_buffered_updates"] = rn;
    Json r = run_aggregator(config, rp, rn, [&](size_t i) { return robust_inputs[i].data(); });
    std::printf("%-15s %7.2f GB/s overall (add %.2f GB/s, result %.3f s); %s\n", name.c_str(),
                r["gbps"].get<double>(), r["add_gbps"].get<double>(),
                r["result_seconds"].get<double>(), models_text(r).c_str());
    robust[name] = r;
  }

  const double ratio = fedavg["ratio_to_memcpy"].get<double>();
  const bool peak_known = !fedavg["peak_models"].is_null();
  const bool ratio_ok = ratio >= 0.8;
  const bool peak_ok = peak_known && fedavg["peak_models"].get<double>() < 3.0;
  std::printf("targets: fedavg >= 0.8x memcpy: %s; fedavg peak < 3 models: %s; %.1f s total\n",
              ratio_ok ? "met" : "missed", peak_known ? (peak_ok ? "met" : "missed") : "unknown",
              seconds_since(start));

  Json out;
  out["bench"] = "aggregation";
  out["updates"] = o.updates;
  out["params"] = o.params;
  out["model_bytes"] = model_bytes;
  out["threads"] = o.threads;
  out["hardware_threads"] = std::thread::hardware_concurrency();
  out["memcpy_gbps"] = fedavg["memcpy_gbps"];
  out["fedavg"] = fedavg;
  out["fedavg_dp"] = fedavg_dp;
  out["compressed"] = compressed;
  out["hold_all"] = hold_all;
  out["robust"] = robust;
  out["targets"] = {{"fedavg_ratio_min", 0.8},
                    {"fedavg_ratio_met", ratio_ok},
                    {"fedavg_peak_models_max", 3.0},
                    {"fedavg_peak_met", peak_ok}};
  out["seconds"] = seconds_since(start);
  std::cout << out.dump() << std::endl;
  return 0;
}
