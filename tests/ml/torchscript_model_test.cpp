// The coordinator reads a TorchScript module's parameters without libtorch
// (formats/torchscript_reader.h); clients train it with libtorch (ml/torchscript_model.h).
// Both must see the same parameters in the same order, or every update would be misread.

#include "ml/torchscript_model.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "formats/torchscript_reader.h"
#include "tests/support/torchscript_module.h"

using namespace fedcase;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

void check_same_parameters(const std::string& archive, const std::string& what) {
  INFO(what);
  auto read = formats::read_torchscript_model(archive, formats::TorchScriptLimits());
  REQUIRE_MESSAGE(read.ok(), read.status().to_string());
  auto loaded = ml::TorchScriptModel::load(archive);
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  CHECK(read->layout == loaded->layout());
  CHECK(read->data == loaded->parameters());
}

}  // namespace

TEST_CASE("the torch-free reader and libtorch agree on every module's parameters") {
  check_same_parameters(testing::classifier_module(784, 32, 10, 3), "classifier (libtorch)");
  check_same_parameters(testing::regression_module(5, 1), "regression (libtorch)");
  check_same_parameters(testing::batchnorm_classifier_module(6, 4, 3, 2),
                        "batchnorm classifier (libtorch)");
  const std::filesystem::path fixtures =
      std::filesystem::path(FEDCASE_SOURCE_DIR) / "tests/fixtures/torchscript";
  size_t checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(fixtures)) {
    const auto sidecar = std::filesystem::path(entry.path()).replace_extension(".json");
    if (entry.path().extension() != ".pt" || !std::filesystem::exists(sidecar)) continue;
    check_same_parameters(read_file(entry.path()), entry.path().filename().string());
    ++checked;
  }
  CHECK(checked >= 5);  // the valid Python-exported fixtures
}

TEST_CASE("a TorchScript model sets and returns its parameters in layout order") {
  auto model = ml::TorchScriptModel::load(testing::classifier_module(4, 3, 2, 1));
  REQUIRE(model.ok());
  const ModelLayout layout = model->layout();
  REQUIRE(layout.tensors.size() == 4);
  CHECK(layout.tensors[0].name == "w1");
  CHECK(layout.tensors[0].shape == std::vector<uint64_t>{3, 4});
  std::vector<float> values(layout.element_count());
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) / 10;
  REQUIRE(model->set_parameters(values).ok());
  CHECK(model->parameters() == values);
  values.pop_back();
  CHECK(model->set_parameters(values).code() == Code::kUnprocessable);
  CHECK(ml::TorchScriptModel::load("garbage").status().code() == Code::kInvalidArgument);
  CHECK(ml::parse_loss("mse").value() == ml::Loss::kMse);
  CHECK(ml::parse_loss("l1").status().code() == Code::kInvalidArgument);
}

TEST_CASE("a TorchScript model's buffers cross with its parameters; eval mode uses them") {
  // Conv2d(1, 2, 3), BatchNorm2d(2), Linear(8, 2) on [1, 4, 4] inputs.
  const std::string archive = read_file(std::filesystem::path(FEDCASE_SOURCE_DIR) /
                                        "tests/fixtures/torchscript/conv_bn.pt");
  auto model = ml::TorchScriptModel::load(archive);
  REQUIRE(model.ok());
  const ModelLayout layout = model->layout();
  REQUIRE(layout.tensors.size() == 9);
  CHECK(layout.tensors[6].name == "bn.running_mean");
  CHECK(layout.tensors[6].kind == TensorKind::kFloatBuffer);
  CHECK(layout.tensors[8].name == "bn.num_batches_tracked");
  CHECK(layout.tensors[8].kind == TensorKind::kIntegerBuffer);
  const size_t mean_at = layout.parameter_count(), count_at = layout.element_count() - 1;
  const std::vector<float> before = model->parameters();
  CHECK(before[count_at] == 0);

  // Two batches of 8 samples: training moves the running statistics and counts the batches.
  std::vector<float> inputs;
  std::vector<float> targets;
  for (int i = 0; i < 8; ++i) {
    for (int p = 0; p < 16; ++p) inputs.push_back(float((i * 7 + p * 3) % 11) - 2.0f);
    targets.push_back(float(i % 2));
  }
  auto batches = [&](int n) {
    auto left = std::make_shared<int>(n);
    return ml::NextBatch([&, left](ml::TensorBatch& batch) -> Result<bool> {
      if ((*left)-- == 0) return false;
      batch.sample_shape = {1, 4, 4};
      batch.count = 8;
      batch.target_width = 1;
      batch.inputs = inputs;
      batch.targets = targets;
      return true;
    });
  };
  ml::TrainOptions options;
  options.lr = 0.01;
  REQUIRE(model->train(ml::Loss::kCrossEntropy, options, batches(2)).ok());
  const std::vector<float> trained = model->parameters();
  CHECK(trained[count_at] == 2);
  CHECK(trained[mean_at] != before[mean_at]);

  // Eval mode scores with the running statistics: other statistics, another loss.
  auto loss_with = [&](const std::vector<float>& values) {
    REQUIRE(model->set_parameters(values).ok());
    auto scored = model->evaluate(ml::Loss::kCrossEntropy, batches(1));
    REQUIRE(scored.ok());
    return scored->loss;
  };
  std::vector<float> shifted = trained;
  shifted[mean_at] += 50;
  const double trained_loss = loss_with(trained);
  const double shifted_loss = loss_with(shifted);
  CHECK(trained_loss != shifted_loss);
  CHECK(model->parameters() == shifted);  // evaluating changes nothing

  // An integer buffer takes the nearest integer; the saved module holds every value.
  shifted[count_at] = 6.6f;
  REQUIRE(model->set_parameters(shifted).ok());
  CHECK(model->parameters()[count_at] == 7);
  auto saved = model->save();
  REQUIRE(saved.ok());
  auto read = formats::read_torchscript_model(*saved, formats::TorchScriptLimits());
  REQUIRE(read.ok());
  CHECK(read->data == model->parameters());
}
