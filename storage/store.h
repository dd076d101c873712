#pragma once
// The coordinator's durable state. Everything a restart must not lose goes through a Store:
// clients (with token hashes and profiles), jobs, rounds, accepted updates' metadata, and every
// committed global model.
//
// Every backend meets the same contract (tests/storage/store_contract.h runs it):
//  - Thread safety: implementations are thread-safe, and several stores may be open on one
//    database at once (a reader beside the coordinator, another process); each sees what the
//    others committed.
//  - Every method is one transaction: it takes effect whole or not at all, and a reader sees
//    all of it or none of it.
//  - Ids of clients, jobs and tenants are assigned by the store, from 1, increasing, and never
//    given to another record; the id a record passed in carries is ignored.
//  - Lists come in order: clients, jobs and tenants by id, rounds by index, a round's updates
//    by received_at. A list of nothing (an unknown job's rounds) is empty, not an error.
//  - Errors are Status values, never exceptions: kNotFound for a record the store does not
//    hold; kConflict for a write the stored state refuses (a duplicate, a round that is not
//    open, a reference to a record the store does not hold), which then changes nothing;
//    kInvalidArgument as the openers below say; kInternal for an I/O failure or a corrupt row.

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
  // kNotFound for an unknown id.
  virtual Result<ClientRecord> get_client(ClientId id) = 0;
  virtual Result<std::vector<ClientRecord>> list_clients() = 0;
  // Saves the profile and last_seen of each record (its other fields are ignored), in one
  // transaction; kNotFound (nothing saved) if any id is unknown.
  virtual Status update_clients(const std::vector<ClientRecord>& clients) = 0;

  // Jobs. create_job stores the job, its initial model and its module (the TorchScript archive
  // clients run; empty: none) together, and returns the new id; the model is stored under
  // that id (its `job` is ignored) with the version it carries (0 in every caller).
  virtual Result<JobId> create_job(const JobRecord& job, const ModelRecord& initial_model,
                                   const std::string& module) = 0;
  // The module stored with the job, byte for byte; kNotFound when it has none or the job is
  // unknown.
  virtual Result<std::string> get_job_module(JobId id) = 0;
  // kNotFound for an unknown id.
  virtual Result<JobRecord> get_job(JobId id) = 0;
  virtual Result<std::vector<JobRecord>> list_jobs() = 0;
  // Any state may follow any other here (the lifecycle is the coordinator's); kNotFound for
  // an unknown id.
  virtual Status set_job_state(JobId id, JobState state) = 0;

  // Tenants. add_tenant returns the new id; kConflict if the name or token hash is taken.
  virtual Result<TenantId> add_tenant(const TenantRecord& tenant) = 0;
  virtual Result<std::vector<TenantRecord>> list_tenants() = 0;

  // Rounds, named by (job, index). open_round stores the round as open (whatever its
  // `state`); kConflict if the job already has a round of that index (open or concluded) or
  // the job is unknown.
  virtual Status open_round(const RoundRecord& round) = 0;
  // An accepted update's metadata; kConflict if the client already has an update in that
  // round, or the round or the client is unknown. Admission is the caller's: the store does
  // not check that the round is still open. The update is durable once its round concludes
  // (commit_round or fail_round), not necessarily before: a crash before that leaves the round
  // open, and the next start fails it, so no sync is spent on each of a round's many updates.
  virtual Status record_update(const UpdateRecord& update) = 0;
  // Atomically: the round becomes committed with its closed_at and metrics (the round's other
  // fields are those open_round stored), the model is stored under (model.job, model.version),
  // and the job's policy state is saved. Either all of it is durable or none. kConflict, and
  // nothing changes, if the round is not open (unknown, committed or failed) or the model's
  // version is already stored.
  virtual Status commit_round(const RoundRecord& round, const ModelRecord& model,
                              const nlohmann::json& policy_state) = 0;
  // The round becomes failed with its closed_at and metrics; no model. kConflict if the round
  // is not open.
  virtual Status fail_round(const RoundRecord& round) = 0;
  // Merges `metrics` into a concluded round's metrics (e.g. its evaluation, which comes later):
  // each top-level key of `metrics` replaces or adds that key. kNotFound if the round is
  // unknown or still open.
  virtual Status add_round_metrics(JobId job, RoundIndex round, const nlohmann::json& metrics) = 0;
  virtual Result<std::vector<RoundRecord>> list_rounds(JobId job) = 0;
  virtual Result<std::vector<UpdateRecord>> list_updates(JobId job, RoundIndex round) = 0;

  // Models. kNotFound for a version (or a job) without a model; latest_model is the highest
  // version stored.
  virtual Result<ModelRecord> get_model(JobId job, uint64_t version) = 0;
  virtual Result<ModelRecord> latest_model(JobId job) = 0;
};

// Where a store lives, as a URL: "<scheme>:<location>".
struct StoreUrl {
  std::string scheme;    // lower case: "sqlite"
  std::string location;  // sqlite: the database file's path, relative to the working directory
};

// The schemes open_store knows, for messages: "sqlite".
const char* known_store_schemes();

// Parses a store URL: "sqlite:PATH", or a plain PATH, which is SQLite's (configs written before
// URLs). A URL's scheme is the letters, digits, '+', '-' and '.' before its first ':', starting
// with a letter and matched without regard to case; anything else, a '/' before the first ':'
// included, is a plain path. Pure. kInvalidArgument for an empty URL or location, or a scheme
// that is not known (the message names the known ones).
Result<StoreUrl> parse_store_url(const std::string& url);

// Opens the store `url` names (parse_store_url) with that backend's opener below: its errors,
// and kInvalidArgument for a URL parse_store_url refuses. The caller owns the store.
Result<std::unique_ptr<Store>> open_store(const std::string& url);

// Opens (creating if needed) the SQLite database at `path` in WAL mode and migrates its schema
// to the current version. kInternal with SQLite's message if the file cannot be used, and
// kInvalidArgument if it was written by a newer schema version. Several stores may be open on
// one file at once (in one process or several); each sees what the others committed.
Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path);

}  // namespace fedcase::storage
