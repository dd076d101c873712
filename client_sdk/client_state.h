#pragma once
// The client state file: what a client keeps across app restarts, today the importance
// sampler's state for one SampleSource.
//
// Format (little-endian):
//   magic "FCSTATE1", u32 version (1), u32 flags (bit 0: the last round lowered the loss;
//   files that predate it hold 0), u64 source fingerprint,
//   u64 rounds, f64 smoothing, f64 previous loss, u64 count, count x f64 weights,
//   u32 CRC-32 of everything before it.
// Files are replaced atomically (temporary file, flush, rename), so a crash leaves the old
// state or the new one. Thread-compatible: concurrent writers of one path are not supported.

#include <cstdint>
#include <string>

#include "client_sdk/importance_sampler.h"
#include "common/status.h"

namespace fedcase::client {

struct ClientState {
  uint64_t source_fingerprint = 0;  // of the samples the weights describe (SampleSource)
  SamplerState sampler;
};

// Serialised form, and its strict parser: kInvalidArgument naming the problem for bad magic,
// an unsupported version, a checksum mismatch, truncated or trailing bytes.
std::string encode_client_state(const ClientState& state);
Result<ClientState> decode_client_state(std::string_view bytes);

// Writes `state` to `path` atomically. kInternal on I/O failure (the old file stays).
Status save_client_state(const std::string& path, const ClientState& state);
// kNotFound when `path` does not exist; kInvalidArgument "client state <path>: <problem>" for
// a file that does not decode; kInternal on I/O errors.
Result<ClientState> load_client_state(const std::string& path);

}  // namespace fedcase::client
