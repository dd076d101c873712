#pragma once
// The client SDK's session with a coordinator: register, poll for tasks, download the model
// (cached by version), train on the local partition as the task directs (sampling, sample
// budget, cache; see local_trainer.h), upload the update with its statistics.
// Survives coordinator restarts: transient failures are retried with exponential backoff and
// jitter, and an unknown token leads to registering again.
// One Session per client thread; run() blocks until `stop` becomes true.

#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client_sdk/compute_slots.h"
#include "client_sdk/http_client.h"
#include "client_sdk/sample_store.h"
#include "common/ids.h"
#include "common/status.h"
#include "ml/dataset.h"

namespace fedcase::client {

struct SessionConfig {
  ConnectionOptions coordinator;  // host, port and TLS
  std::string enrollment_token;
  std::string name;                   // for logs: "client-7"
  const ml::Dataset* data = nullptr;  // shared, read-only; must outlive the session
  std::vector<size_t> indices;        // this client's partition of `data`
  nlohmann::json device = nlohmann::json::object();
  uint64_t seed = 1;  // local shuffling and sampling
  // Where the client keeps its sample store and state (sampler weights) across restarts.
  // Empty: samples are read from memory, no I/O is emulated and nothing is persisted.
  std::string state_dir;
  StorageEmulation storage;           // the emulated device behind the store (with state_dir)
  uint64_t cache_capacity_bytes = 0;  // reported at registration, caps task cache budgets; 0 = none
  // Shared by the clients of one process that stand in for separate devices: a training runs
  // only while it holds a slot (compute_slots.h). Null: no bound.
  std::shared_ptr<ComputeSlots> compute_slots;
  double poll_wait_s = 10;  // long-poll wait per task request
  double request_timeout_s = 60;
  double max_backoff_s = 5;
};

struct SessionStats {
  std::atomic<uint64_t> rounds_trained{0};
  std::atomic<uint64_t> updates_accepted{0};
  std::atomic<uint64_t> updates_refused{0};
  std::atomic<uint64_t> updates_skipped{0};  // not sent: the round no longer needed them
  std::atomic<uint64_t> model_downloads{0};
  std::atomic<uint64_t> reconnects{0};
};

class Session {
 public:
  explicit Session(SessionConfig config);
  ~Session();

  // Works until `stop` is set: registers, then loops over poll -> train -> upload.
  void run(const std::atomic<bool>& stop);

  ClientId client_id() const;
  const SessionStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedcase::client
