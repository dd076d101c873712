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
  auto read = formats::read_torchscript_parameters(archive, formats::TorchScriptLimits());
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
