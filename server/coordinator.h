#pragma once
// The coordinator's core: clients, jobs and the round state machine, with no network in it.
// The HTTP layer (api.h) maps requests onto these methods; tests can call them directly.
//
// Thread safety: every public method may be called from any thread. A driver thread (started
// by start_driver) opens and closes rounds; the expensive part of closing a round (server
// optimizer step, commit) runs without blocking uploads to other jobs. Each committed model is
// evaluated on the test set by a separate thread and its accuracy added to the round's metrics
// when ready, so the next round does not wait for it.
//
// Durability: a round's model and its `committed` state are written in one store transaction
// before any client can see the new model. On open(), rounds a crash left open are marked
// failed and each job resumes from its latest committed model.

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/ids.h"
#include "common/status.h"
#include "server/config.h"

namespace fedcase::server {

struct ModelDownload {
  uint64_t version = 0;
  std::string checksum;                     // also the HTTP ETag
  std::shared_ptr<const std::string> blob;  // encoded model blob
};

enum class Role { kNone, kAdmin, kEnrollment, kClient };
struct Caller {
  Role role = Role::kNone;
  ClientId client = 0;  // for kClient
};

class Coordinator {
 public:
  // Opens the store and the evaluation data, and recovers jobs. kInternal / kNotFound with a
  // clear message when the database or the evaluation set cannot be used.
  static Result<std::unique_ptr<Coordinator>> open(const CoordinatorConfig& config);
  ~Coordinator();

  const CoordinatorConfig& config() const;

  // Starts / stops the thread that calls tick() every 50 ms (and at once when a round fills).
  void start_driver();
  void stop_driver();

  // Who presents `bearer_token`: the admin, the enrollment key, a registered client, or nobody.
  Caller identify(std::string_view bearer_token) const;

  // ---- client API (callers already authenticated) ----
  // {"device":{...}, "dataset_size":N, "cache_capacity_bytes":N, "sdk_version":"..."}
  // -> {"client_id":..., "token":"..."}; the token is shown only here.
  Result<nlohmann::json> register_client(const nlohmann::json& request);
  Result<nlohmann::json> heartbeat(ClientId client, const nlohmann::json& request);
  // The client's pending task, or nullopt when it has none now. Counts as a heartbeat.
  Result<std::optional<nlohmann::json>> next_task(ClientId client);
  Result<ModelDownload> model(JobId job, uint64_t version);
  // Whether the round still wants `client`'s update: {"needed": bool, "reason": "..."}. A
  // client asks before uploading, so a straggler whose round filled or closed learns that its
  // work is no longer needed without sending it. 404 for an unknown job.
  Result<nlohmann::json> task_status(ClientId client, JobId job, RoundIndex round);
  // Validates and folds an update (encoded blob of the delta local - global) into the round.
  // 404 unknown job; 409 round not open, full or already uploaded; 403 client not invited;
  // 400 bad metadata or blob; 422 wrong layout, version, non-finite values or norm.
  // A refused update changes no stored or aggregated state (a 422 counts as a failure in the
  // client's profile). `upload_seconds` is how long the body took to arrive (0: unknown).
  Result<nlohmann::json> submit_update(ClientId client, JobId job, RoundIndex round,
                                       const nlohmann::json& meta, std::string_view blob,
                                       double upload_seconds = 0);

  // ---- admin API ----
  Result<nlohmann::json> create_job(const nlohmann::json& config);
  Result<nlohmann::json> list_jobs();
  Result<nlohmann::json> job_detail(JobId job);
  Result<nlohmann::json> list_clients();
  // action: "pause", "resume" or "cancel". kConflict when the job's state does not allow it.
  Result<nlohmann::json> control_job(JobId job, const std::string& action);

  // Advances every job once (see class comment). Public so tests can drive rounds directly.
  void tick();

 private:
  struct State;
  explicit Coordinator(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace fedcase::server
