#include "client_sdk/local_trainer.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "client_sdk/client_state.h"
#include "tests/support/coordinator_harness.h"

using namespace fedcase;
using namespace fedcase::client;
using fedcase::testing::fmnist_train;
using fedcase::testing::TempDir;
using nlohmann::json;

namespace {

constexpr size_t kRecordBytes = 2048;
constexpr double kReadBytesPerS = 10e6;

// 600 Fashion-MNIST training samples spread over the set.
std::vector<size_t> partition() {
  std::vector<size_t> indices;
  for (size_t i = 0; i < 600; ++i) indices.push_back(i * 97 % 60000);
  return indices;
}

LocalDataConfig config(const std::string& state_dir) {
  LocalDataConfig c;
  c.data = &fmnist_train();
  c.indices = partition();
  c.sampler.seed = 11;
  c.state_dir = state_dir;
  c.storage.sample_bytes = kRecordBytes;
  c.storage.read_bytes_per_s = kReadBytesPerS;
  c.storage.sleep = false;
  return c;
}

std::unique_ptr<LocalTrainer> open_trainer(LocalDataConfig c) {
  auto trainer = LocalTrainer::open(std::move(c));
  REQUIRE_MESSAGE(trainer.ok(), trainer.status().to_string());
  return std::move(trainer).value();
}

ml::Model mlp() {
  ml::set_torch_threads(1);
  auto model = ml::Model::create("mlp", 5);
  REQUIRE(model.ok());
  return std::move(model).value();
}

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

TEST_CASE("task directives parse with defaults and named errors") {
  auto d = parse_data_directives(json{{"train", {{"epochs", 3}}}});
  REQUIRE(d.ok());
  CHECK(d->sampling == Sampling::kUniform);
  CHECK(d->sample_budget == 0);
  CHECK(d->epochs == 3);
  CHECK(d->cache_policy == CachePolicy::kNone);

  d = parse_data_directives(
      json{{"sampling", "importance"},
           {"sample_budget", 500},
           {"cache", {{"policy", "lru"}, {"budget_bytes", 4096}, {"repetition_factor", 2.5}}}});
  REQUIRE(d.ok());
  CHECK(d->sampling == Sampling::kImportance);
  CHECK(d->sample_budget == 500);
  CHECK(d->epochs == 1);
  CHECK(d->cache_policy == CachePolicy::kLru);
  CHECK(d->cache_budget_bytes == 4096);
  CHECK(d->repetition_factor == 2.5);

  // A cache directive without a policy asks for the importance cache.
  d = parse_data_directives(json{{"cache", {{"budget_bytes", 100}}}});
  REQUIRE(d.ok());
  CHECK(d->cache_policy == CachePolicy::kImportance);

  auto error = [](const json& task) {
    auto r = parse_data_directives(task);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == Code::kInvalidArgument);
    return r.status().message();
  };
  CHECK(error(json{{"sampling", "random"}}).find("sampling") != std::string::npos);
  CHECK(error(json{{"sample_budget", -1}}).find("sample_budget") != std::string::npos);
  CHECK(error(json{{"train", {{"epochs", "two"}}}}).find("train.epochs") != std::string::npos);
  CHECK(error(json{{"cache", 5}}).find("cache") != std::string::npos);
  CHECK(error(json{{"cache", {{"policy", "fifo"}}}}).find("cache.policy") != std::string::npos);
  CHECK(error(json{{"cache", {{"repetition_factor", 0.5}}}}).find("repetition_factor") !=
        std::string::npos);
  CHECK(error(json::array()).find("object") != std::string::npos);
}

TEST_CASE("memory mode trains on the in-memory partition without I/O") {
  auto trainer = open_trainer(config(""));
  ml::Model model = mlp();
  DataDirectives d;
  d.epochs = 2;
  auto round = trainer->train_round(model, {32, 0.05}, d);
  REQUIRE(round.ok());
  CHECK(round->samples == 1200);
  CHECK(round->io_s == 0);
  CHECK(round->bytes_read == 0);
  CHECK(round->cache_hits + round->cache_misses == 0);
  CHECK(round->compute_s > 0);
  CHECK(trainer->cache() == nullptr);
  CHECK(trainer->sample_bytes() == 0);
  CHECK(trainer->sampler().rounds() == 1);
  size_t ranked = 0;
  for (size_t i = 0; i < trainer->size(); ++i) ranked += trainer->sampler().weight(i) > 2;
  CHECK(ranked == 600);  // every sample was trained on and ranked
}

TEST_CASE("reading through the store trains exactly as reading from memory") {
  TempDir dir;
  auto from_memory = open_trainer(config(""));
  auto from_store = open_trainer(config(dir.path().string()));
  ml::Model a = mlp(), b = mlp();
  DataDirectives d;  // uniform, one epoch, no cache
  auto ra = from_memory->train_round(a, {32, 0.05, 0.9}, d);
  auto rb = from_store->train_round(b, {32, 0.05, 0.9}, d);
  REQUIRE(ra.ok());
  REQUIRE(rb.ok());
  CHECK(a.parameters() == b.parameters());
  CHECK(ra->loss_sum == rb->loss_sum);

  // Without a cache every sample is a miss read from the emulated device.
  CHECK(rb->samples == 600);
  CHECK(rb->cache_hits == 0);
  CHECK(rb->cache_misses == 600);
  CHECK(rb->bytes_read == 600 * kRecordBytes);
  CHECK(rb->io_s == doctest::Approx(600 * kRecordBytes / kReadBytesPerS).epsilon(0.05));
  CHECK(from_store->sample_bytes() == kRecordBytes);
  CHECK(std::filesystem::exists(dir.path() / "samples.bin"));
  CHECK(std::filesystem::exists(dir.path() / "state.bin"));
}

TEST_CASE("the importance cache serves more of the budget than lru at equal capacity") {
  TempDir importance_dir, lru_dir;
  auto with_importance = open_trainer(config(importance_dir.path().string()));
  auto with_lru = open_trainer(config(lru_dir.path().string()));
  ml::Model a = mlp(), b = mlp();
  uint64_t importance_hits = 0, lru_hits = 0;
  double first_loss = 0, last_loss = 0;
  for (int r = 0; r < 3; ++r) {
    auto ri = with_importance->train_round(a, {32, 0.05},
                                           importance_directives(CachePolicy::kImportance));
    auto rl = with_lru->train_round(b, {32, 0.05}, importance_directives(CachePolicy::kLru));
    REQUIRE(ri.ok());
    REQUIRE(rl.ok());
    for (const RoundStats* s : {&*ri, &*rl}) {
      CHECK(s->samples == 600);
      CHECK(s->cache_hits + s->cache_misses == 600);
      CHECK(s->bytes_read == s->cache_misses * kRecordBytes);
      CHECK(s->io_s ==
            doctest::Approx(s->cache_misses * kRecordBytes / kReadBytesPerS).epsilon(0.05));
    }
    CHECK(with_importance->cache()->used_bytes() <= 60 * kRecordBytes);
    CHECK(with_lru->cache()->used_bytes() <= 60 * kRecordBytes);
    CHECK(rl->reused == 0);
    if (r > 0) {
      // A warm importance cache repeats each hit up to 3 more times (factor 4).
      CHECK(ri->reused > 0);
      CHECK(ri->reused <= 3 * (ri->cache_hits - ri->reused));
      importance_hits += ri->cache_hits;
      lru_hits += rl->cache_hits;
    }
    if (r == 0) first_loss = ri->loss_sum / ri->samples;
    last_loss = ri->loss_sum / ri->samples;
  }
  MESSAGE("warm-round hits: importance " << importance_hits << ", lru " << lru_hits);
  CHECK(importance_hits > 3 * lru_hits);
  CHECK(last_loss < first_loss);
  CHECK(with_importance->cache()->entries() == 60);
}

TEST_CASE("the sampler state survives a restart and is dropped when it does not fit") {
  TempDir dir;
  const std::string state_dir = dir.path().string();
  SamplerState saved;
  std::filesystem::file_time_type store_written;
  {
    auto trainer = open_trainer(config(state_dir));
    ml::Model model = mlp();
    for (int r = 0; r < 2; ++r) {
      REQUIRE(
          trainer->train_round(model, {32, 0.05}, importance_directives(CachePolicy::kImportance))
              .ok());
    }
    saved = trainer->sampler().state();
    store_written = std::filesystem::last_write_time(dir.path() / "samples.bin");
  }
  CHECK(saved.rounds == 2);
  CHECK(saved.smoothing > 0);

  auto reopened = open_trainer(config(state_dir));
  CHECK(reopened->sampler().state().rounds == saved.rounds);
  CHECK(reopened->sampler().state().smoothing == saved.smoothing);
  CHECK(reopened->sampler().state().weights == saved.weights);
  CHECK(std::filesystem::last_write_time(dir.path() / "samples.bin") == store_written);

  // A corrupt state file is logged and replaced by a fresh state.
  {
    std::fstream f(dir.path() / "state.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  auto fresh = open_trainer(config(state_dir));
  CHECK(fresh->sampler().rounds() == 0);
  CHECK(fresh->sampler().weight(0) == 1.0);

  // Another partition gets a fresh state and a new store, with the new record size.
  LocalDataConfig other = config(state_dir);
  other.indices.resize(300);
  other.storage.sample_bytes = 0;
  auto smaller = open_trainer(other);
  CHECK(smaller->size() == 300);
  CHECK(smaller->sampler().rounds() == 0);
  CHECK(smaller->sample_bytes() == 784);
}

TEST_CASE("the client's cache capacity caps the task's cache budget") {
  TempDir dir;
  LocalDataConfig c = config(dir.path().string());
  c.cache_capacity_bytes = 10 * kRecordBytes;
  auto trainer = open_trainer(std::move(c));
  ml::Model model = mlp();
  REQUIRE(trainer->train_round(model, {32, 0.05}, importance_directives(CachePolicy::kImportance))
              .ok());
  CHECK(trainer->cache()->budget_bytes() == 10 * kRecordBytes);
  CHECK(trainer->cache()->entries() == 10);

  DataDirectives bad = importance_directives(CachePolicy::kImportance);
  bad.repetition_factor = 0.5;
  CHECK(trainer->train_round(model, {32, 0.05}, bad).status().code() == Code::kInvalidArgument);
  bad = DataDirectives();
  bad.epochs = 0;
  CHECK(trainer->train_round(model, {32, 0.05}, bad).status().code() == Code::kInvalidArgument);

  CHECK(LocalTrainer::open(LocalDataConfig()).status().code() == Code::kInvalidArgument);
  LocalDataConfig out_of_range = config("");
  out_of_range.indices.push_back(60000);
  CHECK(LocalTrainer::open(out_of_range).status().code() == Code::kInvalidArgument);
}
