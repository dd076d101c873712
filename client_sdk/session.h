#pragma once
// The client SDK's session with a coordinator: what an edge app embeds. Configure it with the
// app's Trainer (trainer.h) and SampleSources (sample_source.h), then call run() on a thread
// of its own: it registers, polls for tasks, downloads the job's model (and module, cached by
// version and checksum), evaluates the model on the held-out samples when the task asks,
// trains on the local samples as the task directs (sampling, sample budget, cache;
// local_data.h) and uploads the update with its statistics. A job with secure aggregation
// runs through its stages (secure_task.h): keys before training, the masked update instead of
// the plain one, the unmask answer after it.
// Survives coordinator restarts: transient failures are retried with exponential backoff and
// jitter, and an unknown token leads to registering again. Given several coordinator replicas,
// a request that cannot reach one goes to the next (SessionConfig::replicas).
// One Session per thread; run() blocks until `stop` becomes true. See docs/client_sdk.md.

#include <atomic>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client_sdk/compute_slots.h"
#include "client_sdk/http_client.h"
#include "client_sdk/sample_source.h"
#include "client_sdk/trainer.h"
#include "common/ids.h"
#include "common/status.h"

namespace fedcase::client {

struct SessionConfig {
  ConnectionOptions coordinator;  // host, port and TLS (CA file, client certificate)
  // Other replicas of the same coordinator (docs/scaling.md), tried in turn after
  // `coordinator`: a request that cannot reach the current address (connection refused or
  // lost, a TLS failure, a timeout) is sent at once to the next one, each address at most once
  // per request, and the session stays on the address that answered. A retried upload never
  // counts twice: the coordinators refuse a client's second update to a round (409). Empty:
  // `coordinator` only.
  std::vector<ConnectionOptions> replicas;
  std::string enrollment_token;
  std::string name;  // for logs: "client-7"
  // The app's model code and data; shared with the app, used by the session's thread only
  // while run() runs. trainer and train_data are required.
  std::shared_ptr<Trainer> trainer;
  std::shared_ptr<SampleSource> train_data;
  std::shared_ptr<SampleSource> eval_data;  // held-out samples for federated evaluation; optional
  // Registration (protocol/registration.h): what the client tells the coordinator about
  // itself. `device` may carry speeds the scheduler uses (docs/protocol.md); `labels` let jobs
  // pick clients.
  nlohmann::json device = nlohmann::json::object();
  std::map<std::string, std::string> labels;
  uint64_t cache_capacity_bytes = 0;  // caps task cache budgets; 0 = none
  uint64_t seed = 1;                  // local shuffling and sampling
  // Where the session keeps its state across app restarts (the sampler's weights); empty:
  // nothing is persisted.
  std::string state_dir;
  // Shared by the clients of one process that stand in for separate devices: a training runs
  // only while it holds a slot (compute_slots.h). Null: no bound.
  std::shared_ptr<ComputeSlots> compute_slots;
  // Take part only in jobs with secure aggregation: a task whose update would travel in the
  // clear is declined (logged, not trained). Tasks of jobs with secure aggregation are run
  // through its stages whatever this says.
  bool require_secure_aggregation = false;
  double poll_wait_s = 10;  // long-poll wait per task request
  double request_timeout_s = 60;
  double max_backoff_s = 5;
  // Without a coordinator (an outage), when to try again: at a random point of this window,
  // then a window apart, so a fleet's returns spread over it (check_in_pacer.h). The
  // coordinator's answers replace it with the operator's (docs/protocol.md, "Pace steering").
  double reconnect_window_s = 30;
};

struct SessionStats {
  std::atomic<uint64_t> rounds_trained{0};
  std::atomic<uint64_t> rounds_failed{0};  // the trainer or the data failed: nothing was sent
  std::atomic<uint64_t> updates_accepted{0};
  std::atomic<uint64_t> updates_refused{0};
  std::atomic<uint64_t> updates_skipped{0};  // not sent: the round no longer needed them
  std::atomic<uint64_t> tasks_declined{0};   // plain tasks, with require_secure_aggregation
  std::atomic<uint64_t> unmask_answers{0};   // secure rounds: unmask requests answered
  // Secure asynchronous jobs: updates reported ready, kept for a cohort.
  std::atomic<uint64_t> ready_reports{0};
  std::atomic<uint64_t> model_downloads{0};
  // Of those, the ones that fetched only the part of the model its job trains.
  std::atomic<uint64_t> trainable_downloads{0};
  std::atomic<uint64_t> download_resumes{0};  // downloads cut off and resumed at their byte
  // Updates sent in chunks (an upload session): chunks cut off and sent again from where the
  // coordinator stood, and the update bytes put on the wire in chunks, resent ones included.
  std::atomic<uint64_t> upload_resumes{0};
  std::atomic<uint64_t> chunk_bytes_sent{0};
  std::atomic<uint64_t> reconnects{0};
  std::atomic<uint64_t> failovers{0};  // requests sent on to another replica
};

class Session {
 public:
  // Checks the config and opens the local data (restoring the state in state_dir).
  // kInvalidArgument for a missing trainer or training source, an empty source, bad TLS
  // options or a `device` whose measurements are not finite numbers >= 0
  // (protocol::read_device_info); kInternal when state_dir cannot be created.
  static Result<std::unique_ptr<Session>> create(SessionConfig config);
  ~Session();

  // Works until `stop` is set: registers, then loops over poll -> train -> upload.
  void run(const std::atomic<bool>& stop);

  ClientId client_id() const;
  const SessionStats& stats() const;

 private:
  struct Impl;
  explicit Session(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedcase::client
