// The npz writer: a zip archive any zip reader opens (ours checks every CRC-32), of NPY 1.0
// files whose headers numpy parses and whose data are the tensors' floats.

#include "formats/npz_writer.h"

#include <doctest/doctest.h>

#include <cstring>

#include "formats/zip_reader.h"

using namespace fedcase;
using namespace fedcase::formats;

namespace {

ModelLayout two_tensors() { return {{{"conv1.weight", {2, 1, 2}}, {"conv1.bias", {2}}}}; }

// An entry's NPY header (its dict, padding included) and data.
std::pair<std::string, std::string> npy_parts(std::string_view npy) {
  REQUIRE(npy.size() >= 10);
  CHECK(npy.substr(0, 8) == std::string_view("\x93NUMPY\x01\x00", 8));
  uint16_t length = 0;
  std::memcpy(&length, npy.data() + 8, 2);
  CHECK((10 + length) % 64 == 0);
  return {std::string(npy.substr(10, length)), std::string(npy.substr(10 + length))};
}

}  // namespace

TEST_CASE("an npz archive holds one NPY file per tensor with its shape and floats") {
  const std::vector<float> values = {1, 2, 3, 4, -0.5f, 1e-30f};
  auto archive = write_npz(two_tensors(), values);
  REQUIRE_MESSAGE(archive.ok(), archive.status().to_string());

  ZipArchive zip(1 << 20);
  REQUIRE(zip.open(*archive).ok());
  REQUIRE(zip.entries().size() == 2);
  CHECK(zip.entries()[0].name == "conv1.weight.npy");
  CHECK(zip.entries()[1].name == "conv1.bias.npy");
  for (const ZipEntry& entry : zip.entries()) CHECK(entry.method == 0);  // stored

  auto weight = zip.read(zip.entries()[0], 1 << 20);  // checks the CRC-32
  REQUIRE(weight.ok());
  auto [header, data] = npy_parts(*weight);
  CHECK(header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1, 2), }", 0) == 0);
  CHECK(header.back() == '\n');
  REQUIRE(data.size() == 4 * sizeof(float));
  CHECK(std::memcmp(data.data(), values.data(), data.size()) == 0);

  auto bias = zip.read(zip.entries()[1], 1 << 20);
  REQUIRE(bias.ok());
  auto [bias_header, bias_data] = npy_parts(*bias);
  CHECK(bias_header.rfind("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 0) == 0);
  REQUIRE(bias_data.size() == 2 * sizeof(float));
  CHECK(std::memcmp(bias_data.data(), values.data() + 4, bias_data.size()) == 0);

  // The same tensors always give the same bytes.
  CHECK(*write_npz(two_tensors(), values) == *archive);
}

TEST_CASE("a scalar tensor has the empty shape") {
  auto archive = write_npz({{{"step", {}}}}, {7});
  REQUIRE(archive.ok());
  ZipArchive zip(1 << 20);
  REQUIRE(zip.open(*archive).ok());
  auto entry = zip.read(zip.entries().at(0), 1 << 20);
  REQUIRE(entry.ok());
  CHECK(npy_parts(*entry).first.find("'shape': (), }") != std::string::npos);
}

TEST_CASE("values that do not fit the layout and names that cannot be entries are refused") {
  CHECK(write_npz(two_tensors(), {1, 2}).status().code() == Code::kInvalidArgument);
  for (const char* name : {"", "a/b", "a\\b", "tab\there"}) {
    CAPTURE(name);
    CHECK(write_npz({{{name, {1}}}}, {1}).status().code() == Code::kInvalidArgument);
  }
}
