#pragma once
// HTTP/1.1 on the wire for the benchmarks' event-driven clients (event_fleet.h,
// device_emulator.h): addresses, the heads of their requests, and an answer read as its bytes
// arrive. Just enough HTTP for a coordinator's answers: a status line, headers, and a body of
// Content-Length bytes. These clients never pipeline, so bytes past an answer's end are an
// error, as is a chunked answer (the coordinator sends none).
//
// Errors: a malformed answer gives a Status (the caller decides whether its benchmark goes on).
// Not thread-safe: one AnswerReader per connection.

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fedcase::bench {

// An IPv4 address (`host`, e.g. INADDR_LOOPBACK, in host order) and `port` (0: any, for bind).
inline sockaddr_in ipv4_address(uint32_t host, uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(host);
  return address;
}

// 127.0.0.1:`port` (0: any port, for bind).
inline sockaddr_in loopback_address(uint16_t port) { return ipv4_address(INADDR_LOOPBACK, port); }

// "METHOD target HTTP/1.1", Host and the bearer token, each line ended; the caller adds its
// own headers and the blank line.
inline std::string request_head(std::string_view method, std::string_view target,
                                std::string_view token) {
  std::string head;
  head.reserve(96 + target.size() + token.size());
  head.append(method).append(" ").append(target).append(" HTTP/1.1\r\nHost: 127.0.0.1\r\n");
  head.append("Authorization: Bearer ").append(token).append("\r\n");
  return head;
}

// The head of an update's upload to `target`: `bytes` of an encoded blob, for 10 samples.
inline std::string upload_head(std::string_view target, std::string_view token, size_t bytes) {
  return request_head("POST", target, token) +
         "Content-Type: application/octet-stream\r\nX-Fedcase-Meta: {\"samples\":10}\r\n"
         "Content-Length: " +
         std::to_string(bytes) + "\r\n\r\n";
}

struct Answer {
  int status = 0;
  std::string head;  // status line and headers as received, up to the blank line
  std::string body;  // empty when it was larger than the reader keeps

  // The value of header `name` (any case; surrounding blanks removed), nullopt if absent.
  std::optional<std::string_view> header(std::string_view name) const {
    for (size_t line = head.find("\r\n"); line != std::string::npos;
         line = head.find("\r\n", line + 2)) {
      const size_t start = line + 2;
      const size_t colon = head.find(':', start);
      if (colon == std::string::npos || colon - start != name.size()) continue;
      if (!std::equal(name.begin(), name.end(), head.begin() + long(start),
                      [](char a, char b) { return std::tolower(a) == std::tolower(b); })) {
        continue;
      }
      size_t from = colon + 1, to = std::min(head.find("\r\n", from), head.size());
      while (from < to && (head[from] == ' ' || head[from] == '\t')) ++from;
      while (to > from && (head[to - 1] == ' ' || head[to - 1] == '\t')) --to;
      return std::string_view(head).substr(from, to - from);
    }
    return std::nullopt;
  }
  // Whether the coordinator keeps the connection open for the next request.
  bool keeps_alive() const {
    const auto connection = header("Connection");
    return !connection || connection->size() != 5 ||
           !std::equal(connection->begin(), connection->end(), "close",
                       [](char a, char b) { return std::tolower(a) == b; });
  }
};

// Reads one answer after another off a connection. Bodies larger than `kept_body_bytes` are
// counted, not kept (a model download need not be held to be timed).
class AnswerReader {
 public:
  explicit AnswerReader(size_t kept_body_bytes = size_t(1) << 20) : kept_(kept_body_bytes) {}

  // Takes `n` bytes read off the connection. Returns the answer once it is whole (the reader
  // is then ready for the next one), nullopt while more bytes are due, kInvalidArgument for a
  // chunked answer or bytes past the answer's end.
  Result<std::optional<Answer>> take(const char* data, size_t n) {
    if (head_end_ == 0) {
      in_.append(data, n);
      const size_t end = in_.find("\r\n\r\n");
      if (end == std::string::npos) return std::optional<Answer>();
      head_end_ = end + 4;
      answer_.status = std::atoi(in_.c_str() + 9);  // "HTTP/1.1 200"
      answer_.head = in_.substr(0, end);
      if (answer_.header("Transfer-Encoding")) return invalid_argument("chunked answer");
      const auto length = answer_.header("Content-Length");
      content_length_ = length ? std::strtoull(std::string(*length).c_str(), nullptr, 10) : 0;
      body_read_ = std::min(in_.size() - head_end_, content_length_);
      if (in_.size() - head_end_ > content_length_)
        return invalid_argument("bytes after an answer");
      if (content_length_ > kept_) in_.resize(head_end_);
    } else {
      const size_t taken = std::min(n, content_length_ - body_read_);
      if (taken != n) return invalid_argument("bytes after an answer");
      if (content_length_ <= kept_) in_.append(data, taken);
      body_read_ += taken;
    }
    if (body_read_ < content_length_) return std::optional<Answer>();
    if (content_length_ <= kept_) answer_.body = in_.substr(head_end_);
    Answer whole = std::move(answer_);
    answer_ = Answer();
    in_.clear();
    head_end_ = content_length_ = body_read_ = 0;
    return std::optional<Answer>(std::move(whole));
  }

 private:
  size_t kept_;
  std::string in_;  // the head, then the body while it is kept
  size_t head_end_ = 0, content_length_ = 0, body_read_ = 0;
  Answer answer_;  // of the answer being read: status and head
};

}  // namespace fedcase::bench
