#pragma once
// HTTP routing of the client and admin APIs onto the Coordinator (docs/protocol.md). Plain
// functions over Beast message types: testable without sockets.

#include <optional>

#include "server/api/rate_limiter.h"
#include "server/core/coordinator.h"
#include "server/transport/handler.h"

namespace fedcase::server {

class Api : public RequestHandler {
 public:
  explicit Api(Coordinator& coordinator);

  // Whether the request is an update upload (a large binary body).
  bool is_upload(const http::request_header<>& header) const override;
  // The route a request targets, as a template with its ids elided
  // ("/v1/jobs/{job}/rounds/{round}/update"), "/dashboard" for the dashboard's files, or
  // "other".
  std::string_view route_label(const http::request_header<>& header) const override;
  // The body limit for a request whose header has arrived: an update upload max_upload_bytes;
  // a multipart job creation by the admin or a tenant (a config and a model file)
  // max_model_bytes + max_json_bytes; everything else is JSON, max_json_bytes.
  uint64_t body_limit(const http::request_header<>& header) const override;
  // The largest body_limit() any request may get.
  uint64_t largest_body_limit() const override;

  // Checked as soon as an upload's header arrives, before its body takes a slot: the error
  // response unless the bearer token is a registered client's (401, 429 per address as in
  // handle(), 403 for another role). Thread-safe.
  std::optional<Response> refuse_upload(const Request& header, const std::string& peer) override;
  // Authenticates, rate-limits, validates and dispatches one request. Requests without a
  // known token are limited per peer address (429 beyond the limit, else 401); the
  // dashboard's static files need no token (they hold no data). Never throws.
  // Thread-safe: handlers run on several threads at once.
  Reply handle(const Request& request, const RequestContext& context = {}) override;

 private:
  // Identifies the bearer token into `caller`; for an unknown one, the refusal (429 when its
  // address is over unauthenticated_per_second, else 401).
  std::optional<Response> refuse_unknown(const Request& header, const std::string& peer,
                                         Caller& caller);
  Reply route(const Request& request, const Caller& caller, const RequestContext& context);
  // A dashboard file, "/" and "/dashboard" redirected to the page, or nullopt for any other
  // target.
  std::optional<Reply> dashboard(const Request& request);
  // GET /healthz, the readiness check a load balancer sends without a token: 200 when the
  // replica reaches its database (Coordinator::database_health), 503 otherwise, naming the
  // replica in its body and in X-Fedcase-Replica, and nothing about the database but whether
  // it answers. nullopt for any other target.
  std::optional<Reply> health(const Request& request);
  Coordinator& coordinator_;
  RateLimiter limiter_;                  // per token
  RateLimiter unauthenticated_limiter_;  // per peer address, for requests without a known token
};

}  // namespace fedcase::server
