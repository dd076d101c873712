#pragma once
// A running coordinator: core, HTTP API and round driver, started and stopped together.
// Used by the fedcase-coordinator binary and by tests (port 0 gives each test its own port).

#include <memory>

#include "server/core/coordinator.h"

namespace fedcase::server {

class CoordinatorService {
 public:
  // Opens the coordinator (store, evaluation data, recovery), binds, and starts serving.
  // Writes the bound port to config.port_file when set.
  static Result<std::unique_ptr<CoordinatorService>> start(const CoordinatorConfig& config);
  ~CoordinatorService();

  uint16_t port() const;
  Coordinator& coordinator();
  // Graceful stop: stops accepting, lets requests in flight finish (up to
  // config.drain_timeout_s), stops the HTTP server (joining its handlers), then concludes the
  // open rounds (commit or fail, never left open). Idempotent.
  void stop();

 private:
  struct Impl;
  explicit CoordinatorService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedcase::server
