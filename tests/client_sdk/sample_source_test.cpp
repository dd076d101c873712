#include "client_sdk/sample_source.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "tests/support/temp_dir.h"

using namespace fedcase;
using namespace fedcase::client;
using fedcase::testing::TempDir;

namespace {

void write(const std::filesystem::path& path, const std::string& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

}  // namespace

TEST_CASE("a memory source reads its records and fingerprints their bytes") {
  MemorySource source({"alpha", "", "gamma!"});
  CHECK(source.count() == 3);
  CHECK(source.sample_bytes(0) == 5);
  CHECK(source.sample_bytes(1) == 0);
  std::string out = "stale";
  REQUIRE(source.read(2, out).ok());
  CHECK(out == "gamma!");
  REQUIRE(source.read(1, out).ok());
  CHECK(out.empty());
  CHECK(source.read(3, out).code() == Code::kInvalidArgument);
  CHECK(source.device_seconds() < 0);  // the SDK times its reads
  CHECK(source.fingerprint() == MemorySource({"alpha", "", "gamma!"}).fingerprint());
  CHECK(source.fingerprint() != MemorySource({"alphA", "", "gamma!"}).fingerprint());
}

TEST_CASE("a folder source reads every file below it in path order") {
  TempDir dir;
  write(dir.path() / "b.bin", "second");
  write(dir.path() / "a.bin", "first");
  write(dir.path() / "c" / "nested.bin", "third, nested");
  std::filesystem::create_directories(dir.path() / "empty");
  auto source = FolderSource::open(dir.path().string());
  REQUIRE_MESSAGE(source.ok(), source.status().to_string());
  FolderSource& s = **source;
  REQUIRE(s.count() == 3);
  CHECK(s.sample_bytes(0) == 5);
  CHECK(s.sample_bytes(2) == 13);
  std::string out;
  REQUIRE(s.read(0, out).ok());
  CHECK(out == "first");
  REQUIRE(s.read(1, out).ok());
  CHECK(out == "second");
  REQUIRE(s.read(2, out).ok());
  CHECK(out == "third, nested");
  CHECK(s.read(3, out).code() == Code::kInvalidArgument);

  // The fingerprint follows names and sizes; the same folder listed again agrees.
  const uint64_t fingerprint = s.fingerprint();
  CHECK((*FolderSource::open(dir.path().string()))->fingerprint() == fingerprint);
  write(dir.path() / "d.bin", "fourth");
  CHECK((*FolderSource::open(dir.path().string()))->fingerprint() != fingerprint);

  // A file changed since the listing is an I/O error, not a short record.
  write(dir.path() / "a.bin", "first, but longer");
  CHECK(s.read(0, out).code() == Code::kInternal);
  std::filesystem::remove(dir.path() / "b.bin");
  CHECK(s.read(1, out).code() == Code::kInternal);
}

TEST_CASE("a folder source refuses what is not a folder of samples") {
  TempDir dir;
  CHECK(FolderSource::open((dir.path() / "missing").string()).status().code() == Code::kNotFound);
  CHECK(FolderSource::open(dir.path().string()).status().code() == Code::kInvalidArgument);
  write(dir.path() / "file.bin", "x");
  CHECK(FolderSource::open((dir.path() / "file.bin").string()).status().code() == Code::kNotFound);
}
