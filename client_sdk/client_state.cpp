#include "client_sdk/client_state.h"

#include "client_sdk/binary_file.h"
#include "common/blob.h"

namespace fedcase::client {
namespace {

constexpr std::string_view kMagic = "FCSTATE1";
constexpr uint32_t kVersion = 1;
constexpr uint32_t kLossFell = 1;  // flag: the sampler's last round lowered its loss

}  // namespace

std::string encode_client_state(const ClientState& state) {
  ByteWriter w;
  w.bytes(kMagic);
  w.u32(kVersion);
  w.u32(state.sampler.loss_fell ? kLossFell : 0);
  w.u64(state.source_fingerprint);
  w.u64(state.sampler.rounds);
  w.f64(state.sampler.smoothing);
  w.f64(state.sampler.previous_loss);
  w.u64(state.sampler.weights.size());
  for (double v : state.sampler.weights) w.f64(v);
  w.u32(crc32_of(w.data()));
  return w.data();
}

Result<ClientState> decode_client_state(std::string_view bytes) {
  ByteReader r(bytes);
  if (r.bytes(kMagic.size()) != kMagic) return invalid_argument("not a client state (bad magic)");
  const uint32_t version = r.u32();
  if (r.truncated()) return invalid_argument("truncated");
  if (version != kVersion)
    return invalid_argument("unsupported version " + std::to_string(version));
  if (bytes.size() < 4 || crc32_of(bytes.substr(0, bytes.size() - 4)) !=
                              ByteReader(bytes.substr(bytes.size() - 4)).u32()) {
    return invalid_argument("checksum mismatch");
  }
  const uint32_t flags = r.u32();
  ClientState state;
  state.sampler.loss_fell = (flags & kLossFell) != 0;
  state.source_fingerprint = r.u64();
  state.sampler.rounds = r.u64();
  state.sampler.smoothing = r.f64();
  state.sampler.previous_loss = r.f64();
  const uint64_t count = r.u64();
  if (r.truncated() || r.remaining() < 4 || (r.remaining() - 4) % 8 != 0 ||
      (r.remaining() - 4) / 8 != count) {
    return invalid_argument("weight count does not match the file size");
  }
  state.sampler.weights.resize(count);
  for (double& v : state.sampler.weights) v = r.f64();
  return state;
}

Status save_client_state(const std::string& path, const ClientState& state) {
  return write_file_atomically(path, encode_client_state(state));
}

Result<ClientState> load_client_state(const std::string& path) {
  auto bytes = read_whole_file(path);
  if (!bytes.ok()) return bytes.status();
  auto state = decode_client_state(*bytes);
  if (!state.ok())
    return invalid_argument("client state " + path + ": " + state.status().message());
  return state;
}

}  // namespace fedcase::client
