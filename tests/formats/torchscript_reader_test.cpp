// read_torchscript_model against what torch itself reads from the fixtures of
// tests/fixtures/torchscript/, and on invalid, truncated and corrupted archives.

#include "formats/torchscript_reader.h"

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

using namespace fedcase;
using namespace fedcase::formats;

namespace {

// Fixtures and their sidecars: tests/fixtures/torchscript/make_fixtures.py.
std::string read_fixture(const std::string& file) {
  std::ifstream in(FEDCASE_SOURCE_DIR "/tests/fixtures/torchscript/" + file, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "missing fixture ", file);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

Result<ModelBlob> read_parameters(const std::string& fixture, const TorchScriptLimits& limits) {
  return read_torchscript_model(read_fixture(fixture + ".pt"), limits);
}

std::vector<std::string> names_of(const ModelBlob& blob) {
  std::vector<std::string> names;
  for (const TensorSpec& tensor : blob.layout.tensors) names.push_back(tensor.name);
  return names;
}

// Compares what the reader finds in <fixture>.pt with what torch read from it (<fixture>.json).
void check_against_torch(const std::string& fixture) {
  INFO("fixture ", fixture);
  auto blob = read_parameters(fixture, {});
  REQUIRE_MESSAGE(blob.ok(), blob.status().to_string());
  CHECK(blob->model_version == 0);
  // The parameters, then the buffers, each in torch's order.
  const auto sidecar = nlohmann::json::parse(read_fixture(fixture + ".json"));
  auto expected = sidecar["parameters"];
  for (const auto& buffer : sidecar["buffers"]) expected.push_back(buffer);
  REQUIRE(blob->layout.tensors.size() == expected.size());
  size_t offset = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const TensorSpec& tensor = blob->layout.tensors[i];
    INFO("tensor ", tensor.name);
    CHECK(tensor.name == expected[i]["name"].get<std::string>());
    CHECK(tensor.shape == expected[i]["shape"].get<std::vector<uint64_t>>());
    const TensorKind kind = i < sidecar["parameters"].size() ? TensorKind::kParameter
                            : expected[i]["kind"] == "integer" ? TensorKind::kIntegerBuffer
                                                               : TensorKind::kFloatBuffer;
    CHECK(tensor.kind == kind);
    const size_t count = tensor.element_count();
    REQUIRE(offset + count <= blob->data.size());
    const std::string_view bytes(reinterpret_cast<const char*>(blob->data.data() + offset),
                                 count * sizeof(float));
    CHECK(crc32_of(bytes) == expected[i]["crc32"].get<uint32_t>());
    const auto head = expected[i]["head"].get<std::vector<double>>();
    for (size_t j = 0; j < head.size(); ++j) CHECK(blob->data[offset + j] == head[j]);
    offset += count;
  }
  CHECK(offset == blob->data.size());
  const std::string encoded = encode_blob(*blob);
  auto decoded = decode_blob(encoded, encoded.size());
  REQUIRE(decoded.ok());
  CHECK(decoded->layout == blob->layout);
}

void check_rejected(const std::string& fixture, Code code, const std::vector<std::string>& words) {
  INFO("fixture ", fixture);
  auto blob = read_parameters(fixture, {});
  REQUIRE_FALSE(blob.ok());
  INFO("message ", blob.status().message());
  CHECK(blob.status().code() == code);
  for (const std::string& word : words)
    CHECK(blob.status().message().find(word) != std::string::npos);
}

// Reading must fail or succeed cleanly; what it returns must be whole and finite.
void check_clean(std::string_view archive) {
  auto blob = read_torchscript_model(archive, {});
  if (!blob.ok()) return;
  CHECK(blob->data.size() == blob->layout.element_count());
  for (float value : blob->data) CHECK(std::isfinite(value));
}

}  // namespace

TEST_CASE("torchscript reader returns the parameters and buffers torch reads, in its order") {
  for (const char* fixture :
       {"mlp", "conv_bn", "ordered", "scalar", "views", "mlp-deflated", "mlp-zip64"}) {
    check_against_torch(fixture);
  }
}

TEST_CASE("torchscript parameters are depth-first in slot order, buffers after them") {
  auto ordered = read_parameters("ordered", {});
  REQUIRE(ordered.ok());
  // Own parameter first (TorchScript puts parameters before submodules), the weight the
  // decoder shares with the encoder under both names, then the buffers: BatchNorm's running
  // statistics and its int64 batch count, and the module's own buffer.
  CHECK(names_of(*ordered) ==
        std::vector<std::string>{"gain", "encoder.weight", "encoder.bias", "bn.weight", "bn.bias",
                                 "decoder.weight", "decoder.bias", "steps", "bn.running_mean",
                                 "bn.running_var", "bn.num_batches_tracked"});
  CHECK(ordered->layout.tensors[7].kind == TensorKind::kFloatBuffer);
  CHECK(ordered->layout.tensors[10].kind == TensorKind::kIntegerBuffer);
  CHECK(ordered->layout.parameter_count() == 3 + 9 + 3 + 3 + 3 + 9 + 3);
  auto mlp = read_parameters("mlp", {});
  REQUIRE(mlp.ok());
  CHECK(names_of(*mlp) == std::vector<std::string>{"body.0.weight", "body.0.bias",
                                                   "body.2.0.weight", "body.2.0.bias",
                                                   "head.weight"});
  auto scalar = read_parameters("scalar", {});
  REQUIRE(scalar.ok());
  CHECK(scalar->layout.tensors[0].name == "temperature");
  CHECK(scalar->layout.tensors[0].shape.empty());
  CHECK(scalar->data[0] == 1.5f);
}

TEST_CASE("torchscript reader rejects invalid models, naming the fault") {
  check_rejected("nan", Code::kUnprocessable, {"fc.weight", "NaN"});
  check_rejected("float64", Code::kInvalidArgument, {"fc.weight", "float64", "DoubleStorage"});
  check_rejected("no_params", Code::kInvalidArgument, {"no parameters"});
  check_rejected("transposed", Code::kInvalidArgument, {"weight", "not contiguous"});
  check_rejected("checkpoint", Code::kInvalidArgument,
                 {"not a TorchScript archive", "checkpoint/code/"});
  check_rejected("view-out-of-range", Code::kInvalidArgument,
                 {"shift", "[8, 11)", "storage of 10"});
  check_rejected("unsupported-opcode", Code::kInvalidArgument,
                 {"mlp/data.pkl: unsupported pickle opcode 0x94", "offset 2"});
  check_rejected("missing-class-code", Code::kInvalidArgument,
                 {"no code for class", "mlp/code/__torch__/torch/nn/modules/container.py"});
}

TEST_CASE("torchscript reader rejects what is not a zip archive") {
  for (const std::string& bytes : {std::string(), std::string("PK\x05\x06"), std::string(100, '\0'),
                                   encode_blob(ModelBlob{0, ModelLayout{{{"w", {1}}}}, {1.0f}})}) {
    auto blob = read_torchscript_model(bytes, {});
    REQUIRE_FALSE(blob.ok());
    CHECK(blob.status().code() == Code::kInvalidArgument);
    CHECK(blob.status().message().find("not a zip archive") != std::string::npos);
  }
}

TEST_CASE("torchscript reader holds to its limits") {
  const std::string mlp = read_fixture("mlp.pt");
  TorchScriptLimits limits;
  limits.max_bytes = mlp.size() - 1;
  CHECK(read_torchscript_model(mlp, limits).status().code() == Code::kTooLarge);
  limits.max_bytes = mlp.size();
  CHECK(read_torchscript_model(mlp, limits).ok());

  // mlp: 5 parameters of 4*8 + 8 + 8*6 + 6 + 6*3 = 112 values, submodules 3 levels deep
  // (body.2.0); its data.pkl and the code of its classes are longer than 100 bytes.
  const struct {
    size_t TorchScriptLimits::*limit;
    size_t value;
    std::string message;
  } cases[] = {
      {&TorchScriptLimits::max_tensors, 4, "more than 4 parameters"},
      {&TorchScriptLimits::max_elements, 111, "more than 111 values"},
      {&TorchScriptLimits::max_module_depth, 2,
       "'body.2.0' lies 3 levels deep, past the limit of 2"},
      {&TorchScriptLimits::max_pickle_bytes, 100, "mlp/data.pkl"},
      {&TorchScriptLimits::max_code_bytes, 100, "limit of 100 bytes"},
  };
  for (const auto& exceeded : cases) {
    INFO(exceeded.message);
    TorchScriptLimits tight;
    tight.*exceeded.limit = exceeded.value;
    auto blob = read_torchscript_model(mlp, tight);
    REQUIRE_FALSE(blob.ok());
    CHECK(blob.status().code() == Code::kInvalidArgument);
    CHECK(blob.status().message().find(exceeded.message) != std::string::npos);
  }
  TorchScriptLimits exact;
  exact.max_tensors = 5;
  exact.max_elements = 112;
  exact.max_module_depth = 3;
  CHECK(read_torchscript_model(mlp, exact).ok());
}

TEST_CASE("torchscript reader rejects every truncation of an archive") {
  for (const char* fixture : {"views.pt", "mlp.pt", "mlp-zip64.pt"}) {
    const std::string archive = read_fixture(fixture);
    for (size_t size = 0; size < archive.size(); ++size) {
      INFO(fixture, " truncated to ", size, " bytes");
      CHECK_FALSE(read_torchscript_model(std::string_view(archive).substr(0, size), {}).ok());
    }
  }
}

TEST_CASE("torchscript reader survives every flipped byte") {
  for (const char* fixture : {"views.pt", "scalar.pt", "mlp-deflated.pt", "mlp-zip64.pt"}) {
    std::string archive = read_fixture(fixture);
    for (size_t i = 0; i < archive.size(); ++i) {
      INFO(fixture, " with byte ", i, " flipped");
      for (char flip : {'\x01', '\x80', '\xff'}) {
        archive[i] ^= flip;
        check_clean(archive);
        archive[i] ^= flip;
      }
    }
  }
}
