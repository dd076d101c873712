#include "client_sdk/record_file.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "client_sdk/builtin_trainer.h"
#include "tests/support/coordinator_harness.h"

using namespace fedcase;
using namespace fedcase::client;
using fedcase::testing::fmnist_train;
using fedcase::testing::TempDir;

namespace {

std::vector<size_t> some_indices() {
  std::vector<size_t> indices;
  for (size_t i = 0; i < 64; ++i) indices.push_back((i * 7919) % 60000);
  return indices;
}

// The Fashion-MNIST records of some_indices() (785 bytes each), in memory.
MemorySource some_records() {
  std::vector<std::string> records;
  for (size_t i : some_indices()) records.push_back(fashion_record(fmnist_train(), i));
  return MemorySource(std::move(records));
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("a record file returns the records it was written from, padded") {
  TempDir dir;
  MemorySource source = some_records();
  const std::string path = dir.file("samples.bin");
  REQUIRE(write_record_file(path, source, 1000).ok());
  auto file = RecordFile::open(path);
  REQUIRE_MESSAGE(file.ok(), file.status().to_string());
  RecordFile& f = **file;
  CHECK(f.count() == source.count());
  CHECK(f.record_bytes() == 1000);
  CHECK(f.sample_bytes(3) == 1000);
  CHECK(f.fingerprint() == source.fingerprint());
  std::string record, original;
  for (size_t k = 0; k < source.count(); ++k) {
    REQUIRE(f.read(k, record).ok());
    REQUIRE(source.read(k, original).ok());
    REQUIRE(record.size() == 1000);
    CHECK(record.compare(0, original.size(), original) == 0);
    CHECK(record.find_first_not_of('\0', original.size()) == std::string::npos);  // padding
  }
  CHECK(f.stats().reads == source.count());
  CHECK(f.stats().bytes == source.count() * 1000);
  CHECK(f.device_seconds() == f.stats().io_seconds);
  CHECK(f.read(source.count(), record).code() == Code::kInvalidArgument);

  // Record size 0 means the largest record: no padding here.
  REQUIRE(write_record_file(path, source, 0).ok());
  auto plain = RecordFile::open(path);
  REQUIRE(plain.ok());
  CHECK((*plain)->record_bytes() == 785);
  CHECK(std::filesystem::file_size(path) == 36 + 64 * 785);
}

TEST_CASE("bad record files and bad arguments are refused") {
  TempDir dir;
  MemorySource source = some_records();
  const std::string path = dir.file("samples.bin");
  CHECK(write_record_file(path, source, 500).code() == Code::kInvalidArgument);  // too small
  CHECK(RecordFile::open(path).status().code() == Code::kNotFound);
  StorageEmulation negative;
  negative.read_latency_s = -1;
  CHECK(RecordFile::open(path, negative).status().code() == Code::kInvalidArgument);

  REQUIRE(write_record_file(path, source, 0).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto expect_refused = [&](const std::string& content, const std::string& what) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    auto file = RecordFile::open(path);
    REQUIRE_FALSE(file.ok());
    CHECK(file.status().code() == Code::kInvalidArgument);
    CHECK_MESSAGE(file.status().message().find(what) != std::string::npos, file.status().message());
  };
  expect_refused(bytes.substr(0, bytes.size() - 1), "does not match");
  expect_refused(bytes.substr(0, 20), "shorter than its header");
  std::string header = bytes;
  header[12] ^= 1;  // record size
  expect_refused(header, "header checksum");
  expect_refused("XXXXXXXX" + bytes.substr(8), "bad magic");
}

TEST_CASE("throttled reads take and account the emulated device time") {
  TempDir dir;
  const std::string path = dir.file("samples.bin");
  std::vector<std::string> records;
  for (size_t i = 0; i < 100; ++i) records.push_back(fashion_record(fmnist_train(), i));
  MemorySource source(std::move(records));
  REQUIRE(write_record_file(path, source, 4096).ok());
  StorageEmulation slow;
  slow.read_bytes_per_s = 4e6;
  slow.read_latency_s = 2e-4;
  const double expected = 100 * (2e-4 + 4096 / 4e6);  // 0.1224 s

  auto store = RecordFile::open(path, slow);
  REQUIRE(store.ok());
  std::string record;
  auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < 100; ++i) REQUIRE((*store)->read(i, record).ok());
  const double wall = seconds_since(start);
  CHECK((*store)->stats().io_seconds == doctest::Approx(expected).epsilon(0.05));
  CHECK(wall >= 0.95 * expected);
  CHECK(wall < expected + 1.0);

  // Accounting without sleeping: same figures, no waiting.
  slow.sleep = false;
  auto fast = RecordFile::open(path, slow);
  REQUIRE(fast.ok());
  start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < 100; ++i) REQUIRE((*fast)->read(i, record).ok());
  CHECK((*fast)->stats().io_seconds == doctest::Approx(expected).epsilon(0.05));
  CHECK(seconds_since(start) < 0.5 * expected);

  // Without emulation the real read time is accounted: small, but not zero.
  auto plain = RecordFile::open(path);
  REQUIRE(plain.ok());
  for (size_t i = 0; i < 100; ++i) REQUIRE((*plain)->read(i, record).ok());
  CHECK((*plain)->stats().io_seconds > 0);
  CHECK((*plain)->stats().io_seconds < expected);
}

TEST_CASE("record_file_of reuses a file holding the source's records and rewrites any other") {
  TempDir dir;
  MemorySource source = some_records();
  const std::string path = dir.file("samples.bin");
  auto first = record_file_of(path, source, 1000, {});
  REQUIRE_MESSAGE(first.ok(), first.status().to_string());
  CHECK((*first)->record_bytes() == 1000);
  const auto written = std::filesystem::last_write_time(path);
  CHECK((*record_file_of(path, source, 1000, {}))->count() == source.count());
  CHECK(std::filesystem::last_write_time(path) == written);  // reused, not rewritten

  // Another record size, or other records, get a new file.
  CHECK((*record_file_of(path, source, 0, {}))->record_bytes() == 785);
  MemorySource fewer({"abc", "de"});
  auto other = record_file_of(path, fewer, 0, {});
  REQUIRE(other.ok());
  CHECK((*other)->count() == 2);
  CHECK((*other)->fingerprint() == fewer.fingerprint());
}
