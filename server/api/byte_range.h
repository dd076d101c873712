#pragma once
// The one byte range a download asks for with `Range: bytes=...` (RFC 9110, section 14), so
// that a client resumes a model where a dropped connection left it. Pure; thread-safe.

#include <cstdint>
#include <optional>
#include <string_view>

namespace fedcase::server {

// Bytes [first, last] of a body, both included.
struct ByteRange {
  uint64_t first = 0;
  uint64_t last = 0;
  uint64_t length() const { return last - first + 1; }
  bool operator==(const ByteRange& o) const { return first == o.first && last == o.last; }
};

// What a Range header asks of a body of `size` bytes.
struct RangeAsked {
  enum class Kind {
    kWhole,          // no usable range: the whole body (200)
    kRange,          // `range` (206 with Content-Range)
    kUnsatisfiable,  // a range that starts past the end (416 with Content-Range: bytes */size)
  };
  Kind kind = Kind::kWhole;
  ByteRange range;
};

// `header` is the Range header's value (nullopt: none). A single range "bytes=F-", "bytes=F-L"
// or "bytes=-N" (the last N bytes) is honoured, clamped to the body; anything else (another
// unit, several ranges, a malformed value, a last byte before the first) asks for the whole
// body, as RFC 9110 lets a server answer. An empty body has no range to give: kWhole.
RangeAsked read_range(std::optional<std::string_view> header, uint64_t size);

}  // namespace fedcase::server
