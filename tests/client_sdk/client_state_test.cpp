#include "client_sdk/client_state.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "client_sdk/binary_file.h"
#include "common/blob.h"
#include "tests/support/temp_dir.h"

using namespace fedcase;
using namespace fedcase::client;
using fedcase::testing::TempDir;

namespace {

ClientState sample_state(double scale) {
  ClientState state;
  state.source_fingerprint = 0x0123456789abcdefull;
  state.sampler.rounds = 7;
  state.sampler.smoothing = 0.0123 * scale;
  state.sampler.previous_loss = 0.456;
  state.sampler.loss_fell = scale > 1;
  for (int i = 0; i < 1000; ++i) state.sampler.weights.push_back(1.0 + i * 0.001 * scale);
  return state;
}

void check_equal(const ClientState& a, const ClientState& b) {
  CHECK(a.source_fingerprint == b.source_fingerprint);
  CHECK(a.sampler.rounds == b.sampler.rounds);
  CHECK(a.sampler.smoothing == b.sampler.smoothing);
  CHECK(a.sampler.previous_loss == b.sampler.previous_loss);
  CHECK(a.sampler.loss_fell == b.sampler.loss_fell);
  CHECK(a.sampler.weights == b.sampler.weights);
}

size_t files_in(const std::filesystem::path& dir) {
  size_t n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) n += entry.is_regular_file();
  return n;
}

void overwrite(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST_CASE("client state round-trips through its file") {
  TempDir dir;
  const std::string path = dir.file("state.bin");
  CHECK(load_client_state(path).status().code() == Code::kNotFound);
  for (double scale : {2.0, 1.0}) {  // the loss trend flag set, then clear
    ClientState state = sample_state(scale);
    REQUIRE(save_client_state(path, state).ok());
    auto loaded = load_client_state(path);
    REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
    check_equal(*loaded, state);
  }
  // 8 magic + 2 x 4 + 5 x 8 header fields + weights + 4 checksum.
  CHECK(std::filesystem::file_size(path) == 8 + 8 + 40 + 8 * 1000 + 4);

  ClientState empty;
  REQUIRE(save_client_state(path, empty).ok());
  auto reloaded = load_client_state(path);
  REQUIRE(reloaded.ok());
  CHECK(reloaded->sampler.weights.empty());
}

TEST_CASE("a corrupt client state is rejected with a clear error") {
  TempDir dir;
  const std::string path = dir.file("state.bin");
  const std::string good = encode_client_state(sample_state(1));

  auto expect_error = [&](const std::string& bytes, const std::string& what) {
    overwrite(path, bytes);
    auto loaded = load_client_state(path);
    REQUIRE_FALSE(loaded.ok());
    CHECK(loaded.status().code() == Code::kInvalidArgument);
    CHECK_MESSAGE(loaded.status().message().find(path) != std::string::npos,
                  loaded.status().message());
    CHECK_MESSAGE(loaded.status().message().find(what) != std::string::npos,
                  loaded.status().message());
  };

  std::string flipped = good;
  flipped[100] ^= 0x10;  // a weight's bit
  expect_error(flipped, "checksum mismatch");
  expect_error(good.substr(0, good.size() - 9), "checksum mismatch");
  expect_error(good.substr(0, 10), "truncated");
  expect_error("", "bad magic");
  expect_error("not a state file at all", "bad magic");
  std::string future = good;
  future[8] = 2;  // version 2
  expect_error(future, "unsupported version 2");

  // A consistent checksum over an inconsistent count is still caught.
  ClientState state = sample_state(1);
  std::string forged = encode_client_state(state);
  forged[8 + 8 + 32] = char(0xe9);  // weight count 1001 instead of 1000 (0x3e8)
  forged.resize(forged.size() - 4);
  ByteWriter crc;
  crc.u32(crc32_of(forged));
  expect_error(forged + crc.data(), "weight count");
}

TEST_CASE("saving replaces the state atomically") {
  TempDir dir;
  const std::string path = dir.file("state.bin");
  REQUIRE(save_client_state(path, sample_state(1)).ok());
  REQUIRE(save_client_state(path, sample_state(2)).ok());
  auto loaded = load_client_state(path);
  REQUIRE(loaded.ok());
  check_equal(*loaded, sample_state(2));
  CHECK(files_in(dir.path()) == 1);  // no temporary file left behind

  // A write that never commits (a crash mid-write) leaves the old state whole.
  {
    auto partial = AtomicFile::create(path);
    REQUIRE(partial.ok());
    REQUIRE(partial->append(encode_client_state(sample_state(3)).substr(0, 500)).ok());
    CHECK(files_in(dir.path()) == 2);
  }
  CHECK(files_in(dir.path()) == 1);
  loaded = load_client_state(path);
  REQUIRE(loaded.ok());
  check_equal(*loaded, sample_state(2));

  // A save that cannot write fails and touches nothing.
  CHECK(save_client_state(dir.file("missing/state.bin"), sample_state(1)).code() ==
        Code::kInternal);
}
