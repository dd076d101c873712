#include "server/core/coordinator.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>
#include <utility>

#include "common/blob.h"
#include "common/crypto.h"
#include "common/log.h"
#include "formats/torchscript_reader.h"
#include "ml/model.h"
#include "protocol/registration.h"
#include "protocol/update_meta.h"
#include "protocol/version.h"
#include "rounds/evaluation.h"
#include "rounds/job_config.h"
#include "rounds/upload.h"
#include "scheduling/round_plan.h"
#include "server/core/client_registry.h"
#include "server/core/ownership.h"
#include "server/core/recovery.h"
#include "server/core/round_driver.h"
#include "server/core/shared_rounds.h"
#include "server/core/task_notifier.h"
#include "server/core/timed_store.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// How long a shared round's place stays reserved for an upload being folded (the database's
// clock): far longer than a fold takes, so that only a replica that died holding a place
// keeps it from others, and only this long.
constexpr double kUpdateHoldS = 30;

JobSummary summary_of(const JobEntry& job, const JobStatus& status) {
  return {job.id,
          job.name,
          job.tenant,
          job.config.model,
          job.policy_name,
          status.state,
          status.model->version,
          status.model->checksum,
          status.last_round,
          status.round.has_value(),
          status.last_accuracy};
}

// The initial parameters of a job: its built-in architecture's, or those of the model file
// uploaded with it (errors as Coordinator::create_job).
Result<ModelBlob> initial_parameters(const rounds::JobConfig& config,
                                     std::optional<std::string_view> file, size_t max_bytes) {
  const std::string kind = "job.model \"" + config.model + "\"";
  if (config.builtin_model()) {
    if (file) return invalid_argument(kind + " is built in: it takes no model file");
    auto built = ml::Model::create(config.model, config.seed);
    if (!built.ok()) return built.status();
    return ModelBlob{0, built->layout(), built->parameters()};
  }
  if (!file) {
    return invalid_argument(kind + " needs its model file (the multipart part \"model\")");
  }
  if (file->size() > max_bytes) {
    return too_large("the model file exceeds max_model_bytes (" + std::to_string(max_bytes) +
                     " bytes)");
  }
  formats::TorchScriptLimits limits;
  limits.max_bytes = max_bytes;
  limits.max_elements = max_bytes / sizeof(float);  // whatever the file's size allows
  auto read = config.model == "torchscript" ? read_torchscript_parameters(*file, limits)
                                            : decode_blob(*file, max_bytes);
  if (!read.ok()) {
    return Status(read.status().code(), "the model file: " + read.status().message());
  }
  if (read->data.empty()) return invalid_argument("the model file holds no parameters");
  if (!all_finite(read->data)) {
    return unprocessable("the model file holds non-finite parameters");
  }
  read->model_version = 0;
  return read;
}

// Whether `client` (when a client asks) holds a task of `job`'s open round, for a model of
// `version` (when one is asked for); kPermissionDenied otherwise.
Status check_participant(const JobEntry& job, const JobStatus& status,
                         std::optional<ClientId> client, std::optional<uint64_t> version) {
  if (!client) return ok_status();
  const bool holds = status.round && status.round->holds_task(*client) &&
                     (!version || *version == status.round->terms_for(*client)->base_version);
  if (holds) return ok_status();
  return permission_denied("client " + std::to_string(*client) + " holds no task of job " +
                           std::to_string(job.id) +
                           (version ? " on model version " + std::to_string(*version) : ""));
}

// "<hostname>-<pid>": distinct for every process of a machine, and between machines.
std::string default_replica_id() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "host");
  std::string id;
  for (const char* c = host; *c != '\0' && id.size() < 48; ++c) {
    const bool plain = std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '-';
    id += plain ? *c : '_';
  }
  return id + "-" + std::to_string(getpid());
}

Status job_not_found(JobId id) { return not_found("job " + std::to_string(id) + " not found"); }

// The committed versions of `job`, as model_versions lists them.
Result<std::vector<ModelVersion>> versions_of(storage::Store& store, const JobEntry& job) {
  auto rounds = store.list_rounds(job.id);
  if (!rounds.ok()) return rounds.status();
  return model_versions(*rounds, job.config.evaluation.target, job.created_at);
}

// The stored model of `version` of `job`, kNotFound naming both when there is none.
Result<storage::ModelRecord> stored_version(storage::Store& store, JobId job, uint64_t version) {
  auto model = store.get_model(job, version);
  if (!model.ok() && model.status().code() == Code::kNotFound) {
    return not_found("job " + std::to_string(job) + " has no model version " +
                     std::to_string(version));
  }
  return model;
}

// The offer of `client`'s `task` in round `r` of `job`.
TaskOffer task_offer(const JobEntry& job, const rounds::Round& r, ClientId client,
                     const scheduling::ClientTask& task) {
  const rounds::EvaluationConfig& evaluation = job.config.evaluation;
  const rounds::Round::Terms& terms = *r.terms_for(client);
  return TaskOffer{
      job.id,
      terms.round,
      job.config.model,
      job.config.loss,
      terms.base_version,
      terms.base_checksum,
      job.module_checksum,
      terms.deadline,
      job.config.training.local_epochs,
      evaluation.federated ? std::optional<size_t>(evaluation.max_samples) : std::nullopt,
      task,
      job.config.secure_aggregation
          ? std::optional<double>(job.config.secure_aggregation->stage_seconds)
          : std::nullopt};
}

}  // namespace

struct Coordinator::State {
  State(const CoordinatorConfig& c, std::unique_ptr<storage::Store> s,
        std::unique_ptr<ModelEvaluator> e, Clock k)
      : config(c),
        store(timed_store(std::move(s), metrics)),
        clock(std::move(k)),
        clients(*store, profile_params(c), [this] { driver.wake(); }),
        tenants(*store),
        jobs(*store),
        evaluator(std::move(e)),
        secure(metrics, [this] { driver.wake(); }),
        driver(jobs, clients, tenants, *store, *evaluator, tasks_ready, secure, metrics, clock),
        collector(metrics.add_collector([this](Metrics& m) { collect(m); })) {}

  static scheduling::ProfileParams profile_params(const CoordinatorConfig& c) {
    scheduling::ProfileParams p;
    p.offline_gap_s = c.client_timeout_s;
    return p;
  }

  Metrics metrics;  // first: the store and the driver record into it
  const CoordinatorConfig config;
  const std::string replica_id =
      config.replica_id.empty() ? default_replica_id() : config.replica_id;
  const std::unique_ptr<storage::Store> store;
  const Clock clock;
  ClientRegistry clients;
  TenantRegistry tenants;
  Mutex create_mu;  // job creations, one at a time (held across their store write only)
  JobTable jobs;
  ModelExports exports{config.export_cache_bytes};
  std::unique_ptr<ModelEvaluator> evaluator;
  TaskNotifier tasks_ready;
  SecureRounds secure;  // the stages of jobs with secure aggregation
  RoundDriver driver;
  // Replicas only (config.lease_s > 0): which jobs this one drives. Runs in driver passes.
  std::unique_ptr<Ownership> ownership;
  // Replicas only: the open rounds of the jobs other replicas own, served here too.
  std::unique_ptr<SharedRounds> shared_rounds;
  // Replicas only: the store's wake-ups, which make the shared rounds be read at once.
  std::unique_ptr<WakeupThread> wakeups;
  const std::unique_ptr<Metrics::Registration> collector;  // last: it reads all of the above

  // The last database probe (database_health): when it ended on the steady clock, what it
  // found, and whether one runs now.
  Mutex health_mu;
  std::optional<std::chrono::steady_clock::time_point> health_checked_at
      FEDCASE_GUARDED_BY(health_mu);
  Status health FEDCASE_GUARDED_BY(health_mu) = unavailable("the database was not probed yet");
  bool health_probing FEDCASE_GUARDED_BY(health_mu) = false;

  // Sets the gauges of clients and jobs (at each scrape).
  void collect(Metrics& m);
  // The job if this coordinator has it and `scope` sees it, else nullptr. A replica that does
  // not have it yet (created through another replica a moment ago) loads it first if the store
  // has it: its next ownership pass runs at once, waited for up to 3 s.
  JobEntry* find_job(JobId id, const Scope& scope = std::nullopt);
  // The driver's thread stops, then the evaluator finishes its queue (its callbacks use the
  // driver, the jobs and the store), before any of them is destroyed.
  ~State() {
    if (wakeups) wakeups->stop();
    driver.stop();
    evaluator.reset();
  }
};

void Coordinator::State::collect(Metrics& m) {
  const ClientRegistry::Census census = clients.census(clock());
  m.set(metric::kClientsRegistered, {}, double(census.registered));
  m.set(metric::kClientsConnected, {}, double(census.available));
  std::map<std::string, double> by_state;
  for (JobState state :
       {JobState::kRunning, JobState::kPaused, JobState::kCancelled, JobState::kFinished}) {
    by_state[state_name(state)] = 0;
  }
  std::vector<std::pair<std::string, double>> accuracy, epsilon;
  double owned = 0;
  jobs.update_each([&](const JobEntry& job, const JobStatus& status) {
    by_state[state_name(status.state)] += 1;
    owned += status.owned ? 1 : 0;
    if (status.last_accuracy) accuracy.emplace_back(std::to_string(job.id), *status.last_accuracy);
    if (status.privacy.is_object() && status.privacy.value("epsilon", json()).is_number()) {
      epsilon.emplace_back(std::to_string(job.id), status.privacy["epsilon"].get<double>());
    }
  });
  for (const auto& [state, count] : by_state) m.set(metric::kJobs, {{"state", state}}, count);
  m.set(metric::kJobsOwned, {}, owned);
  m.clear(metric::kJobTestAccuracy);
  for (const auto& [job, value] : accuracy) m.set(metric::kJobTestAccuracy, {{"job", job}}, value);
  m.clear(metric::kJobPrivacyEpsilon);
  for (const auto& [job, value] : epsilon) m.set(metric::kJobPrivacyEpsilon, {{"job", job}}, value);
}

Coordinator::Coordinator(std::unique_ptr<State> state) : state_(std::move(state)) {}

Coordinator::~Coordinator() = default;

JobEntry* Coordinator::State::find_job(JobId id, const Scope& scope) {
  if (JobEntry* job = jobs.find(id, scope)) return job;
  if (!ownership || jobs.has(id) || !store->get_job(id).ok()) return nullptr;
  ownership->wake();
  driver.wake();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  while (!jobs.has(id) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return jobs.find(id, scope);
}

Result<std::unique_ptr<Coordinator>> Coordinator::open(const CoordinatorConfig& config,
                                                       std::unique_ptr<storage::Store> store,
                                                       std::unique_ptr<ModelEvaluator> evaluator,
                                                       Clock clock) {
  if (!store || !evaluator) return invalid_argument("a coordinator needs a store and an evaluator");
  auto state =
      std::make_unique<State>(config, std::move(store), std::move(evaluator), std::move(clock));
  State& s = *state;
  const RecoveryTargets targets{s.config, *s.store, s.clients, s.tenants,
                                s.jobs,   s.driver, s.metrics, s.clock};
  FEDCASE_RETURN_IF_ERROR(recover(targets));
  if (config.lease_s > 0) {
    s.ownership = std::make_unique<Ownership>(targets, s.replica_id);
    s.shared_rounds =
        std::make_unique<SharedRounds>(*s.store, s.jobs, s.tasks_ready, s.secure, s.metrics,
                                       s.replica_id);
    s.driver.set_replica(s.replica_id, config.lease_s);
    s.driver.set_pass([&ownership = *s.ownership, &shared = *s.shared_rounds](double now) {
      const double next = ownership.pass(now);
      return std::min(next, shared.follow(now));
    });
    // A wake-up (a job created, a lease changed, a round opened, closed or committed) makes
    // the next tick re-read at once what it is about: ownership (jobs, leases, the latest
    // committed models) and the shared rounds.
    s.wakeups = std::make_unique<WakeupThread>(*s.store, [&s] {
      s.ownership->wake();
      s.shared_rounds->wake();
      s.driver.wake_shared();
    });
    log_info("replica " + s.replica_id + ": drives the jobs whose lease it holds (" +
             std::to_string(config.lease_s) + " s leases)");
  }
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(state)));
}

const CoordinatorConfig& Coordinator::config() const { return state_->config; }

Metrics& Coordinator::metrics() { return state_->metrics; }

const std::string& Coordinator::replica_id() const { return state_->replica_id; }

Status Coordinator::database_health() {
  constexpr auto kProbeEvery = std::chrono::seconds(1);
  State& s = *state_;
  {
    MutexLock lock(s.health_mu);
    const auto now = std::chrono::steady_clock::now();
    const bool fresh = s.health_checked_at && now - *s.health_checked_at < kProbeEvery;
    if (fresh || s.health_probing) return s.health;
    s.health_probing = true;
  }
  Status probed = s.store->ping();
  MutexLock lock(s.health_mu);
  s.health_probing = false;
  s.health_checked_at = std::chrono::steady_clock::now();
  s.health = probed;
  return probed;
}

void Coordinator::start_driver() { state_->driver.start(); }
void Coordinator::stop_driver() { state_->driver.stop(); }
void Coordinator::tick() { state_->driver.tick(); }
void Coordinator::conclude_rounds() {
  state_->driver.stop();
  state_->driver.conclude_all();
  if (state_->ownership) state_->ownership->release_all();
}

Caller Coordinator::identify(std::string_view token) const {
  State& s = *state_;
  if (token.empty()) return {};
  if (constant_time_equal(token, s.config.admin_token)) return {Role::kAdmin, 0};
  if (constant_time_equal(token, s.config.enrollment_token)) return {Role::kEnrollment, 0};
  if (!s.config.metrics_token.empty() && constant_time_equal(token, s.config.metrics_token)) {
    return {Role::kMetrics, 0};
  }
  const std::string hash = sha256_hex(token);
  if (auto client = s.clients.identify(hash)) return {Role::kClient, *client, 0};
  if (auto tenant = s.tenants.identify(hash)) return {Role::kTenant, 0, *tenant};
  // A replica looks up a token it does not know: the client may have registered through
  // another replica a moment ago.
  if (!s.ownership) return {};
  if (auto client = s.clients.identify_or_learn(hash)) return {Role::kClient, *client, 0};
  return {};
}

Result<ClientRegistry::Registration> Coordinator::register_client(const json& request) {
  auto registration = protocol::read_registration(request);
  if (!registration.ok()) return registration.status();
  FEDCASE_RETURN_IF_ERROR(protocol::check_sdk_version(registration->protocol_version));
  return state_->clients.register_client(*registration, state_->clock());
}

Status Coordinator::heartbeat(ClientId client, const json& request) {
  if (!request.is_object()) return invalid_argument("request body must be a JSON object");
  return state_->clients.touch(client, state_->clock());
}

Result<std::optional<TaskOffer>> Coordinator::next_task(ClientId client) {
  State& s = *state_;
  const double now = s.clock();
  FEDCASE_RETURN_IF_ERROR(s.clients.touch(client, now));
  // The rounds of this call whose store said the client holds no place in them yet.
  std::set<std::pair<JobId, RoundIndex>> checked;
  for (;;) {
    // Decide: the first open round that holds a task the client may fetch. A round every
    // replica serves is asked about first: the client may have delivered through another.
    std::optional<TaskOffer> offer;
    std::optional<std::pair<JobEntry*, RoundIndex>> ask;
    s.jobs.update_each([&](JobEntry& job, JobStatus& status) {
      if (offer || ask || !status.round) return;
      rounds::Round& r = *status.round;
      const scheduling::ClientTask* task = r.task_for(client);
      if (!task || r.admission(client, now) != rounds::Admission::kWanted) return;
      if (status.shared_round && !checked.count({job.id, r.index()})) {
        ask = {&job, r.index()};
        return;
      }
      r.hand_out(client, now);
      offer = task_offer(job, r, client, *task);
    });
    if (!ask) return offer;
    // Read: a store that cannot answer hands the task out (the upload's admission decides).
    JobEntry* job = ask->first;
    const RoundIndex round = ask->second;
    auto held = s.store->holds_place(job->id, round, client);
    if (!held.ok() || !*held) {
      checked.insert({job->id, round});
      continue;
    }
    // Publish: the round's copy learns that this client delivered.
    s.jobs.update(*job, [&](JobStatus& status) {
      if (status.round && status.round->index() == round) status.round->admitted_elsewhere(client);
    });
  }
}

uint64_t Coordinator::watch_tasks(ClientId client, std::function<void()> wake) {
  return state_->tasks_ready.watch(client, std::move(wake));
}

void Coordinator::unwatch_tasks(ClientId client, uint64_t handle) {
  state_->tasks_ready.cancel(client, handle);
}

Result<ModelDownload> Coordinator::model(JobId job_id, uint64_t version, Scope scope,
                                         std::optional<ClientId> client) {
  State& s = *state_;
  const JobEntry* job = s.find_job(job_id, scope);
  if (!job) return job_not_found(job_id);
  auto latest = s.jobs.read(*job, [&](const JobStatus& status) -> Result<ModelDownload> {
    FEDCASE_RETURN_IF_ERROR(check_participant(*job, status, client, version));
    const auto& m = status.model;
    if (m->version != version) return ModelDownload{};  // an older one: from the store
    return ModelDownload{version, m->checksum, std::shared_ptr<const std::string>(m, &m->blob)};
  });
  if (!latest.ok() || latest->blob) return latest;
  auto record = s.store->get_model(job_id, version);
  if (!record.ok()) return record.status();
  return ModelDownload{version, record->checksum,
                       std::make_shared<const std::string>(std::move(record->blob))};
}

Result<ModuleDownload> Coordinator::module(JobId job_id, Scope scope,
                                           std::optional<ClientId> client) {
  const JobEntry* job = state_->find_job(job_id, scope);
  if (!job) return job_not_found(job_id);
  FEDCASE_RETURN_IF_ERROR(state_->jobs.read(*job, [&](const JobStatus& status) {
    return check_participant(*job, status, client, std::nullopt);
  }));
  if (!job->module) return not_found("job " + std::to_string(job_id) + " has no module");
  return ModuleDownload{job->module_checksum, job->module};
}

Result<rounds::Admission> Coordinator::task_status(ClientId client, JobId job_id,
                                                   RoundIndex round) {
  State& s = *state_;
  const double now = s.clock();
  const JobEntry* job = s.find_job(job_id);
  if (!job) return job_not_found(job_id);
  return s.jobs.read(*job, [&](const JobStatus& status) {
    if (!status.round) {
      // An asynchronous job commits between two buffers: its tasks carry over.
      const bool between = status.concluding && job->config.asynchronous();
      return between ? rounds::Admission::kHeld : rounds::Admission::kClosed;
    }
    if (!status.round->check_task_round(client, round).ok()) return rounds::Admission::kClosed;
    return status.round->admission(client, now);
  });
}

Result<UpdateAccepted> Coordinator::submit_update(ClientId client, JobId job_id,
                                                  RoundIndex round_index,
                                                  const Result<json>& meta_json,
                                                  std::string_view bytes, double upload_seconds) {
  State& s = *state_;
  const rounds::JobConfig* config = nullptr;
  if (const JobEntry* job = s.find_job(job_id)) config = &job->config;
  return admit_upload(
      client, job_id, round_index, /*masked=*/false, meta_json, bytes.size(), upload_seconds,
      [&](const HeldPlace& held, const protocol::UpdateMeta& meta,
          const std::function<Status()>& admit) -> Result<double> {
        // The update's values are validated and folded where they lie in the request body.
        BlobView update;
        FEDCASE_RETURN_IF_ERROR(view_blob(bytes, s.config.max_upload_bytes, update));
        FEDCASE_RETURN_IF_ERROR(rounds::check_upload(held.model->layout, held.trained_on,
                                                     held.round, *config, update, meta.evaluation));
        FEDCASE_RETURN_IF_ERROR(admit());
        const auto start = std::chrono::steady_clock::now();
        FEDCASE_RETURN_IF_ERROR(
            held.aggregate->add(update.values, update.count, meta.samples, held.discount));
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      });
}

Result<UpdateAccepted> Coordinator::submit_masked_input(
    ClientId client, JobId job_id, RoundIndex round_index, const Result<json>& header_json,
    const Result<json>& meta_json, std::string_view body, double upload_seconds) {
  State& s = *state_;
  const rounds::JobConfig* config = nullptr;
  if (const JobEntry* job = s.find_job(job_id)) config = &job->config;
  return admit_upload(
      client, job_id, round_index, /*masked=*/true, meta_json, body.size(), upload_seconds,
      [&](const HeldPlace& held, const protocol::UpdateMeta& meta,
          const std::function<Status()>& record) -> Result<double> {
        auto header = header_json.ok() ? protocol::read_secagg_masked_input(*header_json)
                                       : Result<protocol::SecAggMaskedInput>(header_json.status());
        if (!header.ok()) return header.status();
        FEDCASE_RETURN_IF_ERROR(
            rounds::check_evaluation(held.trained_on, held.round, *config, meta.evaluation));
        auto secure = secure_round(job_id, held.round);
        if (!secure.ok()) return secure.status();
        const auto start = std::chrono::steady_clock::now();
        FEDCASE_RETURN_IF_ERROR((*secure)->receive_masked_input(client, *header, body, record));
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      });
}

Result<UpdateAccepted> Coordinator::admit_upload(ClientId client, JobId job_id,
                                                 RoundIndex round_index, bool masked,
                                                 const Result<json>& meta_json, size_t body_bytes,
                                                 double upload_seconds, const FoldUpload& fold) {
  State& s = *state_;
  JobEntry* job = s.find_job(job_id);
  if (!job) return job_not_found(job_id);
  if (bool(job->config.secure_aggregation) != masked) {
    return conflict(masked ? "job " + std::to_string(job_id) +
                                 " does not use secure aggregation: upload the update itself"
                           : "job " + std::to_string(job_id) +
                                 " uses secure aggregation: send the masked input to the "
                                 "task's secure_aggregation.masked_input_url");
  }
  // Decide: the state checks come first and hold one of the round's places for this upload.
  auto held = s.jobs.update(*job, [&](JobStatus& status) -> Result<HeldPlace> {
    if (!status.round) {
      if (status.concluding && job->config.asynchronous()) {
        return unavailable("job " + std::to_string(job_id) +
                           " is committing a model version; retry shortly");
      }
      if (!status.owned && !rounds::owner_only_reason(job->config).empty()) {
        return conflict("round " + std::to_string(round_index) + " of job " +
                        std::to_string(job_id) +
                        " is not open on this replica: " + rounds::owner_only_reason(job->config) +
                        ", so only the replica that drives the job serves its rounds");
      }
      return conflict("round " + std::to_string(round_index) + " of job " + std::to_string(job_id) +
                      " is not open for updates");
    }
    rounds::Round& r = *status.round;
    FEDCASE_RETURN_IF_ERROR(r.check_task_round(client, round_index));
    auto reserved = r.reserve(client, s.clock());
    if (!reserved.ok()) return reserved.status();
    return HeldPlace{*reserved,
                     r.index(),
                     r.terms_for(client)->base_version,
                     rounds::staleness_weight(job->config.async, r.staleness(client)),
                     status.model,
                     status.shared_round};
  });
  if (!held.ok()) return held.status();
  // A refused upload gives its place back (in the store too, once reserved there); the round
  // may be due once no upload is in flight.
  const RoundIndex round = held->round;
  bool reserved_in_store = false;
  auto refuse = [&](Status why) -> Result<UpdateAccepted> {
    if (reserved_in_store) {
      Status released = s.store->release_update(job_id, round, client, s.replica_id);
      if (!released.ok()) log_warn("cannot release an update's place: " + released.to_string());
    }
    const bool due = s.jobs.update(*job, [&](JobStatus& status) {
      if (!status.round || status.round->index() != round) return false;
      status.round->release(client);
      return status.round->due(s.clock());
    });
    if (due) s.driver.wake();
    return why;
  };
  // Write, without any lock: parse, validate, admit the update in the store, fold it in.
  auto meta = meta_json.ok() ? protocol::read_update_meta(*meta_json)
                             : Result<protocol::UpdateMeta>(meta_json.status());
  if (!meta.ok()) return refuse(meta.status());
  const double now = s.clock();
  const storage::UpdateRecord update{
      job_id, round, client, *meta_json, now, held->shared ? s.replica_id : std::string()};
  // A shared round's place is reserved before the fold and the update recorded after it;
  // otherwise the metadata is recorded before the fold, as it always was.
  auto admit = [&]() -> Status {
    if (!held->shared) return s.store->record_update(update);
    Status reserved = s.store->reserve_update(job_id, round, client, s.replica_id, kUpdateHoldS);
    reserved_in_store = reserved.ok();
    return reserved;
  };
  Result<double> fold_s = fold(*held, *meta, admit);
  if (!fold_s.ok()) return refuse(fold_s.status());
  if (held->shared) {
    Status recorded = s.store->record_update(update);
    if (!recorded.ok()) {
      // Folded but not admitted (its reservation expired): this replica's aggregate of the
      // round no longer matches the store's, and is not written as a partial.
      s.jobs.update(*job, [&](JobStatus& status) {
        if (status.round && status.round->index() == round) status.spoilt = true;
      });
      reserved_in_store = false;
      return refuse(recorded);
    }
  }
  s.metrics.observe(metric::kFoldSeconds, {}, *fold_s);
  // Publish.
  const scheduling::RoundReport report =
      rounds::completion_report(*meta, held->model->blob.size(), body_bytes, upload_seconds);
  rounds::ProfileChange completed;
  UpdateAccepted accepted{round, 0};
  uint64_t staleness = 0;
  s.jobs.update(*job, [&](JobStatus& status) {
    rounds::Round& r = *status.round;  // a round with a reservation in flight stays open
    staleness = r.staleness(client);
    completed = r.accept(client, report, now, *fold_s, std::move(meta->evaluation));
    accepted.updates = r.accepted();
  });
  if (job->config.asynchronous()) {
    s.metrics.observe(metric::kUpdateStaleness, {}, double(staleness));
  }
  s.clients.apply({completed});
  Status touched = s.clients.touch(client, now);
  (void)touched;    // the client exists: it was identified by its token
  s.driver.wake();  // the round may be due, and the client is free for another job's round
  return accepted;
}

Result<std::shared_ptr<SecureStages>> Coordinator::secure_round(JobId job_id, RoundIndex round) {
  State& s = *state_;
  if (!s.find_job(job_id)) return job_not_found(job_id);
  std::shared_ptr<SecureStages> secure = s.secure.stages(job_id);
  auto behind = [&] { return !secure || secure->index() < round; };
  if (behind() && s.shared_rounds) {
    // A replica that has not followed the owner's new round yet (a client's next request may
    // reach another replica than its task's) follows it at once, if the store has it open.
    auto admission = s.store->round_admission(job_id, round);
    if (admission.ok() && admission->open) {
      s.shared_rounds->wake();
      s.driver.wake();
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (behind() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        secure = s.secure.stages(job_id);
      }
    }
  }
  if (!secure || secure->index() != round) {
    return conflict("round " + std::to_string(round) + " of job " + std::to_string(job_id) +
                    " is not a secure round in progress");
  }
  return secure;
}

uint64_t Coordinator::watch_secure_stages(ClientId client, std::function<void()> wake) {
  return state_->secure.watch(client, std::move(wake));
}

void Coordinator::unwatch_secure_stages(ClientId client, uint64_t handle) {
  state_->secure.unwatch(client, handle);
}

Result<ModelListing> Coordinator::models(JobId id, Scope scope) {
  State& s = *state_;
  const JobEntry* job = s.find_job(id, scope);
  if (!job) return job_not_found(id);
  ModelListing out;
  out.job = id;
  out.evaluation_target = job->config.evaluation.target;
  s.jobs.read(*job, [&](const JobStatus& status) {
    out.bytes = status.model->blob.size();
    out.parameters = status.model->layout.element_count();
  });
  auto versions = versions_of(*s.store, *job);
  if (!versions.ok()) return versions.status();
  out.models = std::move(versions).value();
  out.latest = *resolve_version("latest", out.models);
  if (auto best = resolve_version("best", out.models); best.ok()) out.best = *best;
  return out;
}

Result<ModelExport> Coordinator::export_model(JobId id, std::string_view version,
                                              ExportFormat format, Scope scope) {
  State& s = *state_;
  const JobEntry* job = s.find_job(id, scope);
  if (!job) return job_not_found(id);
  auto versions = versions_of(*s.store, *job);
  if (!versions.ok()) return versions.status();
  auto resolved = resolve_version(version, *versions);
  if (!resolved.ok()) {
    return Status(resolved.status().code(),
                  "job " + std::to_string(id) + ": " + resolved.status().message());
  }
  storage::Store& store = *s.store;
  return s.exports.get({id, job->config.model, job->module,
                        [&store, id](uint64_t v) { return stored_version(store, id, v); }},
                       *resolved, format);
}

Result<JobSummary> Coordinator::create_job(const json& request) {
  double retry_after_s = 0;
  return create_job(request, 0, retry_after_s);
}

Result<JobSummary> Coordinator::create_job(const json& request, TenantId owner,
                                           double& retry_after_s,
                                           std::optional<std::string_view> model_file) {
  State& s = *state_;
  auto parts = rounds::build_job(request);
  if (!parts.ok()) return parts.status();
  const rounds::JobConfig& config = parts->config;
  if (owner != 0 && !config.evaluation.server_dataset.empty()) {
    return permission_denied(
        "evaluation.server_dataset is for the admin's jobs: the coordinator runs the module to "
        "score it");
  }
  std::error_code ec;
  if (const std::string dataset = server_dataset_dir(s.config.datasets_dir, config);
      !dataset.empty() && !std::filesystem::is_directory(dataset, ec)) {
    return invalid_argument("evaluation.server_dataset \"" + config.evaluation.server_dataset +
                            "\" is not a folder under the coordinator's datasets_dir");
  }
  auto initial = initial_parameters(config, model_file, s.config.max_model_bytes);
  if (!initial.ok()) return initial.status();
  json stored_config = request;
  if (config.init_from) {
    auto start = trained_start(*config.init_from, owner, initial->layout);
    if (!start.ok()) return start.status();
    initial->data = std::move(start->data);
    stored_config["init_from"]["version"] = start->model_version;
  }
  // One creation at a time: two submissions of a tenant cannot both pass its running-job cap.
  MutexLock creating(s.create_mu);
  const size_t running = s.jobs.active_jobs_per_tenant()[owner];
  const bool overload = s.driver.fleet_overloaded(
      s.clock(), scheduling::invited_count(config.clients_per_round, config.overcommit));
  if (!s.tenants.admit_job(owner, running, overload, s.clock(), retry_after_s)) {
    return resource_exhausted("the fleet is overloaded and this tenant is at its limit of " +
                              std::string("running jobs or job submissions; retry in ") +
                              std::to_string(int(std::ceil(retry_after_s))) + " s");
  }
  auto model = rounds::make_global_model(0, std::move(initial->layout), std::move(initial->data));
  std::shared_ptr<const std::string> module;
  if (config.model == "torchscript") module = std::make_shared<const std::string>(*model_file);
  const double now = s.clock();
  storage::JobRecord record{0,   config.name, stored_config, JobState::kRunning, json::object(),
                            now, owner};
  static const std::string kNoModule;
  auto id = s.store->create_job(record, {0, 0, model->blob, model->checksum, std::string(), now},
                                module ? *module : kNoModule);
  if (!id.ok()) return id.status();
  record.id = *id;
  const std::string created = "job " + std::to_string(*id) + " (" + config.name +
                              ") created: " + config.model + ", " +
                              std::to_string(model->params.size()) + " parameters";
  auto job = make_job(record, std::move(parts).value(), model, std::move(module), std::string(), 0,
                      {}, s.config.datasets_dir);
  if (!job.ok()) return job.status();
  // A replica drives the job once it acquires its lease, like any other replica may.
  job->status.owned = s.config.lease_s <= 0;
  const JobEntry& entry = *job->entry;
  const JobSummary summary = summary_of(entry, job->status);
  s.jobs.install(std::move(job).value());
  log_info(created);
  s.driver.wake();
  return summary;
}

Result<ModelBlob> Coordinator::trained_start(const rounds::InitFrom& from, TenantId owner,
                                             const ModelLayout& layout) {
  State& s = *state_;
  const std::string source = "init_from: job " + std::to_string(from.job);
  const JobEntry* job = s.find_job(from.job, owner == 0 ? Scope() : Scope(owner));
  if (!job) return invalid_argument(source + " not found");
  auto versions = versions_of(*s.store, *job);
  if (!versions.ok()) return versions.status();
  auto version = resolve_version(from.version, *versions);
  if (!version.ok()) return invalid_argument(source + ": " + version.status().message());
  auto stored = stored_version(*s.store, from.job, *version);
  if (!stored.ok()) {
    return stored.status().code() == Code::kNotFound
               ? invalid_argument("init_from: " + stored.status().message())
               : stored.status();
  }
  auto blob = decode_blob(stored->blob, stored->blob.size());
  if (!blob.ok()) return internal_error(source + ": the stored model does not decode");
  if (const std::string difference = layout.first_difference(blob->layout); !difference.empty()) {
    return invalid_argument(source + " version " + std::to_string(*version) +
                            " does not fit this job's model: " + difference +
                            " (here: this job's model, there: the trained one)");
  }
  blob->model_version = *version;
  return blob;
}

std::vector<JobSummary> Coordinator::list_jobs(Scope scope) {
  std::vector<JobSummary> out;
  state_->jobs.update_each([&](const JobEntry& job, const JobStatus& status) {
    if (job.visible_to(scope)) out.push_back(summary_of(job, status));
  });
  return out;
}

Result<JobDetail> Coordinator::job_detail(JobId id, Scope scope) {
  State& s = *state_;
  const JobEntry* job = s.find_job(id, scope);
  if (!job) return job_not_found(id);
  JobDetail d;
  d.config = job->config_json;
  d.created_at = job->created_at;
  d.module_bytes = job->module ? job->module->size() : 0;
  d.evaluation_target = job->config.evaluation.target;
  d.selection_policy = job->policy_name;
  d.aggregation = job->config.aggregation.rule;
  d.server_optimizer = job->optimizer_name;
  // The rounds before the status: an evaluation publishes the job's accuracy before it
  // records the round's figures, so the detail never shows figures newer than its accuracy.
  auto rounds = s.store->list_rounds(id);
  if (!rounds.ok()) return rounds.status();
  d.rounds = std::move(rounds).value();
  s.jobs.read(*job, [&](const JobStatus& status) {
    d.summary = summary_of(*job, status);
    d.parameters = status.model->layout.element_count();
    d.policy_state = status.policy_state;
    d.privacy = status.privacy;
    if (status.round) {
      const rounds::Round& r = *status.round;
      d.current_round = JobDetail::OpenRound{r.index(), r.tasks().size(), r.accepted(),
                                             r.next_deadline().value_or(r.opened_at()), nullptr};
    }
  });
  if (std::shared_ptr<SecureRound> secure = s.secure.find(id);
      secure && d.current_round && secure->index() == d.current_round->index) {
    d.current_round->secure_aggregation = secure->summary();
  }
  return d;
}

std::vector<ClientSummary> Coordinator::list_clients() {
  State& s = *state_;
  struct JobCost {
    JobId id;
    scheduling::TrainingParams training;
    uint64_t model_bytes;
  };
  std::vector<JobCost> active;
  s.jobs.update_each([&](const JobEntry& job, const JobStatus& status) {
    if (status.active()) active.push_back({job.id, job.config.training, status.model->blob.size()});
  });
  std::vector<ClientSummary> out;
  for (ClientSnapshot& c : s.clients.snapshot(s.clock())) {
    ClientSummary summary{std::move(c.record), c.profile, c.available, {}};
    for (const JobCost& job : active) {
      summary.expected_duration_s[job.id] =
          scheduling::make_candidate(c.profile, true, job.training, job.model_bytes)
              .expected_duration_s;
    }
    out.push_back(std::move(summary));
  }
  return out;
}

Result<JobState> Coordinator::control_job(JobId id, const std::string& action, Scope scope) {
  State& s = *state_;
  if (action != "pause" && action != "resume" && action != "cancel") {
    return not_found("unknown job action '" + action + "'");
  }
  JobEntry* job = s.find_job(id, scope);
  if (!job) return job_not_found(id);
  auto next = s.jobs.transition(*job, [&](JobState state) -> Result<JobState> {
    const bool active = state == JobState::kRunning || state == JobState::kPaused;
    if (action == "pause" && state == JobState::kRunning) return JobState::kPaused;
    if (action == "resume" && state == JobState::kPaused) return JobState::kRunning;
    if (action == "cancel" && active) return JobState::kCancelled;
    return conflict("cannot " + action + " a job that is " + state_name(state));
  });
  if (next.ok()) s.driver.wake();  // a paused job finishes its round; a cancelled one stops it
  return next;
}

Result<TenantRegistry::Created> Coordinator::create_tenant(const json& request) {
  auto created = state_->tenants.create(request, state_->clock());
  if (created.ok()) {
    log_info("tenant " + std::to_string(created->record.id) + " (" + created->record.name +
             ") created, weight " + std::to_string(created->record.weight));
  }
  return created;
}

TenantsOverview Coordinator::tenants() {
  State& s = *state_;
  TenantsOverview out;
  out.active_jobs = s.jobs.active_jobs_per_tenant();
  out.share = s.tenants.share_json()["tenants"];
  storage::TenantRecord operator_tenant;
  operator_tenant.name = kOperatorTenantName;
  operator_tenant.limits = scheduling::tenant_limits_json({});
  out.tenants.push_back(std::move(operator_tenant));
  for (storage::TenantRecord& t : s.tenants.list()) out.tenants.push_back(std::move(t));
  return out;
}

}  // namespace fedcase::server
