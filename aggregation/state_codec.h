#pragma once
// The binary format of saved aggregation state (server optimizer moments, privacy accountant):
//
//   "FCAS" | u32 format version | u16 kind length | kind bytes | payload | u32 CRC-32
//
// All integers and floats little-endian; the CRC covers every preceding byte. A reader checks
// magic, version, kind and checksum before any payload is read, and every read is
// bounds-checked, so truncated, corrupted or foreign state is rejected, never half-loaded.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fedcase::aggregation {

inline constexpr uint32_t kStateFormatVersion = 1;

class StateWriter {
 public:
  explicit StateWriter(std::string_view kind);
  void put_u64(uint64_t value);
  void put_floats(const std::vector<float>& values);    // u64 count, then the floats
  void put_floats(const float* values, size_t count);   // the same from a span
  void put_doubles(const std::vector<double>& values);  // u64 count, then the doubles
  // The encoded state; the writer must not be used afterwards.
  std::string finish();

 private:
  std::string out_;
};

class StateReader {
 public:
  // Checks the envelope of `bytes` (which must outlive the reader) for `kind`:
  // kInvalidArgument for bad magic, version, kind, checksum or length.
  static Result<StateReader> open(std::string_view bytes, std::string_view kind);

  // Each read fails (kInvalidArgument) instead of reading past the payload. Vector reads check
  // the count against the remaining bytes before allocating.
  Status get_u64(uint64_t& value);
  Status get_floats(std::vector<float>& values);
  Status get_doubles(std::vector<double>& values);
  // kInvalidArgument unless the whole payload was read.
  Status finish() const;

 private:
  explicit StateReader(std::string_view payload) : payload_(payload) {}
  Status get_raw(void* out, size_t bytes);
  template <class T>
  Status get_vector(std::vector<T>& values);

  std::string_view payload_;
  size_t pos_ = 0;
};

}  // namespace fedcase::aggregation
