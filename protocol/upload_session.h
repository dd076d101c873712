#pragma once
// Uploads in chunks (docs/protocol.md, "Uploads in chunks"): an update too large for one
// request, or sent over a link that drops, goes as an upload session. The client opens it
// (POST .../rounds/{round}/uploads with an upload_open), sends its bytes in chunks (PUT
// .../uploads/{upload} with Content-Range), and after a dropped connection asks where it
// stands (GET, an upload_state) and goes on from there.
//
// Pure functions over plain values; thread-safe. Untrusted input gives a Status, never an
// exception.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fedcase::protocol {

// What the client says of the update it is about to send, in the body of the open request;
// its statistics travel in X-Fedcase-Meta as with a plain upload. Both members required.
struct UploadOpen {
  uint64_t bytes = 0;  // the encoded update's size, >= 1
  std::string sha256;  // its lower-case hex SHA-256, checked once every byte arrived

  bool operator==(const UploadOpen& o) const { return bytes == o.bytes && sha256 == o.sha256; }
  bool operator!=(const UploadOpen& o) const { return !(*this == o); }
};

// Where an upload session stands: the answer to its opening, to GET and to every chunk but the
// last (which is answered as a plain upload is). All members required.
struct UploadState {
  std::string url;           // the session's path: chunks are PUT there
  uint64_t bytes = 0;        // the update's size, as opened
  uint64_t chunk_bytes = 0;  // every chunk but the last has this size; >= 1
  uint64_t received = 0;     // bytes stored so far, a prefix: the next chunk starts here

  bool operator==(const UploadState& o) const {
    return url == o.url && bytes == o.bytes && chunk_bytes == o.chunk_bytes &&
           received == o.received;
  }
  bool operator!=(const UploadState& o) const { return !(*this == o); }
};

// kInvalidArgument naming the field for a missing or mistyped one. Unknown keys are ignored.
Result<UploadOpen> read_upload_open(const nlohmann::json& open);
nlohmann::json write_upload_open(const UploadOpen& open);
Result<UploadState> read_upload_state(const nlohmann::json& state);
nlohmann::json write_upload_state(const UploadState& state);

// A chunk's place in its update, from its Content-Range header: bytes [first, last] of
// `total`.
struct ContentRange {
  uint64_t first = 0;
  uint64_t last = 0;
  uint64_t total = 0;
  uint64_t length() const { return last - first + 1; }
  bool operator==(const ContentRange& o) const {
    return first == o.first && last == o.last && total == o.total;
  }
};

// Reads "bytes FIRST-LAST/TOTAL" (RFC 9110, 14.4; decimal, no signs or spaces inside, at most
// 19 digits each): kInvalidArgument for anything else, for FIRST > LAST or LAST >= TOTAL, and
// for the unsatisfied-range form "bytes */TOTAL".
Result<ContentRange> parse_content_range(std::string_view header);
std::string write_content_range(const ContentRange& range);

}  // namespace fedcase::protocol
