#pragma once
// HTTP routing of the client and admin APIs onto the Coordinator (docs/protocol.md). Plain
// functions over Beast message types: testable without sockets.

#include <boost/beast/http.hpp>
#include <functional>
#include <optional>

#include "server/coordinator.h"
#include "server/rate_limiter.h"

namespace fedcase::server {

namespace http = boost::beast::http;
using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

// What the router answers. When `poll` is set the request is a long poll: for up to `wait_s`
// seconds the session calls poll() once at the start and again whenever `watch` wakes it (no
// periodic re-check), and sends its first response, or `response` (204 No Content) when the
// wait ends empty.
struct Reply {
  Response response;
  // When set, the body sent with `response`'s header instead of its own: an immutable blob
  // (a model) that every download shares, so a thousand downloads hold one copy.
  std::shared_ptr<const std::string> shared_body;
  std::function<std::optional<Response>()> poll;
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
};

// A JSON error response: {"error":{"code":"...","message":"..."}} with the status's HTTP code.
Response error_response(const Status& status, unsigned http_version, bool keep_alive);

class Api {
 public:
  explicit Api(Coordinator& coordinator);

  // Whether the request is an update upload (a large binary body).
  static bool is_upload(const http::request_header<>& header);
  // The route a request targets, as a template with its ids elided
  // ("/v1/jobs/{job}/rounds/{round}/update"), or "other": a bounded label for metrics.
  static std::string_view route_template(const http::request_header<>& header);
  // The body limit for a request whose header has arrived: an update upload max_upload_bytes;
  // a multipart job creation by the admin or a tenant (a config and a model file)
  // max_model_bytes + max_json_bytes; everything else is JSON, max_json_bytes.
  uint64_t body_limit(const http::request_header<>& header) const;
  // The largest body_limit() any request may get.
  uint64_t largest_body_limit() const;

  // Checked as soon as an upload's header arrives, before its body takes a slot: the error
  // response unless the bearer token is a registered client's (401, 429 per address as in
  // handle(), 403 for another role). Thread-safe.
  std::optional<Response> refuse_upload(const Request& header, const std::string& peer);
  // Authenticates, rate-limits, validates and dispatches one request. Requests without a
  // known token are limited per peer address (429 beyond the limit, else 401); the
  // dashboard's static files need no token (they hold no data). Never throws.
  // Thread-safe: handlers run on several threads at once.
  Reply handle(const Request& request, const RequestContext& context = {});

 private:
  // Identifies the bearer token into `caller`; for an unknown one, the refusal (429 when its
  // address is over unauthenticated_per_second, else 401).
  std::optional<Response> refuse_unknown(const Request& header, const std::string& peer,
                                         Caller& caller);
  Reply route(const Request& request, const Caller& caller, double receive_seconds);
  // A dashboard file, "/" and "/dashboard" redirected to the page, or nullopt for any other
  // target.
  std::optional<Reply> dashboard(const Request& request);
  Coordinator& coordinator_;
  RateLimiter limiter_;                  // per token
  RateLimiter unauthenticated_limiter_;  // per peer address, for requests without a known token
};

}  // namespace fedcase::server
