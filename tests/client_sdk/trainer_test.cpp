#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "client_sdk/local_data.h"
#include "client_sdk/torchscript_trainer.h"
#include "ml/model.h"
#include "ml/torchscript_model.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/torchscript_module.h"

using namespace fedcase;
using namespace fedcase::client;
using fedcase::testing::fmnist_train;
using fedcase::testing::TempDir;

namespace {

// Fashion-MNIST sample `i` as a float record: 784 pixels in [0, 1], then the class.
std::string image_record(size_t i) {
  const ml::Dataset& data = fmnist_train();
  std::vector<float> pixels(784);
  for (size_t k = 0; k < 784; ++k) pixels[k] = data.pixels[i * 784 + k] / 255.0f;
  return float_record(pixels, {float(data.labels[i])});
}

// `count` image records as files of a folder: the app's own data on disk.
std::unique_ptr<FolderSource> image_folder(const std::filesystem::path& dir, size_t first,
                                           size_t count) {
  for (size_t i = first; i < first + count; ++i) {
    std::ofstream(dir / ("sample-" + std::to_string(i) + ".f32"), std::ios::binary)
        << image_record(i);
  }
  auto source = FolderSource::open(dir.string());
  REQUIRE(source.ok());
  return std::move(source).value();
}

std::unique_ptr<Trainer> trainer_for(std::vector<int64_t> shape) {
  auto trainer = make_torchscript_trainer({std::move(shape)});
  REQUIRE(trainer.ok());
  return std::move(trainer).value();
}

// The job's model as a task would describe it, with the module's own initial parameters.
struct Job {
  ModelInfo info;
  std::vector<float> parameters;
  Job(std::string module, std::string loss) {
    auto model = ml::TorchScriptModel::load(module);
    REQUIRE(model.ok());
    info = {"torchscript", std::move(loss), std::make_shared<const std::string>(std::move(module)),
            model->layout()};
    parameters = model->parameters();
  }
};

std::unique_ptr<LocalData> open_local(SampleSource& source) {
  LocalDataConfig c;
  c.source = &source;
  auto local = LocalData::open(std::move(c));
  REQUIRE(local.ok());
  return std::move(local).value();
}

}  // namespace

TEST_CASE("a TorchScript classifier trains from a folder of records and improves") {
  ml::set_torch_threads(1);
  TempDir train_dir, held_out_dir;
  auto train = image_folder(train_dir.path(), 0, 600);
  auto held_out = image_folder(held_out_dir.path(), 1000, 200);
  Job job(testing::classifier_module(784, 32, 10, 3), "cross_entropy");
  auto trainer = trainer_for({1, 28, 28});
  REQUIRE(trainer->prepare(job.info).ok());

  auto before = evaluate_held_out(*trainer, job.parameters, *held_out, 0);
  REQUIRE_MESSAGE(before.ok(), before.status().to_string());
  CHECK(before->samples == 200);
  REQUIRE(before->metrics.count("accuracy") == 1);

  auto local = open_local(*train);
  DataDirectives d;
  d.sampling = Sampling::kImportance;
  d.sample_budget = 600;
  double first_loss = 0, last_loss = 0;
  for (int round = 0; round < 3; ++round) {
    auto trained = local->train_round(*trainer, job.parameters, {32, 0.1, 0.9}, d);
    REQUIRE_MESSAGE(trained.ok(), trained.status().to_string());
    CHECK(trained->stats.samples == 600);
    CHECK(trained->stats.bytes_read == trained->stats.cache_misses * 785 * 4);
    CHECK(trained->parameters.size() == job.parameters.size());
    job.parameters = trained->parameters;
    const double mean = trained->stats.loss_sum / double(trained->stats.samples);
    if (round == 0) first_loss = mean;
    last_loss = mean;
  }
  CHECK(last_loss < first_loss);
  CHECK(local->sampler().rounds() == 3);  // the reported losses reached the sampler

  auto after = evaluate_held_out(*trainer, job.parameters, *held_out, 0);
  REQUIRE(after.ok());
  MESSAGE("held-out accuracy " << before->metrics.at("accuracy") << " -> "
                               << after->metrics.at("accuracy"));
  CHECK(after->loss < before->loss);
  CHECK(after->metrics.at("accuracy") > before->metrics.at("accuracy") + 0.2);
}

TEST_CASE("a TorchScript regression trains with mean squared error") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<std::string> records;
  for (int i = 0; i < 256; ++i) {
    const float a = normal(rng), b = normal(rng);
    records.push_back(float_record({a, b}, {2 * a - b + 0.5f}));
  }
  MemorySource source(std::move(records));
  Job job(testing::regression_module(2, 1), "mse");
  auto trainer = trainer_for({2});
  REQUIRE(trainer->prepare(job.info).ok());
  auto local = open_local(source);
  auto before = evaluate_held_out(*trainer, job.parameters, source, 0);
  REQUIRE(before.ok());
  CHECK(before->metrics.empty());  // no accuracy for a regression
  DataDirectives d;
  d.epochs = 5;
  auto trained = local->train_round(*trainer, job.parameters, {16, 0.05}, d);
  REQUIRE_MESSAGE(trained.ok(), trained.status().to_string());
  auto after = evaluate_held_out(*trainer, trained->parameters, source, 0);
  REQUIRE(after.ok());
  CHECK(after->loss < 0.1 * before->loss);
}

TEST_CASE("the TorchScript trainer refuses models and records it cannot use") {
  Job job(testing::classifier_module(4, 3, 2, 1), "cross_entropy");
  auto trainer = trainer_for({4});
  CHECK(make_torchscript_trainer({}).status().code() == Code::kInvalidArgument);
  CHECK(make_torchscript_trainer({{4, 0}}).status().code() == Code::kInvalidArgument);

  ModelInfo builtin = job.info;
  builtin.kind = "cnn";
  CHECK(trainer->prepare(builtin).code() == Code::kInvalidArgument);
  ModelInfo garbage = job.info;
  garbage.module = std::make_shared<const std::string>("not a zip archive");
  CHECK(trainer->prepare(garbage).code() == Code::kInvalidArgument);
  ModelInfo other_layout = job.info;
  other_layout.layout.tensors[0].shape = {3, 5};
  CHECK(trainer->prepare(other_layout).code() == Code::kInvalidArgument);
  ModelInfo bad_loss = job.info;
  bad_loss.loss = "hinge";
  CHECK(trainer->prepare(bad_loss).code() == Code::kInvalidArgument);
  REQUIRE(trainer->prepare(job.info).ok());

  auto train_on = [&](std::vector<std::string> records) {
    MemorySource source(std::move(records));
    auto local = open_local(source);
    return local->train_round(*trainer, job.parameters, {8, 0.1}, DataDirectives()).status();
  };
  CHECK(train_on({float_record({1, 2, 3, 4}, {1})}).ok());
  // Two target values for cross-entropy, a fractional class, a non-finite input, a class
  // beyond the logits, a record that is not whole floats.
  CHECK(train_on({float_record({1, 2, 3, 4}, {1, 0})}).code() == Code::kInvalidArgument);
  CHECK(train_on({float_record({1, 2, 3, 4}, {0.5})}).code() == Code::kInvalidArgument);
  CHECK(train_on({float_record({1, NAN, 3, 4}, {1})}).code() == Code::kInvalidArgument);
  CHECK(train_on({float_record({1, 2, 3, 4}, {7})}).code() == Code::kInvalidArgument);
  CHECK(train_on({std::string(17, 'x')}).code() == Code::kInvalidArgument);
}
