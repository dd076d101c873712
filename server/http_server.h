#pragma once
// The coordinator's HTTP/1.1 front end (Boost.Beast): a listener accepts connections, each
// session reads a request header, applies the route's body limit and the read timeout, asks the
// Api for a reply (long polls wait on a timer, never on a thread), and writes it back.

#include <memory>
#include <thread>
#include <vector>

#include "common/status.h"
#include "server/api.h"

namespace fedcase::server {

class HttpServer {
 public:
  HttpServer(Api& api, const CoordinatorConfig& config);
  ~HttpServer();

  // Binds config.listen_address:config.port (0 picks a free port) and starts the I/O threads.
  // kUnavailable with the system's message when the address cannot be bound.
  Status start();
  uint16_t port() const;
  // Stops accepting, closes connections and joins the I/O threads. Idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedcase::server
