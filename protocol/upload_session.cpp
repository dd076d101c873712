#include "protocol/upload_session.h"

#include "protocol/internal.h"

namespace fedcase::protocol {
namespace {

bool is_sha256(const std::string& s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// Reads a decimal number of 1 to 19 digits from the front of `text`, advancing it.
bool read_decimal(std::string_view& text, uint64_t& out) {
  size_t digits = 0;
  out = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    if (digits == 19) return false;
    out = out * 10 + uint64_t(text[digits] - '0');
    ++digits;
  }
  text.remove_prefix(digits);
  return digits > 0;
}

bool consume(std::string_view& text, char c) {
  if (text.empty() || text.front() != c) return false;
  text.remove_prefix(1);
  return true;
}

}  // namespace

namespace internal {

Status read(const nlohmann::json& value, const std::string& where, UploadOpen& out, Keys* keys) {
  ObjectReader r(value, where);
  r.require("bytes").integer("bytes", out.bytes).require("sha256").text("sha256", out.sha256);
  if (r.status().ok()) {
    check(r, out.bytes > 0, "bytes", "must be >= 1");
    check(r, is_sha256(out.sha256), "sha256", "must be 64 lower-case hex digits");
  }
  return finish(r, keys);
}

Status read(const nlohmann::json& value, const std::string& where, UploadState& out, Keys* keys) {
  ObjectReader r(value, where);
  r.require("url")
      .text("url", out.url)
      .require("bytes")
      .integer("bytes", out.bytes)
      .require("chunk_bytes")
      .integer("chunk_bytes", out.chunk_bytes)
      .require("received")
      .integer("received", out.received);
  if (r.status().ok()) {
    check(r, !out.url.empty() && out.url.front() == '/', "url", "must be a path");
    check(r, out.chunk_bytes > 0, "chunk_bytes", "must be >= 1");
    check(r, out.received <= out.bytes, "received", "must be at most bytes");
  }
  return finish(r, keys);
}

}  // namespace internal

Result<UploadOpen> read_upload_open(const nlohmann::json& open) {
  return internal::read_message<UploadOpen>(open, "upload_open");
}

nlohmann::json write_upload_open(const UploadOpen& o) {
  return {{"bytes", o.bytes}, {"sha256", o.sha256}};
}

Result<UploadState> read_upload_state(const nlohmann::json& state) {
  return internal::read_message<UploadState>(state, "upload_state");
}

nlohmann::json write_upload_state(const UploadState& s) {
  return {{"url", s.url},
          {"bytes", s.bytes},
          {"chunk_bytes", s.chunk_bytes},
          {"received", s.received}};
}

Result<ContentRange> parse_content_range(std::string_view header) {
  const Status malformed =
      invalid_argument("Content-Range must be 'bytes FIRST-LAST/TOTAL' with FIRST <= LAST < TOTAL");
  constexpr std::string_view kUnit = "bytes ";
  if (header.substr(0, kUnit.size()) != kUnit) return malformed;
  header.remove_prefix(kUnit.size());
  ContentRange range;
  if (!read_decimal(header, range.first) || !consume(header, '-') ||
      !read_decimal(header, range.last) || !consume(header, '/') ||
      !read_decimal(header, range.total) || !header.empty()) {
    return malformed;
  }
  if (range.first > range.last || range.last >= range.total) return malformed;
  return range;
}

std::string write_content_range(const ContentRange& range) {
  return "bytes " + std::to_string(range.first) + "-" + std::to_string(range.last) + "/" +
         std::to_string(range.total);
}

}  // namespace fedcase::protocol
