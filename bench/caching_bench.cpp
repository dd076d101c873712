// Client-side sampling and caching on Fashion-MNIST with real training: hit ratio and I/O time
// of the importance-aware cache against LRU and no cache at equal capacity and equal
// repetition factor, and test accuracy of each pipeline after the same number of rounds.
//
//   caching_bench [--clients N] [--rounds N] [--samples-per-client N] [--alpha A]
//                 [--model cnn|mlp] [--lr X] [--momentum X] [--batch-size N]
//                 [--sample-bytes N] [--read-mbps M] [--read-latency-ms L]
//                 [--cache-fraction F] [--repetition-factor R] [--seed S] [--seeds K]
//                 [--threads T] [--eval-samples N] [--no-sleep] [--data-dir DIR]
//
// Defaults: 4 clients, 8 rounds, a Dirichlet(1.0) split of the first 4 x 1500 training
// samples, the CNN with lr 0.05 and momentum 0.9 (the demo job's settings), batches of 32,
// one epoch's worth of samples per round, 784-byte samples on a 10 MB/s device with 0.1 ms per
// read, caches of 10% of each client's samples, 5 seeds (S .. S+K-1: partition, model
// initialisation, sampling), 2 worker threads. Every cache runs at repetition factor 1 and at
// R (default 4). Hit ratios and I/O pool all client rounds of all seeds; accuracy is reported
// as the mean over seeds with its min and max.
//
// Each configuration runs the same federated training in process: every round, each client
// starts from the global model, trains through its own LocalData with the SDK's built-in
// trainer (a record file in a temporary directory read through the emulated device, its cache
// and sampler kept across rounds), and the global model becomes the sample-weighted average
// (FedAvg) of the clients' models.
//   uniform/none           the baseline: shuffled epochs, every sample read from the device
//   importance/none        SHADE sampling, every sample read from the device: the control for
//                          the accuracy effect of reuse
//   uniform/lru@R          shuffled epochs through an LRU cache, the references' LRU baseline
//   importance/lru@R       SHADE sampling through an LRU cache (the same draws as below)
//   importance/importance@R  SHADE sampling through the importance cache
// At R > 1 every cache repeats its hits in place of misses the same way (the read plan's
// plan_reuse); at R = 1 a cache changes only I/O, never training, so importance/lru@1 and
// importance/importance@1 train as importance/none does. The accuracy is the global model's on
// the first --eval-samples test samples after the last round. I/O seconds are the emulated
// device time per client and round; the device also sleeps it out unless --no-sleep. The last
// line of output is one JSON object with every figure.

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "client_sdk/builtin_trainer.h"
#include "client_sdk/local_data.h"
#include "client_sdk/record_file.h"
#include "ml/dataset.h"
#include "ml/model.h"

namespace {

using fedcase::client::CachePolicy;
using fedcase::client::DataDirectives;
using fedcase::client::LocalData;
using fedcase::client::LocalDataConfig;
using fedcase::client::RoundStats;
using fedcase::client::Sampling;
using Json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

struct Options {
  size_t clients = 4;
  size_t rounds = 8;
  size_t samples_per_client = 1500;
  double alpha = 1.0;
  std::string model = "cnn";
  double lr = 0.05;
  double momentum = 0.9;
  size_t batch_size = 32;
  uint64_t sample_bytes = 784;
  double read_mbps = 10;
  double read_latency_ms = 0.1;
  double cache_fraction = 0.1;
  double repetition_factor = 4;
  uint64_t seed = 1;
  size_t seeds = 5;
  unsigned threads = 2;
  size_t eval_samples = 10000;
  bool sleep = true;
  std::string data_dir = fedcase::ml::kDefaultFashionMnistDir;
};

struct Config {
  std::string name;
  Sampling sampling;
  CachePolicy policy;
  double repetition_factor;
};

struct Totals {
  uint64_t samples = 0, hits = 0, misses = 0, reused = 0, bytes = 0;
  double io_s = 0, compute_s = 0;
  size_t client_rounds = 0;
  static Totals of(const RoundStats& r) {
    return {r.samples,    r.cache_hits, r.cache_misses, r.reused,
            r.bytes_read, r.io_s,       r.compute_s,    1};
  }
  double hit_ratio() const { return hits + misses ? double(hits) / double(hits + misses) : 0; }
  double io_per_round() const { return client_rounds ? io_s / double(client_rounds) : 0; }
  void add(const Totals& t) {
    samples += t.samples;
    hits += t.hits;
    misses += t.misses;
    reused += t.reused;
    bytes += t.bytes;
    io_s += t.io_s;
    compute_s += t.compute_s;
    client_rounds += t.client_rounds;
  }
};

// One configuration's figures, pooled over the seeds it ran with.
struct Outcome {
  Totals all, warm;                    // warm: rounds after the first
  std::vector<double> round_accuracy;  // summed over seeds
  std::vector<double> accuracies;      // one per seed
  double run_s = 0;                    // the runs' own durations, summed (they run side by side)
  void add(const Outcome& o) {
    all.add(o.all);
    warm.add(o.warm);
    round_accuracy.resize(o.round_accuracy.size());
    for (size_t r = 0; r < o.round_accuracy.size(); ++r) round_accuracy[r] += o.round_accuracy[r];
    accuracies.insert(accuracies.end(), o.accuracies.begin(), o.accuracies.end());
    run_s += o.run_s;
  }
  double accuracy() const {
    double sum = 0;
    for (double a : accuracies) sum += a;
    return accuracies.empty() ? 0 : sum / double(accuracies.size());
  }
  double min_accuracy() const {
    return accuracies.empty() ? 0 : *std::min_element(accuracies.begin(), accuracies.end());
  }
  double max_accuracy() const {
    return accuracies.empty() ? 0 : *std::max_element(accuracies.begin(), accuracies.end());
  }
  std::vector<double> mean_round_accuracy() const {
    std::vector<double> out = round_accuracy;
    for (double& a : out) a /= double(std::max<size_t>(1, accuracies.size()));
    return out;
  }
};

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--no-sleep") {
        o.sleep = false;
        continue;
      }
      if (i + 1 >= argc) return std::nullopt;
      const std::string v = argv[++i];
      if (flag == "--clients")
        o.clients = std::stoul(v);
      else if (flag == "--rounds")
        o.rounds = std::stoul(v);
      else if (flag == "--samples-per-client")
        o.samples_per_client = std::stoul(v);
      else if (flag == "--alpha")
        o.alpha = std::stod(v);
      else if (flag == "--model")
        o.model = v;
      else if (flag == "--lr")
        o.lr = std::stod(v);
      else if (flag == "--momentum")
        o.momentum = std::stod(v);
      else if (flag == "--batch-size")
        o.batch_size = std::stoul(v);
      else if (flag == "--sample-bytes")
        o.sample_bytes = std::stoull(v);
      else if (flag == "--read-mbps")
        o.read_mbps = std::stod(v);
      else if (flag == "--read-latency-ms")
        o.read_latency_ms = std::stod(v);
      else if (flag == "--cache-fraction")
        o.cache_fraction = std::stod(v);
      else if (flag == "--repetition-factor")
        o.repetition_factor = std::stod(v);
      else if (flag == "--seed")
        o.seed = std::stoull(v);
      else if (flag == "--seeds")
        o.seeds = std::stoul(v);
      else if (flag == "--threads")
        o.threads = unsigned(std::stoul(v));
      else if (flag == "--eval-samples")
        o.eval_samples = std::stoul(v);
      else if (flag == "--data-dir")
        o.data_dir = v;
      else
        return std::nullopt;
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (o.clients == 0 || o.rounds == 0 || o.samples_per_client == 0 || o.batch_size == 0 ||
      o.seeds == 0 || o.threads == 0 || o.repetition_factor < 1 || o.cache_fraction < 0 ||
      o.cache_fraction > 1) {
    return std::nullopt;
  }
  return o;
}

// A run that cannot go on throws; the workers hand the first failure to main.
[[noreturn]] void fail(const fedcase::Status& status) {
  throw std::runtime_error(status.to_string());
}

// Runs the federated training of one configuration with one seed; every client keeps its
// LocalData (and so its cache and sampler) across rounds.
Outcome run(const Config& config, const Options& o, uint64_t seed,
            const fedcase::ml::Dataset& train, const std::vector<std::vector<size_t>>& parts,
            const fedcase::ml::Dataset& test, const std::filesystem::path& dir) {
  const auto start = Clock::now();
  const std::filesystem::path run_dir = dir / ("seed-" + std::to_string(seed)) / config.name;
  std::vector<std::unique_ptr<fedcase::client::RecordFile>> sources;
  std::vector<std::unique_ptr<LocalData>> clients;
  std::vector<DataDirectives> directives;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::filesystem::path client_dir = run_dir / ("client-" + std::to_string(i));
    std::vector<std::string> records;
    for (size_t k : parts[i]) records.push_back(fedcase::client::fashion_record(train, k));
    fedcase::client::MemorySource memory(std::move(records));
    std::filesystem::create_directories(client_dir);
    fedcase::client::StorageEmulation device;
    device.read_bytes_per_s = o.read_mbps * 1e6;
    device.read_latency_s = o.read_latency_ms / 1e3;
    device.sleep = o.sleep;
    auto source = fedcase::client::record_file_of(
        (client_dir / "samples.bin").string(), memory,
        std::max<uint64_t>(o.sample_bytes, memory.sample_bytes(0)), device);
    if (!source.ok()) fail(source.status());
    LocalDataConfig c;
    c.source = source->get();
    c.sampler.seed = seed * 1000003 + i;
    c.state_dir = client_dir.string();
    auto local = LocalData::open(std::move(c));
    if (!local.ok()) fail(local.status());
    DataDirectives d;
    d.sampling = config.sampling;
    d.sample_budget = parts[i].size();
    d.cache_policy = config.policy;
    d.cache_budget_bytes =
        uint64_t(o.cache_fraction * double(parts[i].size())) * (*source)->record_bytes();
    d.repetition_factor = config.repetition_factor;
    directives.push_back(d);
    sources.push_back(std::move(source).value());
    clients.push_back(std::move(local).value());
  }
  auto model = fedcase::ml::Model::create(o.model, seed);
  if (!model.ok()) fail(model.status());
  std::vector<float> global = model->parameters();
  auto trainer = fedcase::client::make_builtin_trainer(seed);
  const fedcase::Status prepared =
      trainer->prepare({o.model, "cross_entropy", nullptr, model->layout()});
  if (!prepared.ok()) fail(prepared);
  fedcase::client::TrainSettings settings;
  settings.batch_size = o.batch_size;
  settings.lr = o.lr;
  settings.momentum = o.momentum;

  Outcome out;
  for (size_t round = 0; round < o.rounds; ++round) {
    std::vector<double> sum(global.size(), 0.0);
    double weight = 0;
    for (size_t i = 0; i < clients.size(); ++i) {
      auto trained = clients[i]->train_round(*trainer, global, settings, directives[i]);
      if (!trained.ok()) fail(trained.status());
      const RoundStats& stats = trained->stats;
      out.all.add(Totals::of(stats));
      if (round > 0) out.warm.add(Totals::of(stats));
      const std::vector<float>& params = trained->parameters;
      for (size_t k = 0; k < params.size(); ++k)
        sum[k] += double(params[k]) * double(stats.samples);
      weight += double(stats.samples);
    }
    for (size_t k = 0; k < global.size(); ++k) global[k] = float(sum[k] / weight);
    if (auto set = model->set_parameters(global); !set.ok()) fail(set);
    out.round_accuracy.push_back(
        model->evaluate(test, std::min<size_t>(o.eval_samples, 2000)).accuracy);
  }
  out.accuracies.push_back(model->evaluate(test, o.eval_samples).accuracy);
  out.run_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::error_code ec;
  std::filesystem::remove_all(run_dir, ec);
  return out;
}

Json totals_json(const Totals& t) {
  return Json{{"samples", t.samples},
              {"cache_hits", t.hits},
              {"cache_misses", t.misses},
              {"reused", t.reused},
              {"hit_ratio", t.hit_ratio()},
              {"bytes_read", t.bytes},
              {"io_s_per_round", t.io_per_round()},
              {"compute_s", t.compute_s}};
}

}  // namespace

int main(int argc, char** argv) {
  const auto parsed = parse_options(argc, argv);
  if (!parsed) {
    std::cerr << "usage: caching_bench [--clients N] [--rounds N] [--samples-per-client N]\n"
                 "                     [--alpha A] [--model cnn|mlp] [--lr X] [--momentum X]\n"
                 "                     [--batch-size N] [--sample-bytes N] [--read-mbps M]\n"
                 "                     [--read-latency-ms L] [--cache-fraction F]\n"
                 "                     [--repetition-factor R] [--seed S] [--seeds K]\n"
                 "                     [--threads T] [--eval-samples N] [--no-sleep]\n"
                 "                     [--data-dir DIR]\n";
    return 2;
  }
  const Options& o = *parsed;
  auto full = fedcase::ml::load_fashion_mnist(o.data_dir, fedcase::ml::Split::kTrain);
  auto test = fedcase::ml::load_fashion_mnist(o.data_dir, fedcase::ml::Split::kTest);
  if (!full.ok() || !test.ok()) {
    std::cerr << "caching_bench: " << (full.ok() ? test.status() : full.status()).to_string()
              << "\n";
    return 1;
  }
  const fedcase::ml::Dataset train = fedcase::ml::head(*full, o.clients * o.samples_per_client);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    ("fedcase-caching-bench-" + std::to_string(::getpid()));

  std::vector<Config> configs = {{"uniform/none", Sampling::kUniform, CachePolicy::kNone, 1},
                                 {"importance/none", Sampling::kImportance, CachePolicy::kNone, 1}};
  // A cached draw serves floor(R) reads (plan_reuse): R = 4.5 runs, and is named, as 4.
  const double factor = std::floor(o.repetition_factor);
  char r_name[32];
  for (double r : {1.0, factor}) {
    std::snprintf(r_name, sizeof(r_name), "@%g", r);
    configs.push_back(
        {std::string("uniform/lru") + r_name, Sampling::kUniform, CachePolicy::kLru, r});
    configs.push_back(
        {std::string("importance/lru") + r_name, Sampling::kImportance, CachePolicy::kLru, r});
    configs.push_back({std::string("importance/importance") + r_name, Sampling::kImportance,
                       CachePolicy::kImportance, r});
    if (factor == 1) break;
  }
  auto index_of = [&](const std::string& name) {
    for (size_t k = 0; k < configs.size(); ++k) {
      if (configs[k].name == name) return k;
    }
    std::abort();
  };
  std::printf(
      "caching_bench: %zu clients x %zu rounds, %zu samples each (Dirichlet %.2f), %s, "
      "%llu-byte samples at %.1f MB/s + %.2f ms per read, caches of %.0f%% of the "
      "local samples, repetition factors 1 and %g, %zu seed(s) from %llu\n\n",
      o.clients, o.rounds, o.samples_per_client, o.alpha, o.model.c_str(),
      static_cast<unsigned long long>(o.sample_bytes), o.read_mbps, o.read_latency_ms,
      o.cache_fraction * 100, factor, o.seeds, static_cast<unsigned long long>(o.seed));

  // Every (seed, configuration) run is independent: spread them over the workers, then pool
  // each configuration's runs in seed order.
  std::vector<std::vector<std::vector<size_t>>> parts;
  for (size_t k = 0; k < o.seeds; ++k) {
    auto p = fedcase::ml::dirichlet_partition(train.labels, o.clients, o.alpha, o.seed + k);
    if (!p.ok()) {
      std::cerr << "caching_bench: " << p.status().to_string() << "\n";
      return 1;
    }
    parts.push_back(std::move(p).value());
  }
  const auto started = Clock::now();
  std::vector<Outcome> per_run(o.seeds * configs.size());
  std::atomic<size_t> next{0}, done{0};
  std::mutex failure_mu;
  std::string failure;
  auto worker = [&] {
    fedcase::ml::set_torch_threads(1);
    for (size_t i; (i = next++) < per_run.size();) {
      const size_t seed_index = i / configs.size();
      const Config& c = configs[i % configs.size()];
      try {
        per_run[i] = run(c, o, o.seed + seed_index, train, parts[seed_index], *test, dir);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(failure_mu);
        if (failure.empty()) failure = c.name + ": " + e.what();
        next = per_run.size();
        return;
      }
      std::fprintf(stderr, "[%zu/%zu] %s seed %llu: accuracy %.4f (%.0f s)\n", ++done,
                   per_run.size(), c.name.c_str(),
                   static_cast<unsigned long long>(o.seed + seed_index),
                   per_run[i].accuracies.front(), per_run[i].run_s);
    }
  };
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < o.threads; ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  const double wall_s = std::chrono::duration<double>(Clock::now() - started).count();
  std::error_code ec;
  if (!failure.empty()) {
    std::filesystem::remove_all(dir, ec);
    std::cerr << "caching_bench: " << failure << "\n";
    return 1;
  }
  std::vector<Outcome> outcomes(configs.size());
  for (size_t i = 0; i < per_run.size(); ++i) outcomes[i % configs.size()].add(per_run[i]);
  std::filesystem::remove_all(dir, ec);

  std::printf("%-26s %7s %8s %8s %9s %9s %23s %8s\n", "sampling/cache@R", "hit", "warm hit",
              "reused", "io s/rnd", "warm io s", "accuracy mean (min-max)", "run s");
  for (size_t c = 0; c < configs.size(); ++c) {
    const Outcome& r = outcomes[c];
    std::printf("%-26s %7.3f %8.3f %8llu %9.4f %9.4f %9.4f (%.4f-%.4f) %8.1f\n",
                configs[c].name.c_str(), r.all.hit_ratio(), r.warm.hit_ratio(),
                static_cast<unsigned long long>(r.all.reused), r.all.io_per_round(),
                r.warm.io_per_round(), r.accuracy(), r.min_accuracy(), r.max_accuracy(), r.run_s);
  }

  const Outcome& uniform = outcomes[index_of("uniform/none")];
  const Outcome& none = outcomes[index_of("importance/none")];
  auto ratio = [](double a, double b) {
    return b > 0 ? a / b : std::numeric_limits<double>::infinity();
  };
  // Per repetition factor: the importance cache against each LRU, and the stronger LRU (the
  // higher hit ratio) for the targets.
  Json comparisons = Json::object();
  bool hit_target = true, io_target = true, accuracy_target = true;
  std::printf("\n");
  for (const Config& c : configs) {
    if (c.policy != CachePolicy::kImportance) continue;
    char at[32];
    std::snprintf(at, sizeof(at), "@%g", c.repetition_factor);
    const Outcome& imp = outcomes[index_of(c.name)];
    const Outcome& lru_uniform = outcomes[index_of(std::string("uniform/lru") + at)];
    const Outcome& lru_same = outcomes[index_of(std::string("importance/lru") + at)];
    const Outcome& lru =
        lru_same.all.hit_ratio() >= lru_uniform.all.hit_ratio() ? lru_same : lru_uniform;
    const double hit_vs_lru = ratio(imp.all.hit_ratio(), lru.all.hit_ratio());
    const double io_vs_lru = ratio(lru.all.io_per_round(), imp.all.io_per_round());
    const double accuracy_delta = 100 * (imp.accuracy() - none.accuracy());
    hit_target = hit_target && hit_vs_lru >= 2;
    io_target = io_target && io_vs_lru >= 1.5;
    accuracy_target = accuracy_target && accuracy_delta >= -1;
    comparisons[std::string("R") + (at + 1)] = {
        {"hit_ratio_vs_uniform_lru", ratio(imp.all.hit_ratio(), lru_uniform.all.hit_ratio())},
        {"hit_ratio_vs_importance_lru", ratio(imp.all.hit_ratio(), lru_same.all.hit_ratio())},
        {"hit_ratio_vs_stronger_lru", hit_vs_lru},
        {"io_reduction_vs_uniform_lru",
         ratio(lru_uniform.all.io_per_round(), imp.all.io_per_round())},
        {"io_reduction_vs_importance_lru",
         ratio(lru_same.all.io_per_round(), imp.all.io_per_round())},
        {"io_reduction_vs_stronger_lru", io_vs_lru},
        {"io_reduction_vs_none", ratio(none.all.io_per_round(), imp.all.io_per_round())},
        {"accuracy_delta_vs_importance_none_points", accuracy_delta},
        {"accuracy_delta_vs_uniform_none_points", 100 * (imp.accuracy() - uniform.accuracy())}};
    std::printf(
        "R = %g: importance cache hit ratio %.3f vs LRU %.3f (uniform reads) / %.3f (importance "
        "reads): %.2fx the stronger (target >= 2x); I/O per client round %.4f s vs %.4f s: "
        "%.2fx lower (target >= 1.5x), %.2fx lower than no cache; accuracy %+.2f points vs "
        "importance/none (target >= -1)\n",
        c.repetition_factor, imp.all.hit_ratio(), lru_uniform.all.hit_ratio(),
        lru_same.all.hit_ratio(), hit_vs_lru, imp.all.io_per_round(), lru.all.io_per_round(),
        io_vs_lru, ratio(none.all.io_per_round(), imp.all.io_per_round()), accuracy_delta);
  }
  const double train_rate = double(uniform.all.samples) / uniform.all.compute_s;
  const double read_cost_s = o.read_latency_ms / 1e3 + double(o.sample_bytes) / (o.read_mbps * 1e6);
  std::printf("Per-round accuracy (first %zu test samples, mean over seeds):\n",
              std::min<size_t>(o.eval_samples, 2000));
  for (size_t k = 0; k < configs.size(); ++k) {
    std::printf("  %-26s", configs[k].name.c_str());
    for (double a : outcomes[k].mean_round_accuracy()) std::printf(" %.3f", a);
    std::printf("\n");
  }
  std::printf(
      "Machine: training at %.0f samples/s on one thread; an emulated read costs %.1f us.\n",
      train_rate, read_cost_s * 1e6);

  Json result = {{"bench", "caching"},
                 {"clients", o.clients},
                 {"rounds", o.rounds},
                 {"samples_per_client", o.samples_per_client},
                 {"alpha", o.alpha},
                 {"model", o.model},
                 {"sample_bytes", o.sample_bytes},
                 {"read_bytes_per_s", o.read_mbps * 1e6},
                 {"read_latency_s", o.read_latency_ms / 1e3},
                 {"cache_fraction", o.cache_fraction},
                 {"repetition_factor", o.repetition_factor},
                 {"seed", o.seed},
                 {"seeds", o.seeds},
                 {"eval_samples", std::min(o.eval_samples, test->size())},
                 {"train_samples_per_s", train_rate},
                 {"read_cost_s", read_cost_s}};
  Json runs = Json::object();
  for (size_t k = 0; k < configs.size(); ++k) {
    const Outcome& r = outcomes[k];
    Json j = totals_json(r.all);
    j["warm"] = totals_json(r.warm);
    j["accuracy"] = r.accuracy();
    j["accuracy_per_seed"] = r.accuracies;
    j["round_accuracy"] = r.mean_round_accuracy();
    j["run_s"] = r.run_s;
    runs[configs[k].name] = j;
  }
  result["runs"] = runs;
  result["wall_s"] = wall_s;
  result["comparisons"] = comparisons;
  result["targets_met"] = {{"hit_ratio_2x_lru", hit_target},
                           {"io_1_5x_lower_than_lru", io_target},
                           {"accuracy_within_1_point_of_importance_none", accuracy_target}};
  std::cout << result.dump() << std::endl;
  return 0;
}
