#pragma once
// The coordinator's durable state. Everything a restart must not lose goes through a Store:
// clients (with token hashes and profiles), jobs, rounds, accepted updates' metadata, and every
// committed global model. Implementations are thread-safe; every method is one transaction.
// Errors are Status values, never exceptions: kInternal for an I/O failure or a corrupt row.

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/states.h"
#include "common/status.h"

namespace fedcase::storage {

struct ClientRecord {
  ClientId id = 0;           // assigned by add_client
  std::string token_hash;    // SHA-256 hex of the bearer token; the token itself is never kept
  nlohmann::json info;       // registration: device, dataset size, cache capacity, SDK version
  nlohmann::json profile;    // scheduling profile, owned by the scheduler
  double registered_at = 0;  // unix seconds
  double last_seen = 0;
};

struct JobRecord {
  JobId id = 0;  // assigned by create_job
  std::string name;
  nlohmann::json config;  // the validated job config
  JobState state = JobState::kRunning;
  nlohmann::json policy_state;  // selection policy state, saved with each committed round
  double created_at = 0;
  TenantId tenant = 0;  // who owns the job; 0: the operator (admin token)
};

// A team sharing the coordinator: its own token, and its weight and limits in the fair share
// of the fleet (docs/tenancy.md).
struct TenantRecord {
  TenantId id = 0;         // assigned by add_tenant, from 1
  std::string name;        // unique
  std::string token_hash;  // SHA-256 hex of the tenant's bearer token
  double weight = 1;
  nlohmann::json limits = nlohmann::json::object();  // as validated by the coordinator
  double created_at = 0;
};

// A committed round r produces model version r, so versions skip the indices of failed rounds.
struct RoundRecord {
  JobId job = 0;
  RoundIndex index = 0;
  RoundState state = RoundState::kOpen;
  uint64_t base_version = 0;  // the model version the round trains from
  std::vector<ClientId> selected;
  double opened_at = 0;
  double deadline = 0;
  double closed_at = 0;
  nlohmann::json metrics = nlohmann::json::object();  // accuracy, loss, who finished/dropped...
};

struct UpdateRecord {
  JobId job = 0;
  RoundIndex round = 0;
  ClientId client = 0;
  nlohmann::json meta;  // the client's reported statistics
  double received_at = 0;
};

struct ModelRecord {
  JobId job = 0;
  uint64_t version = 0;
  std::string blob;             // encoded model blob (common/blob.h)
  std::string checksum;         // blob_checksum(blob)
  std::string optimizer_state;  // the server optimizer's state after producing this model
  double created_at = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // Clients. add_client returns the new id; kConflict if the token hash is already used.
  virtual Result<ClientId> add_client(const ClientRecord& client) = 0;
  virtual Result<ClientRecord> get_client(ClientId id) = 0;
  virtual Result<std::vector<ClientRecord>> list_clients() = 0;
  // Saves the profile and last_seen of each record, in one transaction; kNotFound (nothing
  // saved) if any id is unknown.
  virtual Status update_clients(const std::vector<ClientRecord>& clients) = 0;

  // Jobs. create_job stores the job, its initial model (version 0) and its module (the
  // TorchScript archive clients run; empty: none) together.
  virtual Result<JobId> create_job(const JobRecord& job, const ModelRecord& initial_model,
                                   const std::string& module) = 0;
  // The module stored with the job; kNotFound when it has none.
  virtual Result<std::string> get_job_module(JobId id) = 0;
  virtual Result<JobRecord> get_job(JobId id) = 0;
  virtual Result<std::vector<JobRecord>> list_jobs() = 0;
  virtual Status set_job_state(JobId id, JobState state) = 0;

  // Tenants. add_tenant returns the new id; kConflict if the name or token hash is taken.
  virtual Result<TenantId> add_tenant(const TenantRecord& tenant) = 0;
  virtual Result<std::vector<TenantRecord>> list_tenants() = 0;

  // Rounds. open_round fails with kConflict if the round exists.
  virtual Status open_round(const RoundRecord& round) = 0;
  // An accepted update's metadata. It is durable once its round concludes (commit_round or
  // fail_round), not necessarily before: a crash before that leaves the round open, and the
  // next start fails it, so no sync is spent on each of a round's many updates.
  virtual Status record_update(const UpdateRecord& update) = 0;
  // Atomically: the round becomes committed with its metrics, the model is stored, and the
  // job's policy state is saved. Either all of it is durable or none.
  virtual Status commit_round(const RoundRecord& round, const ModelRecord& model,
                              const nlohmann::json& policy_state) = 0;
  virtual Status fail_round(const RoundRecord& round) = 0;
  // Merges `metrics` into a closed round's metrics (e.g. its evaluation, which comes later).
  virtual Status add_round_metrics(JobId job, RoundIndex round, const nlohmann::json& metrics) = 0;
  virtual Result<std::vector<RoundRecord>> list_rounds(JobId job) = 0;
  virtual Result<std::vector<UpdateRecord>> list_updates(JobId job, RoundIndex round) = 0;

  // Models.
  virtual Result<ModelRecord> get_model(JobId job, uint64_t version) = 0;
  virtual Result<ModelRecord> latest_model(JobId job) = 0;
};

// Opens (creating if needed) the SQLite database at `path` in WAL mode and migrates its schema
// to the current version. kInternal with SQLite's message if the file cannot be used, and
// kInvalidArgument if it was written by a newer schema version.
Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path);

}  // namespace fedcase::storage
