#include "client_sdk/local_data.h"

#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "client_sdk/builtin_trainer.h"
#include "client_sdk/client_state.h"
#include "client_sdk/record_file.h"
#include "ml/model.h"
#include "tests/support/coordinator_harness.h"

using namespace fedcase;
using namespace fedcase::client;
using fedcase::testing::fmnist_train;
using fedcase::testing::TempDir;

namespace {

constexpr size_t kRecordBytes = 2048;
constexpr double kReadBytesPerS = 10e6;

// The records of `count` Fashion-MNIST training samples spread over the set.
std::vector<std::string> partition(size_t count = 600) {
  std::vector<std::string> records;
  for (size_t i = 0; i < count; ++i)
    records.push_back(fashion_record(fmnist_train(), i * 97 % 60000));
  return records;
}

std::unique_ptr<MemorySource> in_memory(size_t count = 600) {
  return std::make_unique<MemorySource>(partition(count));
}

// The partition in a record file of kRecordBytes records under `dir`, on an emulated 10 MB/s
// device that only accounts its time.
std::unique_ptr<RecordFile> on_device(const std::filesystem::path& dir, size_t count = 600) {
  MemorySource memory(partition(count));
  const std::string path = (dir / "samples.bin").string();
  REQUIRE(write_record_file(path, memory, kRecordBytes).ok());
  StorageEmulation device;
  device.read_bytes_per_s = kReadBytesPerS;
  device.sleep = false;
  auto file = RecordFile::open(path, device);
  REQUIRE(file.ok());
  return std::move(file).value();
}

std::unique_ptr<LocalData> open_local(SampleSource& source, const std::string& state_dir = "",
                                      uint64_t cache_capacity_bytes = 0) {
  LocalDataConfig c;
  c.source = &source;
  c.sampler.seed = 11;
  c.state_dir = state_dir;
  c.cache_capacity_bytes = cache_capacity_bytes;
  auto local = LocalData::open(std::move(c));
  REQUIRE_MESSAGE(local.ok(), local.status().to_string());
  return std::move(local).value();
}

// The built-in trainer prepared for the MLP, and the MLP's initial parameters.
struct Mlp {
  std::unique_ptr<Trainer> trainer = make_builtin_trainer();
  std::vector<float> parameters;
  Mlp() {
    ml::set_torch_threads(1);
    auto model = ml::Model::create("mlp", 5);
    REQUIRE(model.ok());
    parameters = model->parameters();
    REQUIRE(trainer->prepare({"mlp", "cross_entropy", nullptr, model->layout()}).ok());
  }
  // Trains one round and keeps the new parameters.
  RoundStats round(LocalData& local, const DataDirectives& d, TrainSettings settings = {32, 0.05}) {
    auto trained = local.train_round(*trainer, parameters, settings, d);
    REQUIRE_MESSAGE(trained.ok(), trained.status().to_string());
    parameters = trained->parameters;
    return trained->stats;
  }
};

DataDirectives importance_directives(CachePolicy policy) {
  DataDirectives d;
  d.sampling = Sampling::kImportance;
  d.sample_budget = 600;
  d.cache_policy = policy;
  d.cache_budget_bytes = 60 * kRecordBytes;  // 10% of the partition
  d.repetition_factor = 4;
  return d;
}

}  // namespace

TEST_CASE("a task's sampling, budget, epochs and cache become its data directives") {
  protocol::TaskOffer task;
  task.sampling = Sampling::kImportance;
  task.sample_budget = 500;
  task.train.epochs = 3;
  task.cache = {CachePolicy::kLru, 4096, 2.5, protocol::Repetition::kAdaptive};
  const DataDirectives d = data_directives(task);
  CHECK(d.sampling == Sampling::kImportance);
  CHECK(d.sample_budget == 500);
  CHECK(d.epochs == 3);
  CHECK(d.cache_policy == CachePolicy::kLru);
  CHECK(d.cache_budget_bytes == 4096);
  CHECK(d.repetition_factor == 2.5);
  CHECK(d.repetition == protocol::Repetition::kAdaptive);
}

TEST_CASE("adaptive directives repeat each round's hits by the artifact's factor") {
  auto source = in_memory();
  auto local = open_local(*source);
  Mlp mlp;
  DataDirectives d = importance_directives(CachePolicy::kImportance);
  d.repetition = protocol::Repetition::kAdaptive;
  const TrainSettings settings{32, 0.05};
  mlp.round(*local, d, settings);  // fills the cache
  for (int round = 0; round < 3; ++round) {
    const RoundStats stats = mlp.round(*local, d, settings);
    const uint64_t drawn_hits = stats.cache_hits - stats.reused;
    REQUIRE(drawn_hits > 0);
    CHECK(stats.reused > 0);
    // The plan saw h of the draws hit, at most drawn_hits: a sample admitted during the round
    // is hit by its later draws too. Some h <= drawn_hits gives exactly the repeats.
    bool explained = false;
    for (uint64_t h = 1; h <= drawn_hits; ++h) {
      const size_t factor = adaptive_repetition_factor(h, 600, 32);
      explained = explained || stats.reused == std::min<uint64_t>(600 - h, h * (factor - 1));
    }
    CHECK_MESSAGE(explained, "reused ", stats.reused, " with ", drawn_hits, " drawn hits");
  }
}

TEST_CASE("a memory source trains every planned sample and ranks it") {
  auto source = in_memory();
  auto local = open_local(*source);
  Mlp mlp;
  DataDirectives d;
  d.epochs = 2;
  const std::vector<float> before = mlp.parameters;
  const RoundStats stats = mlp.round(*local, d);
  CHECK(mlp.parameters != before);
  CHECK(stats.samples == 1200);
  CHECK(stats.cache_hits == 0);  // no cache directive: every read goes to the source
  CHECK(stats.cache_misses == 1200);
  CHECK(stats.bytes_read == 1200 * 785);
  CHECK(stats.io_s >= 0);
  CHECK(stats.compute_s > 0);
  CHECK(stats.loss_sum > 0);
  CHECK(local->mean_sample_bytes() == 785);
  CHECK(local->sampler().rounds() == 1);
  size_t ranked = 0;
  for (size_t i = 0; i < local->size(); ++i) ranked += local->sampler().weight(i) > 2;
  CHECK(ranked == 600);  // every sample was trained on and ranked
}

TEST_CASE("reading through an emulated device trains exactly as reading from memory") {
  TempDir dir;
  auto memory = in_memory();
  auto device = on_device(dir.path());
  auto from_memory = open_local(*memory);
  auto from_device = open_local(*device, dir.path().string());
  Mlp a, b;
  DataDirectives d;  // uniform, one epoch, no cache
  const RoundStats ra = a.round(*from_memory, d, {32, 0.05, 0.9});
  const RoundStats rb = b.round(*from_device, d, {32, 0.05, 0.9});
  CHECK(a.parameters == b.parameters);
  CHECK(ra.loss_sum == rb.loss_sum);

  // Every sample is a miss read from the emulated device, whose time is the I/O time.
  CHECK(rb.samples == 600);
  CHECK(rb.cache_misses == 600);
  CHECK(rb.bytes_read == 600 * kRecordBytes);
  CHECK(rb.io_s == doctest::Approx(600 * kRecordBytes / kReadBytesPerS).epsilon(0.05));
  CHECK(from_device->mean_sample_bytes() == kRecordBytes);
  CHECK(std::filesystem::exists(dir.path() / "state.bin"));
}

TEST_CASE("the importance cache serves more of the budget than lru at equal capacity") {
  TempDir importance_dir, lru_dir;
  auto importance_device = on_device(importance_dir.path());
  auto lru_device = on_device(lru_dir.path());
  auto with_importance = open_local(*importance_device, importance_dir.path().string());
  auto with_lru = open_local(*lru_device, lru_dir.path().string());
  Mlp a, b;
  uint64_t importance_hits = 0, lru_hits = 0;
  double first_loss = 0, last_loss = 0;
  for (int r = 0; r < 3; ++r) {
    const RoundStats ri =
        a.round(*with_importance, importance_directives(CachePolicy::kImportance));
    const RoundStats rl = b.round(*with_lru, importance_directives(CachePolicy::kLru));
    for (const RoundStats* s : {&ri, &rl}) {
      CHECK(s->samples == 600);
      CHECK(s->cache_hits + s->cache_misses == 600);
      CHECK(s->bytes_read == s->cache_misses * kRecordBytes);
      CHECK(s->io_s ==
            doctest::Approx(s->cache_misses * kRecordBytes / kReadBytesPerS).epsilon(0.05));
    }
    CHECK(with_importance->cache()->used_bytes() <= 60 * kRecordBytes);
    CHECK(with_lru->cache()->used_bytes() <= 60 * kRecordBytes);
    if (r > 0) {
      // A warm cache's hits are repeated up to 3 more times (factor 4), whatever its policy.
      CHECK(ri.reused > 0);
      for (const RoundStats* s : {&ri, &rl}) CHECK(s->reused <= 3 * (s->cache_hits - s->reused));
      importance_hits += ri.cache_hits;
      lru_hits += rl.cache_hits;
    }
    if (r == 0) first_loss = ri.loss_sum / ri.samples;
    last_loss = ri.loss_sum / ri.samples;
  }
  MESSAGE("warm-round hits: importance " << importance_hits << ", lru " << lru_hits);
  CHECK(importance_hits > lru_hits);
  CHECK(last_loss < first_loss);
  CHECK(with_importance->cache()->entries() == 60);
}

TEST_CASE("the sampler state survives a restart and is dropped for other samples") {
  TempDir dir;
  const std::string state_dir = dir.path().string();
  auto source = in_memory();
  SamplerState saved;
  {
    auto local = open_local(*source, state_dir);
    Mlp mlp;
    for (int r = 0; r < 2; ++r) mlp.round(*local, importance_directives(CachePolicy::kImportance));
    saved = local->sampler().state();
  }
  CHECK(saved.rounds == 2);
  CHECK(saved.smoothing > 0);

  auto reopened = open_local(*source, state_dir);
  CHECK(reopened->sampler().state().rounds == saved.rounds);
  CHECK(reopened->sampler().state().smoothing == saved.smoothing);
  CHECK(reopened->sampler().state().weights == saved.weights);

  // A corrupt state file is logged and replaced by a fresh state.
  {
    std::fstream f(dir.path() / "state.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  auto fresh = open_local(*source, state_dir);
  CHECK(fresh->sampler().rounds() == 0);
  CHECK(fresh->sampler().weight(0) == 1.0);

  // Other samples (another fingerprint) get a fresh state.
  {
    auto local = open_local(*source, state_dir);
    Mlp mlp;
    mlp.round(*local, importance_directives(CachePolicy::kImportance));
  }
  auto smaller_source = in_memory(300);
  auto smaller = open_local(*smaller_source, state_dir);
  CHECK(smaller->size() == 300);
  CHECK(smaller->sampler().rounds() == 0);
}

// An app's trainer with a bug: it returns one parameter too few.
class ShortTrainer final : public Trainer {
 public:
  Status prepare(const ModelInfo&) override { return ok_status(); }
  Result<std::vector<float>> train(const std::vector<float>& parameters, RoundSamples&,
                                   const TrainSettings&) override {
    return std::vector<float>(parameters.begin(), parameters.end() - 1);
  }
  Result<Evaluation> evaluate(const std::vector<float>&, RoundSamples&) override {
    return Evaluation();
  }
};

// An app's trainer with a bug: it reports a NaN loss for its first batch.
class NanLossTrainer final : public Trainer {
 public:
  Status prepare(const ModelInfo&) override { return ok_status(); }
  Result<std::vector<float>> train(const std::vector<float>& parameters, RoundSamples& samples,
                                   const TrainSettings&) override {
    samples.report_losses(0, {std::nanf(""), 1.0f});
    samples.report_losses(samples.size(), {1.0f});  // and past the round's end
    return parameters;
  }
  Result<Evaluation> evaluate(const std::vector<float>&, RoundSamples&) override {
    return Evaluation();
  }
};

TEST_CASE("cache capacity, bad directives, bad sources and bad trainers") {
  auto source = in_memory();
  auto local = open_local(*source, "", 10 * 785);
  Mlp mlp;
  DataDirectives cached = importance_directives(CachePolicy::kImportance);
  cached.cache_budget_bytes = 60 * 785;
  mlp.round(*local, cached);
  CHECK(local->cache()->budget_bytes() == 10 * 785);
  CHECK(local->cache()->entries() == 10);

  auto code = [&](Trainer& trainer, const DataDirectives& d) {
    return local->train_round(trainer, mlp.parameters, {32, 0.05}, d).status().code();
  };
  DataDirectives bad = cached;
  bad.repetition_factor = 0.5;
  CHECK(code(*mlp.trainer, bad) == Code::kInvalidArgument);
  bad = DataDirectives();
  bad.epochs = 0;
  CHECK(code(*mlp.trainer, bad) == Code::kInvalidArgument);
  ShortTrainer short_trainer;
  CHECK(code(short_trainer, DataDirectives()) == Code::kInternal);
  const SamplerState before = local->sampler().state();
  NanLossTrainer nan_trainer;
  CHECK(code(nan_trainer, DataDirectives()) == Code::kInternal);
  CHECK(local->sampler().state().weights == before.weights);  // the bad report changed nothing
  bad = DataDirectives();
  bad.sample_budget = 200'000'000;  // beyond what one round may plan
  CHECK(code(*mlp.trainer, bad) == Code::kInvalidArgument);
  TrainSettings negative{32, -0.1};
  CHECK(local->train_round(*mlp.trainer, mlp.parameters, negative, DataDirectives())
            .status()
            .code() == Code::kInvalidArgument);

  CHECK(LocalData::open(LocalDataConfig()).status().code() == Code::kInvalidArgument);
  MemorySource empty({});
  LocalDataConfig on_empty;
  on_empty.source = &empty;
  CHECK(LocalData::open(on_empty).status().code() == Code::kInvalidArgument);

  // A record that is not a Fashion-MNIST one stops the round with the built-in trainer.
  MemorySource garbage({std::string(10, 'x'), std::string(10, 'y')});
  auto on_garbage = open_local(garbage);
  auto round = on_garbage->train_round(*mlp.trainer, mlp.parameters, {32, 0.05}, DataDirectives());
  CHECK(round.status().code() == Code::kInvalidArgument);
}

TEST_CASE("held-out evaluation scores the given parameters on the first samples") {
  auto source = in_memory(300);
  Mlp mlp;
  auto all = evaluate_held_out(*mlp.trainer, mlp.parameters, *source, 0);
  REQUIRE(all.ok());
  CHECK(all->samples == 300);
  CHECK(all->loss > 0);
  REQUIRE(all->metrics.count("accuracy") == 1);
  const double untrained = all->metrics.at("accuracy");
  CHECK(untrained >= 0);
  CHECK(untrained <= 1);
  auto some = evaluate_held_out(*mlp.trainer, mlp.parameters, *source, 50);
  REQUIRE(some.ok());
  CHECK(some->samples == 50);

  // After a round of three epochs (over these samples and more) their loss is lower.
  auto train_source = in_memory(600);
  auto local = open_local(*train_source);
  DataDirectives d;
  d.epochs = 3;
  mlp.round(*local, d, {32, 0.05, 0.9});
  auto trained = evaluate_held_out(*mlp.trainer, mlp.parameters, *source, 0);
  REQUIRE(trained.ok());
  CHECK(trained->loss < all->loss);
}
