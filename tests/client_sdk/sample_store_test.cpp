#include "client_sdk/sample_store.h"

#include <doctest/doctest.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

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

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("a sample store returns the records and labels it was written from") {
  TempDir dir;
  const ml::Dataset& data = fmnist_train();
  const auto indices = some_indices();
  const std::string path = dir.file("samples.bin");
  REQUIRE(write_sample_store(path, data, indices, 1000).ok());
  auto store = SampleStore::open(path, {});
  REQUIRE_MESSAGE(store.ok(), store.status().to_string());
  SampleStore& s = **store;
  CHECK(s.size() == indices.size());
  CHECK(s.rows() == 28);
  CHECK(s.cols() == 28);
  CHECK(s.record_bytes() == 1000);
  CHECK(s.fingerprint() == partition_fingerprint(data, indices));
  std::string record;
  for (size_t k = 0; k < indices.size(); ++k) {
    REQUIRE(s.read(k, record).ok());
    REQUIRE(record.size() == 1000);
    CHECK(std::memcmp(record.data(), data.pixels.data() + indices[k] * 784, 784) == 0);
    CHECK(record.find_first_not_of('\0', 784) == std::string::npos);  // zero padding
    CHECK(s.label(k) == data.labels[indices[k]]);
  }
  CHECK(s.stats().reads == indices.size());
  CHECK(s.stats().bytes == indices.size() * 1000);
  CHECK(s.read(indices.size(), record).code() == Code::kInvalidArgument);

  // Record size 0 means unpadded images.
  REQUIRE(write_sample_store(path, data, indices, 0).ok());
  auto plain = SampleStore::open(path, {});
  REQUIRE(plain.ok());
  CHECK((*plain)->record_bytes() == 784);
  CHECK(std::filesystem::file_size(path) == 48 + 64 + 64 * 784);
}

TEST_CASE("bad stores and bad arguments are refused") {
  TempDir dir;
  const ml::Dataset& data = fmnist_train();
  const std::string path = dir.file("samples.bin");
  CHECK(write_sample_store(path, data, some_indices(), 500).code() == Code::kInvalidArgument);
  CHECK(write_sample_store(path, data, {1, data.size()}, 0).code() == Code::kInvalidArgument);
  CHECK(SampleStore::open(path, {}).status().code() == Code::kNotFound);
  CHECK(SampleStore::open(path, {0, -1.0}).status().code() == Code::kInvalidArgument);

  REQUIRE(write_sample_store(path, data, some_indices(), 0).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto expect_refused = [&](const std::string& content, const std::string& what) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << content;
    auto store = SampleStore::open(path, {});
    REQUIRE_FALSE(store.ok());
    CHECK(store.status().code() == Code::kInvalidArgument);
    CHECK_MESSAGE(store.status().message().find(what) != std::string::npos,
                  store.status().message());
  };
  expect_refused(bytes.substr(0, bytes.size() - 1), "does not match");
  expect_refused(bytes.substr(0, 20), "shorter than its header");
  std::string header = bytes;
  header[12] ^= 1;  // rows
  expect_refused(header, "header checksum");
  std::string labels = bytes;
  labels[48] ^= 1;
  expect_refused(labels, "label checksum");
  expect_refused("XXXXXXXX" + bytes.substr(8), "bad magic");
}

TEST_CASE("throttled reads take and account the emulated device time") {
  TempDir dir;
  const std::string path = dir.file("samples.bin");
  std::vector<size_t> indices(100);
  for (size_t i = 0; i < indices.size(); ++i) indices[i] = i;
  REQUIRE(write_sample_store(path, fmnist_train(), indices, 4096).ok());
  StorageEmulation slow;
  slow.read_bytes_per_s = 4e6;
  slow.read_latency_s = 2e-4;
  const double expected = 100 * (2e-4 + 4096 / 4e6);  // 0.1224 s

  auto store = SampleStore::open(path, slow);
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
  auto fast = SampleStore::open(path, slow);
  REQUIRE(fast.ok());
  start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < 100; ++i) REQUIRE((*fast)->read(i, record).ok());
  CHECK((*fast)->stats().io_seconds == doctest::Approx(expected).epsilon(0.05));
  CHECK(seconds_since(start) < 0.5 * expected);

  // Without emulation the real read time is accounted: small, but not zero.
  auto plain = SampleStore::open(path, {});
  REQUIRE(plain.ok());
  for (size_t i = 0; i < 100; ++i) REQUIRE((*plain)->read(i, record).ok());
  CHECK((*plain)->stats().io_seconds > 0);
  CHECK((*plain)->stats().io_seconds < expected);
}
