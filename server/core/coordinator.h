#pragma once
// The coordinator's core, with no network in it: a thin facade over the client registry
// (base/client_registry.h), the jobs (jobs/job_table.h), the round driver and the replication
// it calls (rounds/), secure rounds (secure/) and, on a replica, ownership (replica/); the
// client and admin operations the HTTP layer (api.h) maps requests onto are written in
// client_api.cpp and admin_api.cpp. Results are plain values; the API layer turns them into
// JSON (views.h). No request thread ever sleeps or polls here: what a replica must first learn
// from the store is answered kUnavailable (retry shortly) while it learns it.
//
// Every change follows the same three steps: decide under a lock, write to the store without
// any lock, publish under the lock. No store call, fold or optimizer step runs while a lock
// that a poll, a heartbeat or another upload needs is held.
//
// Thread safety: every public method may be called from any thread.
// Durability: a round's model and its `committed` state are written in one store transaction
// before any client can see the new model. On open(), rounds a crash left open are marked
// failed and each job resumes from its latest committed model.
// Errors: Status values; no method throws.

#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/blob.h"
#include "common/ids.h"
#include "common/states.h"
#include "common/status.h"
#include "protocol/check_in.h"
#include "protocol/update_meta.h"
#include "protocol/upload_session.h"
#include "rounds/job_config.h"
#include "rounds/round.h"
#include "scheduling/profile.h"
#include "server/core/base/client_registry.h"
#include "server/core/base/config.h"
#include "server/core/base/evaluator.h"
#include "server/core/base/metrics.h"
#include "server/core/base/model_exports.h"
#include "server/core/base/tenants.h"
#include "server/core/jobs/job_table.h"
#include "server/core/secure/secure_stages.h"
#include "storage/store.h"

namespace fedcase {
class SpoolFile;
}  // namespace fedcase

namespace fedcase::server {

struct ModelDownload {
  uint64_t version = 0;
  std::string checksum;                     // also the HTTP ETag
  std::shared_ptr<const std::string> blob;  // encoded model blob
};

// A job's module: the TorchScript archive its clients run.
struct ModuleDownload {
  std::string checksum;                      // SHA-256 hex of the bytes, also the HTTP ETag
  std::shared_ptr<const std::string> bytes;  // shared by every download, never changed
};

enum class Role { kNone, kAdmin, kEnrollment, kClient, kMetrics, kTenant };
struct Caller {
  Role role = Role::kNone;
  ClientId client = 0;  // for kClient
  TenantId tenant = 0;  // for kTenant
};

// A task handed to a client.
struct TaskOffer {
  JobId job = 0;
  RoundIndex round = 0;
  std::string model;  // the job's model kind (rounds::JobConfig::model)
  std::string loss;
  uint64_t model_version = 0;
  std::string model_checksum;
  std::string module_checksum;  // a job with a module (torchscript): its checksum
  double deadline = 0;
  uint32_t local_epochs = 0;
  // Federated evaluation: the held-out samples to score the base model on (0: all); nullopt
  // when the job does not ask for one.
  std::optional<size_t> evaluate_max_samples;
  scheduling::ClientTask task;
  // A job with secure aggregation: how long its key and unmask stages wait (nullopt: plain).
  std::optional<double> secure_stage_seconds;
  std::vector<std::string> local_buffers;  // the buffers the device keeps (JobEntry's)
  std::vector<std::string> trainable;      // the tensors the job trains; empty: all (JobEntry's)
  std::optional<protocol::Compression> compression;  // the job's (nullopt: float32 updates)
  // The size of an upload session's chunks, when the task may send its update in chunks; 0:
  // it sends it whole (a secure job's masked input, an asynchronous job's update).
  uint64_t chunk_bytes = 0;
  // A secure asynchronous job's tasks (docs/secure_aggregation.md, "ready cohorts"): a
  // training task reports its update ready (`ready`); a cohort's task masks it, its values
  // scaled by the member's staleness factor (`staleness_factor`), and trains nothing.
  bool ready = false;
  std::optional<double> staleness_factor;
};

struct UpdateAccepted {
  RoundIndex round = 0;
  size_t updates = 0;  // accepted so far in the round
};

struct JobSummary {
  JobId id = 0;
  std::string name;
  TenantId tenant = 0;
  std::string model;             // the job's model kind (rounds::JobConfig::model)
  std::string selection_policy;  // the policy's name
  JobState state = JobState::kRunning;
  uint64_t model_version = 0;
  std::string model_checksum;
  RoundIndex round = 0;  // highest round index used
  bool round_open = false;
  // Of the newest evaluated model: on the test set, or for a job whose evaluation target is
  // "federated" the federated accuracy of its newest committed round's base model.
  std::optional<double> test_accuracy;
};

struct JobDetail {
  JobSummary summary;
  nlohmann::json config;
  double created_at = 0;
  size_t parameters = 0;     // the model's parameter values
  size_t buffer_values = 0;  // the values of its buffers (BatchNorm's running statistics)
  size_t module_bytes = 0;        // the size of its module (0: none)
  std::string evaluation_target;  // "server" or "federated" (rounds::EvaluationConfig)
  std::string selection_policy, aggregation, server_optimizer;
  nlohmann::json policy_state;
  nlohmann::json privacy;  // null unless the job adds DP noise
  struct OpenRound {
    RoundIndex index = 0;
    size_t invited = 0, updates = 0;
    double deadline = 0;
    nlohmann::json secure_aggregation;  // a secure round's SecureRound::summary (null: plain)
  };
  std::optional<OpenRound> current_round;
  std::vector<storage::RoundRecord> rounds;
};

// A job's committed models (GET /v1/admin/jobs/{job}/models).
struct ModelListing {
  JobId job = 0;
  std::string evaluation_target;  // whose accuracy `accuracy` is: "server" or "federated"
  uint64_t bytes = 0;             // of each version's blob (every version has the job's layout)
  size_t parameters = 0;          // as JobDetail's
  size_t buffer_values = 0;
  // The buffers the devices keep (config.local_buffers): every version, and its exports,
  // holds their initial values, the module's.
  std::vector<std::string> local_buffers;
  uint64_t latest = 0;
  std::optional<uint64_t> best;      // none while no version has an accuracy
  std::vector<ModelVersion> models;  // oldest first
};

// The tenants with the operator (tenant 0) first, their running or paused jobs, and the fleet's
// fair share between them (scheduling::FairShare::to_json's "tenants", by tenant id).
struct TenantsOverview {
  std::vector<storage::TenantRecord> tenants;
  std::map<TenantId, size_t> active_jobs;
  nlohmann::json share;
};

struct ClientSummary {
  storage::ClientRecord record;
  scheduling::ClientProfile profile;
  bool available = false;
  std::map<JobId, double> expected_duration_s;  // per running or paused job
};

class Coordinator {
 public:
  // Opens the coordinator over `store` and `evaluator` (the coordinator owns both) and
  // recovers clients and jobs from the store. `clock` gives the time (wall_clock by default).
  // kInternal / kInvalidArgument when the stored state cannot be used.
  static Result<std::unique_ptr<Coordinator>> open(const CoordinatorConfig& config,
                                                   std::unique_ptr<storage::Store> store,
                                                   std::unique_ptr<ModelEvaluator> evaluator,
                                                   Clock clock = wall_clock);
  ~Coordinator();

  const CoordinatorConfig& config() const;

  // Starts / stops the round driver's thread (tick() at its deadlines and on events:
  // rounds/round_driver.h). Tests without a thread call tick() themselves.
  void start_driver();
  void stop_driver();
  void tick();
  // Stops the driver and concludes every open round now (RoundDriver::conclude_all): the
  // second half of a graceful stop, once no request is in flight.
  void conclude_rounds();

  // Who presents `bearer_token`, from memory alone (cheap enough for an I/O thread): the
  // admin, the enrollment key, a registered client, the metrics scraper, a tenant, or nobody.
  Caller identify(std::string_view bearer_token) const;
  // A token identify() does not know: nobody's, or, on a replica, being looked up in the
  // store off the request threads (a client registered through another replica a moment ago:
  // base/token_lookups.h), when its caller is told to retry shortly. Callers rate-limit
  // unknown tokens before they ask.
  enum class UnknownToken { kNobody, kLookingUp };
  UnknownToken unknown_token(std::string_view bearer_token);

  // The coordinator's operational metrics; every component records into this one. Its
  // collector for clients and jobs is registered for the coordinator's lifetime.
  Metrics& metrics();

  // This process's name among replicas sharing the database: config().replica_id, or
  // "<hostname>-<pid>" when that is empty. Constant.
  const std::string& replica_id() const;
  // Whether the database serves now (Store::ping). A probe less than a second old answers
  // for it, and callers arriving while a probe runs get the previous answer instead of
  // waiting, so health checks reach the database at most once a second whoever sends them.
  // OK, or the store's error (kUnavailable when it cannot be reached).
  Status database_health();

  // ---- client API (callers already authenticated) ----
  // `request`: a registration (protocol/registration.h). kInvalidArgument for a bad field,
  // kUnprocessable for an SDK whose protocol version this coordinator does not serve.
  Result<ClientRegistry::Registration> register_client(const nlohmann::json& request);
  Status heartbeat(ClientId client, const nlohmann::json& request);
  // The client's pending task, or nullopt when it has none now. Counts as a contact.
  Result<std::optional<TaskOffer>> next_task(ClientId client);
  // Calls `wake` once, from the round driver's thread, when a round that invites `client`
  // opens (then next_task may have a task for it); `wake` must only hand the work elsewhere.
  // Returns a handle for unwatch_tasks. Long polls wait on this instead of re-checking.
  uint64_t watch_tasks(ClientId client, std::function<void()> wake);
  void unwatch_tasks(ClientId client, uint64_t handle);
  // Whether the running jobs want more clients checked in than there are: some job invites
  // clients and fewer are available than pace steering's pool (pool_factor x the rounds'
  // invitations). If not, a task poll is answered at once (after a task, if it has one): a
  // device with nothing to do holds no connection open, and the connections held stay about
  // the pool, however large the fleet or the storm of its return.
  bool wants_clients() const;
  // Pace steering (docs/scaling.md): `client`'s task poll ends without a task; it asked to be
  // held `awake_s` seconds (its awake time in the rule, also when it was answered at once).
  // Returns when it should check in again, for the fleet's size, the
  // running jobs' invitations and the client's utility rank (scheduling::check_in_window),
  // and marks it asleep until then (not available to selection). kNotFound for an unknown
  // client.
  Result<protocol::CheckIn> check_in_later(ClientId client, double awake_s);

  // Whether the round still wants `client`'s update (kWanted), and if not why. A client asks
  // before uploading, so a straggler learns that its work is no longer needed without sending
  // it. kNotFound for an unknown job.
  Result<rounds::Admission> task_status(ClientId client, JobId job, RoundIndex round);
  // Validates and folds an update (encoded blob of the delta local - global) into the round.
  // `meta` is the update's statistics as parsed from the request, or why they could not be.
  // The state checks come first: 404 unknown job; 409 round not open, full or already
  // uploaded; 403 client not invited; then 400 missing or bad metadata or blob; 422 wrong
  // layout, version, non-finite values or norm. A refused update changes nothing, stored or
  // in memory. `upload_seconds` is how long the body took to arrive (0: unknown).
  Result<UpdateAccepted> submit_update(ClientId client, JobId job, RoundIndex round,
                                       const Result<nlohmann::json>& meta, std::string_view blob,
                                       double upload_seconds = 0);

  // ---- uploads in chunks (docs/protocol.md, "Uploads in chunks"; upload_sessions.cpp) ----
  // Where an upload session stands (the API names it with its URL: protocol::UploadState).
  struct UploadProgress {
    JobId job = 0;
    RoundIndex round = 0;
    std::string id;
    uint64_t bytes = 0;
    uint64_t chunk_bytes = 0;
    uint64_t received = 0;  // a prefix of the update
  };
  // What a chunk's request is answered: where the session stands, and, once the update's last
  // chunk is in, the update's submission (accepted, or why not: a plain upload's answer).
  struct ChunkAnswer {
    UploadProgress progress;
    std::optional<Result<UpdateAccepted>> submitted;
  };
  // Opens an upload session for `client`'s update in `round` of `job`, or finds the one it
  // opened for the same update (same size and digest: the client resumes it; one for
  // another update is dropped). `meta` is the update's statistics, as for submit_update;
  // `open` the protocol::UploadOpen body. 404 unknown job; 409 a job whose updates are sent
  // whole (rounds::check_chunked_upload); 410 the round no longer wants the client's update
  // (task_status says why); 400 bad metadata or body; 413 an update over
  // max_chunked_upload_bytes.
  Result<UploadProgress> open_upload(ClientId client, JobId job, RoundIndex round,
                                     const Result<nlohmann::json>& meta,
                                     const nlohmann::json& open);
  // Where `client`'s session `upload` stands; 404 when the round holds no such session of it.
  Result<UploadProgress> upload_state(ClientId client, JobId job, RoundIndex round,
                                      const std::string& upload);
  // How much of a chunk's body arrived: all of it, or the part before its connection dropped.
  enum class ChunkBody { kWhole, kCutShort };
  // Takes one chunk (`range`: its Content-Range, or why it has none; `bytes`: its body, which
  // took `receive_seconds` to arrive; `body`: whether all of it did). Its pieces are stored in
  // order (rounds::place_chunk: 400 misplaced, 409 a gap); those stored already are compared
  // with it (409 if they differ); a chunk cut short keeps the whole pieces that arrived. 404 no
  // such session; 410 the round no longer wants the update, and the session is dropped. Once
  // the last piece is in, the update is read back from the store into a spool file, its digest
  // checked (422) and it is submitted as submit_update submits one, with its refusals
  // (ChunkAnswer::submitted); the session is then dropped, accepted or not. Two requests
  // storing the same pieces at once (a resent chunk and the cut one it replaces) both succeed;
  // only the one storing the last piece submits. Memory: one chunk at a time, never the whole
  // update: a float32 update is checked and folded a piece at a time from the spool file
  // (submit_spooled), any other is read where it lies in the file mapped (submit_blob: a
  // compressed update, or one whose header the checks refuse).
  Result<ChunkAnswer> put_upload_chunk(ClientId client, JobId job, RoundIndex round,
                                       const std::string& upload,
                                       const Result<protocol::ContentRange>& range,
                                       std::string_view bytes, double receive_seconds,
                                       ChunkBody body);

  // ---- secure aggregation (docs/protocol.md, "Secure aggregation"; secure/) ----
  // The secure round `round` of `job`, for a client's stage message or long poll (on a replica
  // that does not own the job, its copy of the owner's round): kNotFound for an unknown job,
  // kConflict when the job has no secure round of that index in progress (a plain job, an
  // earlier round, or the round is over). A replica asked about a later round than it follows
  // answers kUnavailable (retry shortly) and reads the store at once.
  Result<std::shared_ptr<SecureStages>> secure_round(JobId job, RoundIndex round);
  // Long polls of stage messages wait here; `wake` as for watch_tasks.
  uint64_t watch_secure_stages(ClientId client, std::function<void()> wake);
  void unwatch_secure_stages(ClientId client, uint64_t handle);
  // A masked input (`header`: the secagg_masked_input, `body` its vector) with its update
  // metadata: admitted as submit_update admits an update (404, 409, 403, 503 in that order),
  // then the header and metadata are read (400) and the evaluation checked (422), and the
  // secure round checks, records and folds it (SecureRound::receive_masked_input: 403, 409,
  // 422). A refused input changes nothing.
  Result<UpdateAccepted> submit_masked_input(ClientId client, JobId job, RoundIndex round,
                                             const Result<nlohmann::json>& header,
                                             const Result<nlohmann::json>& meta,
                                             std::string_view body, double upload_seconds = 0);
  // A secure asynchronous job's client reports the update of its task in `round` (its task's)
  // trained and kept on the device, with its metadata (`meta`, as for submit_update), for a
  // cohort (rounds::Round::report_ready); UpdateAccepted::updates counts the buffer's ready
  // reports. 404 unknown job; 409 a job that does not form cohorts, a round not open, a client
  // already ready; 403 not invited; 503 between two buffers (retry); 400 bad metadata, or more
  // samples than its task allows.
  Result<UpdateAccepted> report_ready(ClientId client, JobId job, RoundIndex round,
                                      const Result<nlohmann::json>& meta);

  // ---- admin API ----
  // Jobs are seen through a Scope (job_table.h): the admin's, every job, or one tenant's own.
  // A committed model of `job`, for the admin or a tenant for its own jobs (`scope`), or for
  // `client`: only the model of a task it holds (the open round's base version, until its
  // update is accepted), kPermissionDenied otherwise, so that a job's models reach only its
  // participants.
  Result<ModelDownload> model(JobId job, uint64_t version, Scope scope = std::nullopt,
                              std::optional<ClientId> client = std::nullopt);
  // The tensors of that model the job trains (rounds::JobConfig::trainable), as a model blob
  // of their own: what a device that holds the frozen rest needs each round. Callers and
  // errors as model(); kNotFound for a job that trains its whole model.
  Result<ModelDownload> trainable_part(JobId job, uint64_t version, Scope scope = std::nullopt,
                                       std::optional<ClientId> client = std::nullopt);
  // The module of `job` (callers as for model(); a client holding a task of the job); kNotFound
  // for a job without one.
  Result<ModuleDownload> module(JobId job, Scope scope = std::nullopt,
                                std::optional<ClientId> client = std::nullopt);
  // The committed models of `job` (scope as for job_detail); kNotFound for an unknown job.
  Result<ModelListing> models(JobId job, Scope scope = std::nullopt);
  // Version `version` of `job` ("latest", "best" or a number: resolve_version) in `format`,
  // for the admin or the job's tenant (`scope`). kNotFound for an unknown job or version (or
  // "best" before any evaluation), kInvalidArgument for a bad version or a format the model
  // has not (ModelExports::get), kUnprocessable for a stored module that does not load.
  Result<ModelExport> export_model(JobId job, std::string_view version, ExportFormat format,
                                   Scope scope = std::nullopt);

  // A job owned by `owner` (0: the operator), with the model file uploaded with its config
  // (`model_file`: a TorchScript archive or a model blob, as config.model says; none for a
  // built-in model). A config with `init_from` starts from that version of another job the
  // owner sees, whose parameters must have the names and shapes of the new job's model; the
  // job's stored config then names the version by number. Nothing is stored unless the config
  // and the file are valid: kInvalidArgument for a bad config, a file with a built-in model or
  // none with an uploaded one, a file that does not decode or holds no parameters, or an
  // init_from whose job or version is unknown or whose tensors differ (the message names the
  // first that does); kTooLarge for a file over max_model_bytes; kUnprocessable for
  // non-finite parameters. While the fleet is overloaded, a tenant over its
  // running-job cap or submission window is refused with kResourceExhausted, and
  // `retry_after_s` says when to try again.
  Result<JobSummary> create_job(const nlohmann::json& config, TenantId owner, double& retry_after_s,
                                std::optional<std::string_view> model_file = std::nullopt);
  // As the operator (never throttled), with a built-in model.
  Result<JobSummary> create_job(const nlohmann::json& config);
  std::vector<JobSummary> list_jobs(Scope scope = std::nullopt);
  Result<JobDetail> job_detail(JobId job, Scope scope = std::nullopt);
  std::vector<ClientSummary> list_clients();
  // action: "pause", "resume" or "cancel". kNotFound for an unknown action or job (or one
  // outside `scope`), kConflict when the job's state does not allow it.
  Result<JobState> control_job(JobId job, const std::string& action, Scope scope = std::nullopt);
  // Tenants (admin only): TenantRegistry::create, and the tenants with their share of the
  // fleet (docs/tenancy.md).
  Result<TenantRegistry::Created> create_tenant(const nlohmann::json& request);
  TenantsOverview tenants();

 private:
  struct State;
  explicit Coordinator(std::unique_ptr<State> state);
  // The parameters a job with init_from `from` starts from, for `owner`'s new job of `layout`
  // (errors as create_job's); their model_version is the version they come from.
  Result<ModelBlob> trained_start(const rounds::InitFrom& from, TenantId owner,
                                  const ModelLayout& layout);
  // An upload's place in its round, held while it is checked and folded.
  struct HeldPlace {
    std::shared_ptr<rounds::RoundAggregate> aggregate;
    RoundIndex round = 0;     // the open round (an asynchronous job's buffer)
    uint64_t trained_on = 0;  // the version the client's task trains from
    double discount = 1;      // its staleness weight in a buffer
    std::shared_ptr<const rounds::GlobalModel> model;  // the latest: the layout, the sizes
    uint64_t samples_allowed = 0;  // the most samples the update may report (its weight)
  };
  // Checks an upload that holds a place and folds it in: runs `admit` (the admission through
  // the replication: its metadata recorded, or among a shared round's K places in the store)
  // once the update is validated and before it folds (the fold is timed from there).
  using FoldUpload = std::function<Status(const JobEntry& job, const HeldPlace& held,
                                          const protocol::UpdateMeta& meta,
                                          const std::function<Status()>& admit)>;
  // The steps of every upload (docs/architecture.md, "An upload"): decide (the state checks
  // hold a place; a plain upload to a secure job, or a masked input to a plain one, is
  // kConflict), write (the metadata read, then `fold`), publish (the update counts). Any
  // failure gives the place back (withdrawing the admission) and changes nothing.
  Result<UpdateAccepted> admit_upload(ClientId client, JobId job, RoundIndex round, bool masked,
                                      const Result<nlohmann::json>& meta, size_t body_bytes,
                                      double upload_seconds, const FoldUpload& fold);
  // submit_update's work, for an update of at most `max_bytes` (a plain upload's
  // max_upload_bytes, an upload session's max_chunked_upload_bytes).
  Result<UpdateAccepted> submit_blob(ClientId client, JobId job, RoundIndex round,
                                     const Result<nlohmann::json>& meta, std::string_view blob,
                                     double upload_seconds, uint64_t max_bytes);
  // OK while round `round` of `job` wants `client`'s update; otherwise the session `upload`
  // is dropped and the answer is kGone saying why (task_status's reason).
  Status upload_wanted(ClientId client, JobId job, RoundIndex round, const std::string& upload);
  // The update of a session whose every chunk is stored, read back into a spool file,
  // checked against its digest and submitted (submit_update).
  Result<UpdateAccepted> submit_chunked(ClientId client, const storage::UploadRecord& upload);
  // submit_blob's work for the float32 update `upload` of the job's layout at
  // `model_version`, which `spool` holds whole: its values read a piece at a time for the
  // checks and again for the fold.
  Result<UpdateAccepted> submit_spooled(ClientId client, const storage::UploadRecord& upload,
                                        const SpoolFile& spool, uint64_t model_version);
  std::unique_ptr<State> state_;
};

}  // namespace fedcase::server
