#pragma once
// The coordinator's durable state. Everything a restart must not lose goes through a Store:
// clients (with token hashes and profiles), jobs, rounds, accepted updates' metadata, and every
// committed global model; and, for coordinator replicas sharing one database, who owns which
// job (leases with epochs), which updates a round admits, the replicas' partial aggregates,
// the tenants' service counters, and wake-ups between replicas (docs/scaling.md, "Storage").
// Backends, which open_store picks by URL: SQLite (the embedded default), PostgreSQL (shared by
// coordinator replicas), and one in this process's memory (storage/memory_store.h): the seam
// for fast unit tests of the code above a store, which keeps the contract but durability.
//
// Every backend meets the same contract (tests/storage/store_contract.h runs it):
//  - Thread safety: implementations are thread-safe, and several stores may be open on one
//    database at once (a reader beside the coordinator, another process, another replica);
//    each sees what the others committed.
//  - Every method is one transaction: it takes effect whole or not at all, and a reader sees
//    all of it or none of it.
//  - Ids of clients, jobs and tenants are assigned by the store, from 1, increasing, and never
//    given to another record; the id a record passed in carries is ignored.
//  - Lists come in order: clients, jobs and tenants by id, rounds by index, a round's updates
//    by received_at. A list of nothing (an unknown job's rounds) is empty, not an error.
//  - Errors are Status values, never exceptions: kNotFound for a record the store does not
//    hold; kConflict for a write the stored state refuses (a duplicate, a round that is not
//    open, a reference to a record the store does not hold, a stale lease epoch), which then
//    changes nothing; kInvalidArgument as the openers below say; kUnavailable when the
//    database cannot be reached or cannot serve now (the connection was lost: nothing was
//    written, or, for a write whose commit was under way, it is unknown whether it was; the
//    next call reconnects; or the server is shutting down, out of connections, or gave up a
//    transaction on a deadlock: try again); kInternal for an I/O failure or a corrupt row.
//  - Bytes: models, optimizer states, modules and partials are kept byte for byte; every other
//    string (names, token hashes, checksums, holders, replicas) is UTF-8 text without NUL,
//    which PostgreSQL holds to (kInvalidArgument otherwise). JSON is kept as its text.
//  - Time: lease expiries run on the database's clock, read when each statement runs
//    (PostgreSQL's clock_timestamp(), never the transaction's start; for SQLite, the one
//    machine's clock), so that the replicas' clocks do not matter. Every other time
//    (opened_at, received_at, ...) is the caller's and is stored as given.
//  - Messages: an error's message names the job, round, client or state concerned and may
//    reach the API's callers; what the database itself said (hosts, sockets, database names)
//    and replicas' names go in the Status's detail, for the log only.
//
// Leases and fencing. Each job has a lease row from its creation, at epoch kUnleased (0) with
// no holder. acquire_lease gives the job to one replica and increments the epoch; every write
// a job's owner makes (open_round, close_admission, commit_round, fail_round, set_job_state)
// carries the epoch it holds, and the store refuses it with kConflict, changing nothing, when
// the job's epoch is another, checked in the write's own transaction with the lease row locked
// against acquisition. So once a replica has acquired a job, no write of an earlier owner can
// land after its acquisition, however long that owner was frozen. A single coordinator takes
// no lease and writes at kUnleased, which is the epoch of a job nobody ever acquired; once a
// replica acquires the job, such writes are refused too. The epoch, not the expiry, decides
// whether a write lands: an owner whose lease expired may still write until another replica
// acquires the job (no one else writes for it meanwhile), and must then stop.
//
// Admission. A round opened with a target K > 0 (one that several replicas serve) admits
// updates through the store: admit_update records a client's update as admitted, at most one
// per client and round and at most K in all, whichever replica asks, in one round trip on
// PostgreSQL (a single statement over a counter kept on the round's row, whose check the
// database re-evaluates on the row's latest version: no reservation, no expiry, no clock).
// A replica admits an update once it validated it and before it folds it; a fold that fails
// takes the update back (withdraw_update). A round with target 0 (a single coordinator's,
// which decides admission in its memory) stores each update's metadata without a check of its
// own.

#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "common/ids.h"
#include "common/states.h"
#include "common/status.h"

namespace fedcase::storage {

// A job's lease epoch: 0 before any replica acquired the job, then incremented by every
// acquisition. Every write of a job's owner carries the epoch it holds (the fencing token).
using Epoch = uint64_t;
inline constexpr Epoch kUnleased = 0;

struct ClientRecord {
  ClientId id = 0;           // assigned by add_client
  std::string token_hash;    // SHA-256 hex of the bearer token; the token itself is never kept
  nlohmann::json info;       // registration: device, dataset size, cache capacity, SDK version
  nlohmann::json profile;    // scheduling profile, owned by the scheduler
  double registered_at = 0;  // unix seconds
  double last_seen = 0;
  // The number of its registration (add_client), set by the store: registrations are
  // numbered from 1 in the order they commit (clients_changed_after). A contact saved later
  // (update_clients) does not change it: contacts travel as batches (ContactBatch).
  uint64_t change = 0;
};

// The contacts one update_clients saved (each client's id, profile and last_seen), for the
// other replicas sharing the database: numbered from 1 in the order they commit
// (contacts_after), saved at the latest of their last_seen.
struct ContactBatch {
  uint64_t number = 0;
  double saved_at = 0;
  std::vector<ClientRecord> contacts;
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
  // K, the updates the store admits (admit_update); 0: admission is the caller's. Stored by
  // open_round, kept by the round's conclusion.
  uint64_t target = 0;
  // The lease epoch of the write: open_round, commit_round and fail_round are refused unless
  // it is the job's current epoch. Read back (list_rounds): the epoch of the round's last
  // write, which a new owner concluding an earlier owner's round replaces with its own.
  Epoch epoch = kUnleased;
  // What replicas other than the owner need to serve the round (the invitees' tasks and the
  // terms they train on), as the owner wrote it; opaque JSON to the store, stored by
  // open_round and kept as written. Empty object: the round is served by its owner alone.
  nlohmann::json plan = nlohmann::json::object();
  // Read back only (open_round ignores it): the round is open and admits updates, i.e.
  // close_admission was not called.
  bool admitting = false;
  // Read back only: the updates admitted so far.
  uint64_t admitted = 0;
};

struct UpdateRecord {
  JobId job = 0;
  RoundIndex round = 0;
  ClientId client = 0;
  nlohmann::json meta;  // the client's reported statistics
  double received_at = 0;
  std::string replica{};  // who admitted and folded it; empty for a single coordinator
};

struct ModelRecord {
  JobId job = 0;
  uint64_t version = 0;
  std::string blob;             // encoded model blob (common/blob.h)
  std::string checksum;         // blob_checksum(blob)
  std::string optimizer_state;  // the server optimizer's state after producing this model
  double created_at = 0;
};

// Who owns a job, as the store holds it.
struct LeaseRecord {
  JobId job = 0;
  std::string holder;  // the replica; empty when nobody ever acquired the job, or released
  Epoch epoch = kUnleased;
  double expires_at = 0;  // the database's clock, unix seconds
  // expires_at less the database's clock when the record was read: how long the lease still
  // runs (negative once expired), which a holder adds to its own clock's reading from before
  // its request to know, without comparing clocks, until when it may act as the owner.
  double remaining_s = 0;
  bool held() const { return !holder.empty() && remaining_s > 0; }
};

// Where a round's admission stands.
struct AdmissionRecord {
  uint64_t target = 0;  // K; 0: admission is the caller's
  bool open = false;    // the round is open and admits (close_admission was not called)
  std::map<std::string, uint64_t> replicas;  // admitted updates by replica (a coordinator's: "")
  uint64_t admitted() const;                 // in all
};

// A replica's partial aggregate of a round: the updates it admitted, folded. The owner merges
// the replicas' partials at the round's close (streaming FedAvg is associative).
struct PartialRecord {
  JobId job = 0;
  RoundIndex round = 0;
  std::string replica;
  std::string sum;       // the partial aggregate, as its replica encoded it (opaque here)
  double weight = 0;     // the weight folded into it
  uint64_t updates = 0;  // the updates folded into it
  double written_at = 0;
};

// A message of a secure round's stage passed between replicas (docs/scaling.md, "Secure rounds
// on every replica"): a client's message ("keys", "shares", "unmask"), written by the replica
// that received it for the owner to read, or the owner's message to a client once a stage
// closed ("keys_reply", "forwarded", "unmask_request"), for the replica that client polls. The
// body is the message's JSON text, opaque here.
struct StageMessage {
  JobId job = 0;
  RoundIndex round = 0;
  std::string kind;
  ClientId client = 0;
  std::string body;
};

// An update arriving in chunks (an upload session, docs/protocol.md "Uploads in chunks"), as
// its client opened it: chunk i holds bytes [i * chunk_bytes, min((i + 1) * chunk_bytes,
// bytes)) of the update, and the chunks are stored in order, so `chunks` of them are a prefix.
struct UploadRecord {
  JobId job = 0;
  RoundIndex round = 0;
  std::string id;  // 1 to 64 bytes, unique within the round
  ClientId client = 0;
  uint64_t bytes = 0;        // the update's size, >= 1
  uint64_t chunk_bytes = 0;  // >= 1
  std::string sha256;        // of the whole update, as the client declared it
  nlohmann::json meta;       // the update's metadata (X-Fedcase-Meta), as it arrived
  // As read back (open_upload ignores them): the chunks stored, and the seconds they took to
  // arrive, summed.
  uint64_t chunks = 0;
  double seconds = 0;
};

// A tenant's share of the fleet so far (scheduling::FairShare): its weighted service counter
// and the client-seconds its jobs consumed. Tenant 0 is the operator.
struct TenantService {
  TenantId tenant = 0;
  double counter = 0;
  double client_seconds = 0;
};

// A change to a tenant's service, applied on top of what the store holds, so that replicas
// charging the same tenant at once add up.
struct ServiceCharge {
  TenantId tenant = 0;
  double counter = 0;         // added to the counter (negative: a correction)
  double client_seconds = 0;  // added to the client-seconds (negative: a correction)
  // The counter's floor after the change, e.g. the least-served active tenant's counter when
  // the tenant becomes active again (no credit banked while idle). Neither value goes below 0.
  double counter_at_least = 0;
};

// A wake-up between stores on one database: "something about this changed, read it again".
// It carries no state, is delivered after the write that caused it committed, and may be lost
// (a listener that reconnects is told so); whoever listens also re-reads now and then.
enum class Channel {
  kJob,     // id: a job; created, or its state changed
  kRound,   // id: a job; one of its rounds opened, closed to admission, got a partial, concluded
  kLease,   // id: a job; acquired or released
  kClient,  // id: a client registered (add_client) or e.g. its token revoked (notify()), or
            // the number of a contact batch saved (update_clients)
  kTenant,  // id: a tenant; added (or changed, through notify())
};
const char* channel_name(Channel channel);  // "job", "round", "lease", "client", "tenant"

struct Notification {
  Channel channel = Channel::kJob;
  uint64_t id = 0;
};

// Receives the wake-ups of every store on the database (this one's included), from its
// creation on. Not thread-safe: one thread waits on it at a time. PostgreSQL: LISTEN on a
// connection of its own; SQLite: stores of this process on the same file (another process's
// writes wake no one).
class Listener {
 public:
  virtual ~Listener() = default;
  // The next wake-up, waiting up to `timeout_s`; nullopt if none came. kUnavailable when
  // wake-ups may have been missed (the connection was lost, or too many were left unread):
  // re-read everything; the next call reconnects and goes on (and, while it cannot, waits out
  // its timeout before it says so again, so that a loop over next() never spins).
  virtual Result<std::optional<Notification>> next(double timeout_s) = 0;
};

class Store {
 public:
  virtual ~Store() = default;

  // Clients. add_client returns the new id; kConflict if the token hash is already used.
  virtual Result<ClientId> add_client(const ClientRecord& client) = 0;
  // kNotFound for an unknown id.
  virtual Result<ClientRecord> get_client(ClientId id) = 0;
  // The client whose token hashes to `token_hash` (an indexed lookup); kNotFound for none.
  virtual Result<ClientRecord> find_client(const std::string& token_hash) = 0;
  // The clients whose latest change has a number above `after` (0: every client), at most
  // `limit`, in the order of those numbers. Changes are numbered in the order they commit, so
  // a reader that goes on from the last number it read misses no change and reads each
  // changed client once: what it reads grows with the changes, not with the fleet.
  virtual Result<std::vector<ClientRecord>> clients_changed_after(uint64_t after,
                                                                  size_t limit) = 0;
  Result<std::vector<ClientRecord>> list_clients() {
    return clients_changed_after(0, std::numeric_limits<size_t>::max());
  }
  // Saves the profile and last_seen of each record (its other fields are ignored), and
  // publishes them as one ContactBatch, in one transaction; kNotFound (nothing saved) if any
  // id is unknown. Batches saved more than kContactBatchesKeptS before the newest are dropped.
  // Wakes kClient with the batch's number. Saves run one at a time across the stores on the
  // database (PostgreSQL: an advisory lock taken before any row), so batches commit in the
  // order of their numbers.
  virtual Status update_clients(const std::vector<ClientRecord>& clients) = 0;
  // The contact batches numbered above `after`, at most `limit`, in order: a reader that goes
  // on from the last number it read misses no batch still kept, and what it reads grows with
  // the batches (a replica's flushes), not with the fleet or its contacts.
  virtual Result<std::vector<ContactBatch>> contacts_after(uint64_t after, size_t limit) = 0;
  static constexpr double kContactBatchesKeptS = 600;

  // Jobs. create_job stores the job, its initial model and its module (the TorchScript archive
  // clients run; empty: none) together, and returns the new id; the model is stored under
  // that id (its `job` is ignored) with the version it carries (0 in every caller). The job's
  // lease starts at kUnleased with no holder. Wakes kJob.
  virtual Result<JobId> create_job(const JobRecord& job, const ModelRecord& initial_model,
                                   const std::string& module) = 0;
  // The module stored with the job, byte for byte; kNotFound when it has none or the job is
  // unknown.
  virtual Result<std::string> get_job_module(JobId id) = 0;
  // kNotFound for an unknown id.
  virtual Result<JobRecord> get_job(JobId id) = 0;
  virtual Result<std::vector<JobRecord>> list_jobs() = 0;
  // Any state may follow any other here (the lifecycle is the coordinator's); kNotFound for
  // an unknown id, kConflict if `epoch` is not the job's. Wakes kJob.
  virtual Status set_job_state(JobId id, JobState state, Epoch epoch) = 0;

  // Tenants. add_tenant returns the new id; kConflict if the name or token hash is taken.
  // Wakes kTenant.
  virtual Result<TenantId> add_tenant(const TenantRecord& tenant) = 0;
  virtual Result<std::vector<TenantRecord>> list_tenants() = 0;

  // Rounds, named by (job, index). open_round stores the round as open and admitting (whatever
  // its `state`), with its target; kConflict if the job already has a round of that index
  // (open or concluded), the job is unknown, or round.epoch is not the job's. Wakes kRound.
  virtual Status open_round(const RoundRecord& round) = 0;
  // Admits a client's update to the round, with its metadata, for `update.replica`. A round of
  // target K > 0: kConflict, nothing stored, when the round is unknown, concluded or closed to
  // admission, the client already has an update in it, or K updates are admitted (the
  // message says which). A round of target 0 stores it without checking the round's state,
  // as its caller decided (kConflict only for a duplicate, or an unknown round or client).
  // Returns whether this update filled the round (its K-th; false for target 0). Durable once
  // its round concludes (commit_round or fail_round), not necessarily before: a crash before
  // that leaves the round open, and the next start fails it, so no sync is spent on each of a
  // round's many updates.
  virtual Result<bool> admit_update(const UpdateRecord& update) = 0;
  // Takes back `replica`'s admitted update of the client (its fold failed): its place is free
  // again. kConflict if the round does not admit any more or the replica has no update of the
  // client there. Durable as admit_update is.
  virtual Status withdraw_update(JobId job, RoundIndex round, ClientId client,
                                 const std::string& replica) = 0;
  // Whether `client` has an update in the round, whichever replica admitted it (false for an
  // unknown round): a replica asks before handing out a task of a round the others serve too.
  virtual Result<bool> has_update(JobId job, RoundIndex round, ClientId client) = 0;
  // Closes the round to admission (the owner is concluding it): admit_update and
  // withdraw_update are refused from now on. Idempotent. kConflict if the round is not open or
  // `epoch` is not the job's. Wakes kRound.
  virtual Status close_admission(JobId job, RoundIndex round, Epoch epoch) = 0;
  // Where the round's admission stands; kNotFound for an unknown round.
  virtual Result<AdmissionRecord> round_admission(JobId job, RoundIndex round) = 0;
  // Stores a replica's partial aggregate of the round, once. kConflict, nothing stored, unless
  // the round is open and closed to admission, partial.updates is exactly the number of
  // updates the store admitted for the replica in the round, and the replica has no partial
  // there yet. Partials are dropped with the round's conclusion. Durable as admit_update is.
  // Wakes kRound.
  virtual Status put_partial(const PartialRecord& partial) = 0;
  // The round's partials, by replica; empty once the round concluded.
  virtual Result<std::vector<PartialRecord>> list_partials(JobId job, RoundIndex round) = 0;
  // Stores `messages` (each of one round, kind and client at most once), all or none.
  // kConflict, nothing stored, if a message of the same round, kind and client is stored
  // already or its round is not open; kInvalidArgument for an empty kind. Dropped with the
  // round's conclusion. Durable as admit_update is. Wakes kRound.
  virtual Status put_stage_messages(const std::vector<StageMessage>& messages) = 0;
  // The round's messages of `kind`, by client; empty once the round concluded.
  virtual Result<std::vector<StageMessage>> list_stage_messages(JobId job, RoundIndex round,
                                                                const std::string& kind) = 0;
  // The public keys a secure round of the job accepted (docs/secure_aggregation.md, "Key
  // reuse"): a later round refuses them, on whichever replica owns it and after any restart.
  // Stores `keys` as round `round`'s (with those it holds already) and forgets the keys of the
  // job's rounds before `round - keep_rounds`. Durable as commit_round is.
  virtual Status put_used_keys(JobId job, RoundIndex round, const std::set<std::string>& keys,
                               uint64_t keep_rounds) = 0;
  // Every key stored for the job's rounds.
  virtual Result<std::set<std::string>> list_used_keys(JobId job) = 0;
  // Upload sessions (UploadRecord), each of one open round and at most one per client there;
  // all of a round's are dropped with its conclusion. Durable as admit_update is; wake no one.
  // Opens `upload` and returns it, or, when the client already has one in the round for the
  // same bytes, chunk size and digest, returns that one as stored (its id, its chunks: the
  // client resumes it); one for another update is dropped first. kConflict if the round is not
  // open.
  virtual Result<UploadRecord> open_upload(const UploadRecord& upload) = 0;
  // kNotFound for an upload the round does not hold (never opened, dropped, or concluded).
  virtual Result<UploadRecord> get_upload(JobId job, RoundIndex round, const std::string& id) = 0;
  // Stores chunk `index` of the upload, which must be the next one (index == chunks stored):
  // kConflict otherwise (a gap, or a chunk another request stored meanwhile), kNotFound as
  // get_upload.
  virtual Status put_upload_chunk(JobId job, RoundIndex round, const std::string& id,
                                  uint64_t index, std::string_view bytes, double seconds) = 0;
  // Chunk `index` of the upload as stored; kNotFound if it is not.
  virtual Result<std::string> get_upload_chunk(JobId job, RoundIndex round, const std::string& id,
                                               uint64_t index) = 0;
  // Drops the upload and its chunks; dropping one that is not there is not an error.
  virtual Status drop_upload(JobId job, RoundIndex round, const std::string& id) = 0;
  // Atomically: the round becomes committed with its closed_at and metrics (the round's other
  // fields are those open_round stored), the model is stored under (model.job, model.version),
  // the job's policy state is saved, and the round's partials, stage messages and uploads are
  // dropped.
  // Either all of it is durable or none. kConflict, and nothing changes, if the round is not
  // open (unknown, committed or failed), the model's version is already stored, or
  // round.epoch is not the job's. Wakes kRound.
  virtual Status commit_round(const RoundRecord& round, const ModelRecord& model,
                              const nlohmann::json& policy_state) = 0;
  // The round becomes failed with its closed_at and metrics; no model; its partials and stage
  // messages are dropped. kConflict if the round is not open or round.epoch is not the job's.
  // Wakes kRound.
  virtual Status fail_round(const RoundRecord& round) = 0;
  // Merges `metrics` into a concluded round's metrics (e.g. its evaluation, which comes later):
  // each top-level key of `metrics` replaces or adds that key. Not fenced: a concluded round's
  // model is evaluated the same whoever does it. kNotFound if the round is unknown or still
  // open.
  virtual Status add_round_metrics(JobId job, RoundIndex round, const nlohmann::json& metrics) = 0;
  virtual Result<std::vector<RoundRecord>> list_rounds(JobId job) = 0;
  // The round's admitted updates.
  virtual Result<std::vector<UpdateRecord>> list_updates(JobId job, RoundIndex round) = 0;
  // Replaces an open round's plan (an asynchronous job's buffer hands out tasks while it is
  // open, and every replica serves them). kConflict if the round is not open or `epoch` is
  // not the job's. Wakes kRound.
  virtual Status update_round_plan(JobId job, RoundIndex round, const nlohmann::json& plan,
                                   Epoch epoch) = 0;

  // Models. kNotFound for a version (or a job) without a model; latest_model is the highest
  // version stored.
  virtual Result<ModelRecord> get_model(JobId job, uint64_t version) = 0;
  virtual Result<ModelRecord> latest_model(JobId job) = 0;

  // Leases (see the top of this file). acquire_lease gives the job to `holder` for
  // `duration_s` seconds of the database's clock if nobody holds it (never acquired, released
  // or expired) or `holder` does, and always starts a new epoch (the previous one + 1), which
  // it returns with the expiry. kConflict if another holder's lease runs, kNotFound for an
  // unknown job, kInvalidArgument for an empty holder or duration_s <= 0. Durable before it
  // returns. Wakes kLease.
  virtual Result<LeaseRecord> acquire_lease(JobId job, const std::string& holder,
                                            double duration_s) = 0;
  // Extends the lease to `duration_s` seconds from now: only by `holder` at the current
  // `epoch` (also after its expiry, as long as nobody acquired the job since). kConflict
  // otherwise, kNotFound for an unknown job, kInvalidArgument as acquire_lease.
  virtual Result<LeaseRecord> renew_lease(JobId job, const std::string& holder, Epoch epoch,
                                          double duration_s) = 0;
  // Ends the lease now, keeping its epoch: only by `holder` at the current `epoch`; kConflict
  // otherwise, kNotFound for an unknown job. Wakes kLease.
  virtual Status release_lease(JobId job, const std::string& holder, Epoch epoch) = 0;
  // Every job's lease, by job id.
  virtual Result<std::vector<LeaseRecord>> list_leases() = 0;

  // Tenants' service. charge_tenant applies the change (creating the tenant's service at 0 the
  // first time; any tenant id, 0 included) and returns the result.
  virtual Result<TenantService> charge_tenant(const ServiceCharge& charge) = 0;
  // Every tenant charged so far, by id.
  virtual Result<std::vector<TenantService>> list_tenant_service() = 0;

  // Wake-ups. notify publishes one of its own (the writes above publish theirs with their
  // commit); listen receives them (Listener).
  virtual Status notify(Channel channel, uint64_t id) = 0;
  virtual Result<std::unique_ptr<Listener>> listen() = 0;

  // Whether the database serves now: one round trip that reads nothing. OK, or the error any
  // call would meet (kUnavailable when the server cannot be reached or cannot serve).
  virtual Status ping() = 0;
};

// Where a store lives, as a URL: "<scheme>:<location>".
struct StoreUrl {
  std::string scheme;  // lower case: "sqlite", "postgresql" or "memory"
  // sqlite: the database file's path, relative to the working directory; postgresql: the
  // whole URL, "postgresql://...", as libpq reads it; memory: the database's name, empty for
  // a database of the store's own (storage/memory_store.h).
  std::string location;
};

// The schemes open_store knows, for messages: "sqlite, postgresql, memory".
const char* known_store_schemes();

// Parses a store URL: "sqlite:PATH", or a plain PATH, which is SQLite's (configs written before
// URLs); or a libpq connection URI, "postgresql://[user@][host][:port]/database[?param=value&...]"
// ("postgres://" too; a Unix socket directory as ?host=/dir); or "memory:" or "memory:NAME", a
// database in this process's memory (storage/memory_store.h: for tests; nothing is durable).
// A URL's scheme is the letters, digits, '+', '-' and '.' before its first ':', starting with
// a letter and matched without regard to case; anything else, a '/' before the first ':'
// included, is a plain path. Pure. kInvalidArgument for an empty URL, an empty location
// (but memory's), a PostgreSQL URL without "//", or a scheme that is not known (the message
// names the known ones). Messages show the URL without its password.
Result<StoreUrl> parse_store_url(const std::string& url);

// Opens the store `url` names (parse_store_url) with that backend's opener below: its errors,
// and kInvalidArgument for a URL parse_store_url refuses. The caller owns the store.
Result<std::unique_ptr<Store>> open_store(const std::string& url);

// Opens (creating if needed) the SQLite database at `path` in WAL mode and migrates its schema
// to the current version. kInternal (SQLite's message in the detail) if the file cannot be used,
// and kInvalidArgument if it was written by a newer schema version. Several stores may be open on
// one file at once (in one process or several); each sees what the others committed, and
// listeners hear the wake-ups of the stores of their own process. One connection, used by one
// call at a time: SQLite lets one writer in at a time anyway, and its calls take microseconds.
Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path);

struct PostgresOptions {
  // Connections the store opens at most, each on first need; a call waits for a free one.
  // Calls run at once up to this many: a commit's multi-megabyte model does not hold up the
  // updates being recorded meanwhile, as one shared connection would.
  size_t max_connections = 8;
  // How long a connection attempt may take, unless the URL sets connect_timeout itself.
  int connect_timeout_s = 10;
};

// Opens a PostgreSQL store over libpq (its C API, which returns status codes as this library
// does, rather than libpqxx's exceptions) at the connection URI `url` ("postgresql://...", see
// parse_store_url), and migrates the database's schema to the current version, under an
// advisory lock so that replicas starting at once on an empty database migrate it once.
// kUnavailable (libpq's message and the URL, its passwords hidden, in the detail) if the server
// cannot be reached within the connect timeout, kInvalidArgument if the database was written by a
// newer schema version, kInternal for another failure. A connection found lost is dropped, together
// with the idle ones (they went to the same server), and the next call connects anew; a call
// that failed before anything of it reached the server (its first statement found the
// connection lost) is retried once on a new connection.
Result<std::unique_ptr<Store>> open_postgres_store(const std::string& url,
                                                   const PostgresOptions& options = {});

}  // namespace fedcase::storage
