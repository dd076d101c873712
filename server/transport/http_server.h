#pragma once
// The coordinator's HTTP/1.1 front end (Boost.Beast), plain or TLS (config.tls): a listener
// accepts connections (within max_connections and max_connections_per_ip), each session reads
// a request within the idle and read timeouts and the route's body limit (update bodies also
// wait for one of max_upload_bodies slots), hands it to a handler thread, and writes the reply
// back on its own strand, so no handler ever delays another connection's reads and writes.
// Long polls wait on a timer and a wake-up, never on a thread.

#include <memory>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/core/base/config.h"
#include "server/core/base/metrics.h"
#include "server/transport/handler.h"

namespace fedcase::server {

class HttpServer {
 public:
  // `handler` answers the requests; it, `config` and `metrics` (requests, bytes, open
  // connections, waiting polls) must outlive the server.
  HttpServer(RequestHandler& handler, const CoordinatorConfig& config, Metrics& metrics);
  ~HttpServer();

  // Binds config.listen_address:config.port (0 picks a free port) and starts the I/O threads.
  // kUnavailable with the system's message when the address cannot be bound.
  Status start();
  uint16_t port() const;
  bool tls() const;
  size_t open_connections() const;
  // Graceful stop, first half: stops accepting, closes idle connections, answers waiting long
  // polls, lets requests in flight (uploads included) finish and closes their connections
  // after the answer. Returns once no connection is open (true) or `timeout_s` has passed.
  bool drain(double timeout_s);
  // Stops accepting, closes connections and joins the I/O and handler threads. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedcase::server
