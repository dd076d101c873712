// The zip reader on torch's archives (tests/fixtures/torchscript/) and on damaged copies.

#include "formats/zip_reader.h"

#include <doctest/doctest.h>

#include <fstream>
#include <iterator>
#include <string>

using namespace fedcase;
using namespace fedcase::formats;

namespace {

std::string read_fixture(const std::string& file) {
  std::ifstream in(FEDCASE_SOURCE_DIR "/tests/fixtures/torchscript/" + file, std::ios::binary);
  REQUIRE_MESSAGE(in.good(), "missing fixture ", file);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

constexpr uint16_t kDeflated = 8;

}  // namespace

TEST_CASE("the zip reader finds and reads a TorchScript archive's entries") {
  for (const char* fixture : {"mlp.pt", "mlp-zip64.pt", "mlp-deflated.pt"}) {
    INFO(fixture);
    const std::string archive = read_fixture(fixture);
    ZipArchive zip(size_t{1} << 24);
    REQUIRE(zip.open(archive).ok());
    REQUIRE_FALSE(zip.entries().empty());
    for (const ZipEntry& entry : zip.entries()) {
      CHECK(entry.name.substr(0, 4) == "mlp/");
      CHECK(zip.find(entry.name) == &entry);
      auto data = zip.read(entry, size_t{1} << 24);
      REQUIRE_MESSAGE(data.ok(), data.status().to_string());
      CHECK(data->size() == entry.size);
    }
    const ZipEntry* pickle = zip.find("mlp/data.pkl");
    REQUIRE(pickle != nullptr);
    auto first = zip.read(*pickle, pickle->size);
    REQUIRE(first.ok());
    CHECK(first->substr(0, 2) == std::string_view("\x80\x02", 2));  // PROTO 2
    auto again = zip.read(*pickle, pickle->size);
    REQUIRE(again.ok());
    CHECK(again->data() == first->data());  // the same view
    CHECK(zip.find("mlp/none.pkl") == nullptr);
  }
}

TEST_CASE("the zip reader holds to its limits and checks every entry's CRC-32") {
  const std::string archive = read_fixture("mlp.pt");
  ZipArchive zip(archive.size());
  REQUIRE(zip.open(archive).ok());
  const ZipEntry* pickle = zip.find("mlp/data.pkl");
  REQUIRE(pickle != nullptr);
  auto refused = zip.read(*pickle, pickle->size - 1);
  CHECK(refused.status().code() == Code::kInvalidArgument);
  CHECK(refused.status().message().find("exceeds the limit") != std::string::npos);
  auto data = zip.read(*pickle, pickle->size);
  REQUIRE(data.ok());

  // One flipped byte of data.pkl's stored data fails its check.
  std::string damaged = archive;
  damaged[static_cast<size_t>(data->data() - archive.data()) + 3] ^= 0x20;
  ZipArchive other(damaged.size());
  REQUIRE(other.open(damaged).ok());
  auto corrupt = other.read(*other.find("mlp/data.pkl"), pickle->size);
  CHECK(corrupt.status().code() == Code::kInvalidArgument);
  CHECK(corrupt.status().message().find("'mlp/data.pkl' fails its CRC-32 check") !=
        std::string::npos);

  // Deflated entries count against the inflation budget, all of them together.
  const std::string deflated = read_fixture("mlp-deflated.pt");
  ZipArchive tight(0);
  REQUIRE(tight.open(deflated).ok());
  bool met_deflated = false;
  for (const ZipEntry& entry : tight.entries()) {
    if (entry.method != kDeflated || entry.size == 0) continue;
    met_deflated = true;
    auto over = tight.read(entry, deflated.size());
    CHECK(over.status().message().find("inflate to more bytes than its limit") !=
          std::string::npos);
  }
  CHECK(met_deflated);
}

TEST_CASE("the zip reader refuses what is not a zip archive") {
  for (const std::string& bytes :
       {std::string(), std::string("PK\x05\x06"), std::string(100, '\0'), std::string("garbage")}) {
    ZipArchive zip(1 << 20);
    Status s = zip.open(bytes);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("not a zip archive") != std::string::npos);
  }
}
