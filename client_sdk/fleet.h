#pragma once
// Many SDK clients in one process, one thread and one HTTP connection each, every client
// training a built-in model (builtin_trainer.h) on its own Dirichlet partition of a shared
// Fashion-MNIST-shaped dataset. For demos, tests and load: one user of the SDK's public
// interface (session.h), as an edge app would be.

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client_sdk/record_file.h"
#include "client_sdk/session.h"
#include "ml/dataset.h"

namespace fedcase::client {

struct FleetConfig {
  ConnectionOptions coordinator;            // host, port and TLS
  std::vector<ConnectionOptions> replicas;  // SessionConfig::replicas
  std::string enrollment_token;
  size_t clients = 10;
  double alpha = 0.5;  // Dirichlet label concentration of the partition
  uint64_t seed = 1;
  double poll_wait_s = 10;
  const ml::Dataset* data = nullptr;  // read while the fleet starts
  // Per-client record files and state under <state_dir>/client-<i>; empty = samples in memory.
  std::string state_dir;
  uint64_t sample_bytes = 0;          // record file records (padded); 0 = the record size
  StorageEmulation storage;           // every client's emulated device (with state_dir)
  uint64_t cache_capacity_bytes = 0;  // every client's cache capacity; 0 = none reported
  // How many clients may train at once (compute_slots.h); 0 = no bound. A slot is held for
  // the whole local round, emulated storage reads included.
  size_t concurrent_training = 0;
  // Every client declines tasks of jobs without secure aggregation (SessionConfig).
  bool require_secure_aggregation = false;
};

class Fleet {
 public:
  // Partitions the data and starts every client thread. kInvalidArgument when the data cannot
  // be split among `clients`.
  static Result<std::unique_ptr<Fleet>> start(const FleetConfig& config);
  ~Fleet();  // stops and joins

  // Asks every client to stop and joins their threads. Idempotent.
  void stop();
  size_t size() const { return sessions_.size(); }
  const Session& session(size_t i) const { return *sessions_[i]; }
  // Sums of the per-session counters.
  uint64_t rounds_trained() const;
  uint64_t updates_accepted() const;
  uint64_t updates_skipped() const;
  uint64_t failovers() const;
  uint64_t download_resumes() const;
  uint64_t upload_resumes() const;
  uint64_t chunk_bytes_sent() const;

 private:
  Fleet() = default;
  template <class Counter>
  uint64_t sum(Counter counter) const {
    uint64_t n = 0;
    for (const auto& s : sessions_) n += counter(s->stats());
    return n;
  }
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Session>> sessions_;
  std::vector<std::thread> threads_;
};

}  // namespace fedcase::client
