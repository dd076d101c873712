// Exports: a model leaves the coordinator as a TorchScript archive that libtorch (and
// torch.jit.load) reads back with the same parameters and the same outputs.

#include "ml/export.h"

#include <doctest/doctest.h>

#include "ml/dataset.h"
#include "ml/model.h"
#include "ml/torchscript_model.h"
#include "tests/support/torchscript_module.h"

using namespace fedcase;
using namespace fedcase::ml;

namespace {

// The first `n` test images as batches of 128 float records: pixels scaled to [0, 1], the
// label as the target (how an app feeds an exported built-in model).
NextBatch test_batches(const Dataset& data, size_t n) {
  auto offset = std::make_shared<size_t>(0);
  return [&data, n, offset](TensorBatch& batch) -> Result<bool> {
    if (*offset >= n) return false;
    const size_t end = std::min(n, *offset + 128);
    batch.sample_shape = {1, 28, 28};
    batch.target_width = 1;
    for (size_t i = *offset; i < end; ++i) {
      for (size_t k = 0; k < data.image_bytes(); ++k) {
        batch.inputs.push_back(data.pixels[i * data.image_bytes() + k] / 255.0f);
      }
      batch.targets.push_back(float(data.labels[i]));
      ++batch.count;
    }
    *offset = end;
    return true;
  };
}

}  // namespace

TEST_CASE("a built-in model exports as TorchScript with its parameters and its outputs") {
  set_torch_threads(1);
  auto test = load_fashion_mnist(FEDCASE_FMNIST_DIR, Split::kTest);
  REQUIRE(test.ok());
  const Dataset data = head(*test, 512);
  auto train = load_fashion_mnist(FEDCASE_FMNIST_DIR, Split::kTrain);
  REQUIRE(train.ok());
  for (const char* arch : {"cnn", "mlp"}) {
    CAPTURE(arch);
    auto model = Model::create(arch, 5);
    REQUIRE(model.ok());
    std::vector<size_t> order(2048);
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    model->train(*train, order, {});  // trained a little: its outputs are not the init's
    auto archive = model->to_torchscript();
    REQUIRE_MESSAGE(archive.ok(), archive.status().to_string());

    auto loaded = TorchScriptModel::load(*archive);
    REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
    CHECK(loaded->layout() == model->layout());
    CHECK(loaded->parameters() == model->parameters());

    const EvalResult native = model->evaluate(data);
    auto exported = loaded->evaluate(Loss::kCrossEntropy, test_batches(data, 512));
    REQUIRE_MESSAGE(exported.ok(), exported.status().to_string());
    CHECK(exported->samples == 512);
    CHECK(exported->accuracy == native.accuracy);
    CHECK(exported->loss == doctest::Approx(native.loss).epsilon(1e-5));
    CHECK(native.accuracy > 0.4);  // the comparison is of a model that learned something
  }
}

TEST_CASE("export_torchscript writes a job's parameters into its module or its built-in model") {
  const std::string module = testing::classifier_module(784, 16, 10, 2);
  auto original = TorchScriptModel::load(module);
  REQUIRE(original.ok());
  std::vector<float> values(original->layout().element_count());
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i % 97) / 1000.0f;

  auto archive = export_torchscript("torchscript", module, values);
  REQUIRE_MESSAGE(archive.ok(), archive.status().to_string());
  auto loaded = TorchScriptModel::load(*archive);
  REQUIRE(loaded.ok());
  CHECK(loaded->layout() == original->layout());
  CHECK(loaded->parameters() == values);

  auto mlp = Model::create("mlp", 1);
  REQUIRE(mlp.ok());
  auto builtin = export_torchscript("mlp", "", mlp->parameters());
  REQUIRE(builtin.ok());
  CHECK(TorchScriptModel::load(*builtin)->parameters() == mlp->parameters());

  CHECK(export_torchscript("torchscript", "not a zip", values).status().code() ==
        Code::kInvalidArgument);
  CHECK(export_torchscript("torchscript", module, {1, 2, 3}).status().code() ==
        Code::kUnprocessable);
  CHECK(export_torchscript("cnn", "", {1, 2, 3}).status().code() == Code::kUnprocessable);
  CHECK(export_torchscript("resnet", "", values).status().code() == Code::kInvalidArgument);
}
