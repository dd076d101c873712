#pragma once
// What the HTTP front end (http_server.h) exchanges with the application that answers its
// requests: the request and response types, a reply that may be a long poll, and the
// RequestHandler interface the front end calls. The front end depends only on this header, never
// on the routes behind it.

#include <boost/beast/http.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fedcase::server {

namespace http = boost::beast::http;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

// What the handler answers. When `poll` is set the request is a long poll: for up to `wait_s`
// seconds the session calls poll() once at the start and again whenever `watch` wakes it (no
// periodic re-check), and sends its first response, or empty() when the wait ends with
// nothing (or the server drains).
struct Reply {
  Response response;
  // When set, the body sent with `response`'s header instead of its own: an immutable blob
  // (a model) that every download shares, so a thousand downloads hold one copy; only its
  // bytes [shared_offset, shared_offset + shared_length) go out (a range of it).
  std::shared_ptr<const std::string> shared_body;
  size_t shared_offset = 0;
  size_t shared_length = SIZE_MAX;
  std::function<std::optional<Response>()> poll;
  std::function<Response()> empty;  // set with `poll`
  double wait_s = 0;
  // watch(wake) arranges one call of `wake` when poll() may have an answer (from another
  // thread) and returns a handle for unwatch(); set with `poll`.
  std::function<uint64_t(std::function<void()>)> watch;
  std::function<void(uint64_t)> unwatch;
};

// What the front end knows about a request beyond its bytes.
struct RequestContext {
  double receive_seconds = 0;  // how long the body took to arrive (a client's upload speed)
  std::string peer;            // the client's address; empty when unknown
  // The connection dropped while an upload's body arrived: the request's body holds the bytes
  // that did, from the first, and its answer goes nowhere. A handler keeps what it can of it
  // (a chunk of an upload session its whole pieces) or refuses it.
  bool body_cut_short = false;
};

// The message a caller sees for every internal error; the details go to the log only.
inline constexpr std::string_view kInternalErrorMessage = "internal error";

// A JSON error response: {"error":{"code":"...","message":"..."}} with the status's HTTP code.
// An internal error's own message is logged and replaced by kInternalErrorMessage.
Response error_response(const Status& status, unsigned http_version, bool keep_alive);

// The application behind the front end. Every method is called from the front end's I/O and
// handler threads at once, so implementations must be thread-safe, and none may throw.
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;

  // Whether the request is an update upload (a large binary body that waits for an upload
  // slot before it is read).
  virtual bool is_upload(const http::request_header<>& header) const = 0;
  // A bounded label of the route a request targets, for metrics.
  virtual std::string_view route_label(const http::request_header<>& header) const = 0;
  // The body limit for a request whose header has arrived.
  virtual uint64_t body_limit(const http::request_header<>& header) const = 0;
  // The largest body_limit() any request may get.
  virtual uint64_t largest_body_limit() const = 0;
  // Checked as soon as an upload's header arrives, before its body takes a slot: the
  // refusal, or nullopt to read the body.
  virtual std::optional<Response> refuse_upload(const Request& header, const std::string& peer) = 0;
  // The answer to one complete request.
  virtual Reply handle(const Request& request, const RequestContext& context) = 0;
};

}  // namespace fedcase::server
