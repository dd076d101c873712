#include "server/coordinator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include "aggregation/validation.h"
#include "common/blob.h"
#include "common/crypto.h"
#include "common/log.h"
#include "common/torchscript_archive.h"
#include "ml/dataset.h"
#include "ml/model.h"
#include "protocol/registration.h"
#include "protocol/update_meta.h"
#include "protocol/version.h"
#include "rounds/evaluation.h"
#include "rounds/job_config.h"
#include "scheduling/round_plan.h"
#include "scheduling/selection.h"
#include "server/client_registry.h"
#include "server/round_driver.h"
#include "server/task_notifier.h"
#include "server/timed_store.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// What the profile learns from an accepted update's statistics and transfer times.
scheduling::RoundReport completion_report(const protocol::UpdateMeta& meta, uint64_t model_bytes,
                                          uint64_t upload_bytes, double upload_seconds) {
  scheduling::RoundReport report;
  report.samples = meta.samples;
  report.loss_sum = meta.loss_sum;
  report.loss_sq_sum = meta.loss_sq_sum;
  report.compute_s = meta.compute_s;
  report.io_s = meta.io_s;
  report.cache_hits = meta.cache_hits;
  report.cache_misses = meta.cache_misses;
  report.sample_bytes = meta.cache_misses > 0 ? double(meta.bytes_read) / meta.cache_misses : 0;
  report.download_bytes = meta.download_s > 0 ? model_bytes : 0;
  report.download_s = meta.download_s;
  report.upload_bytes = upload_seconds > 0 ? upload_bytes : 0;
  report.upload_s = upload_seconds;
  return report;
}

JobSummary summary_of(const JobEntry& job) {
  return {job.id,
          job.name,
          job.tenant,
          job.config.model,
          job.policy_name,
          job.state,
          job.model->version,
          job.model->checksum,
          job.last_round,
          job.round.has_value(),
          job.last_accuracy};
}

// The folder of a job's server dataset, or "" without one.
std::string server_dataset_dir(const CoordinatorConfig& coordinator, const rounds::JobConfig& job) {
  if (job.evaluation.server_dataset.empty()) return std::string();
  return (std::filesystem::path(coordinator.datasets_dir) / job.evaluation.server_dataset).string();
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
  TorchScriptLimits limits;
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

std::shared_ptr<const rounds::GlobalModel> stored_model(const storage::ModelRecord& record,
                                                        Status& status) {
  auto blob = decode_blob(record.blob, record.blob.size());
  if (!blob.ok()) {
    status = blob.status();
    return nullptr;
  }
  auto model = std::make_shared<rounds::GlobalModel>();
  model->version = record.version;
  model->layout = std::move(blob->layout);
  model->params = std::move(blob->data);
  model->blob = record.blob;
  model->checksum = record.checksum;
  return model;
}

}  // namespace

struct Coordinator::State {
  State(const CoordinatorConfig& c, std::unique_ptr<storage::Store> s,
        std::unique_ptr<ModelEvaluator> e, Clock k)
      : config(c),
        store(timed_store(std::move(s), metrics)),
        clock(std::move(k)),
        clients(*store, profile_params(c)),
        tenants(*store),
        jobs(*store),
        evaluator(std::move(e)),
        driver(jobs, clients, tenants, *store, *evaluator, tasks_ready, metrics, clock),
        collector(metrics.add_collector([this](Metrics& m) { collect(m); })) {}

  static scheduling::ProfileParams profile_params(const CoordinatorConfig& c) {
    scheduling::ProfileParams p;
    p.offline_gap_s = c.client_timeout_s;
    return p;
  }

  Metrics metrics;  // first: the store and the driver record into it
  const CoordinatorConfig config;
  const std::unique_ptr<storage::Store> store;
  const Clock clock;
  ClientRegistry clients;
  TenantRegistry tenants;
  std::mutex create_mu;  // job creations, one at a time (held across their store write only)
  JobTable jobs;
  std::unique_ptr<ModelEvaluator> evaluator;
  TaskNotifier tasks_ready;
  RoundDriver driver;
  const std::unique_ptr<Metrics::Registration> collector;  // last: it reads all of the above

  // Sets the gauges of clients and jobs (at each scrape).
  void collect(Metrics& m);

  // Installs a job (at creation or recovery) with its runtime, latest model and module (null:
  // none).
  Status install(storage::JobRecord record, rounds::JobConfig config,
                 std::shared_ptr<const rounds::GlobalModel> model,
                 std::shared_ptr<const std::string> module, const std::string& optimizer_state,
                 RoundIndex last_round, const std::vector<storage::RoundRecord>& history);
  // The driver's thread stops, then the evaluator finishes its queue (its callbacks use the
  // driver, the jobs and the store), before any of them is destroyed.
  ~State() {
    driver.stop();
    evaluator.reset();
  }

  Status recover();
  // Queues the evaluation of committed models that have none (a crash came first).
  Status evaluate_unscored(JobId id, const std::vector<storage::RoundRecord>& rounds);
};

Status Coordinator::State::install(storage::JobRecord record, rounds::JobConfig config,
                                   std::shared_ptr<const rounds::GlobalModel> model,
                                   std::shared_ptr<const std::string> module,
                                   const std::string& optimizer_state, RoundIndex last_round,
                                   const std::vector<storage::RoundRecord>& history) {
  // A secret per job and process: DP noise cannot be regenerated from the job config.
  auto dp_secret = random_u64();
  if (!dp_secret.ok()) return dp_secret.status();
  auto runtime = rounds::JobRuntime::create(config, model, record.policy_state, optimizer_state,
                                            last_round, *dp_secret | 1);
  if (!runtime.ok()) return runtime.status();
  auto job = std::make_unique<JobEntry>();
  for (const auto& r : history) {
    if (r.state == RoundState::kCommitted) {
      FEDCASE_RETURN_IF_ERROR((*runtime)->replay_privacy(r.metrics));
      auto accuracy = rounds::recorded_accuracy(r.metrics, config.evaluation.target);
      if (accuracy) job->last_accuracy = accuracy;
    }
  }
  job->id = record.id;
  job->name = record.name;
  job->config_json = record.config;
  job->config = std::move(config);
  job->created_at = record.created_at;
  job->tenant = record.tenant;
  if (module) job->module_checksum = sha256_hex(*module);
  job->module = std::move(module);
  job->evaluated = {job->config.model,
                    job->module,
                    job->module_checksum,
                    job->config.loss,
                    server_dataset_dir(this->config, job->config),
                    job->config.evaluation.input_shape};
  job->state = record.state;
  job->model = std::move(model);
  job->last_round = (*runtime)->last_round();
  job->policy_name = (*runtime)->policy_name();
  job->optimizer_name = (*runtime)->optimizer_name();
  job->policy_state = (*runtime)->policy_state();
  job->privacy = privacy_view(**runtime);
  job->runtime = std::move(runtime).value();
  std::lock_guard<std::mutex> lock(jobs.mu);
  jobs.jobs[job->id] = std::move(job);
  return ok_status();
}

Status Coordinator::State::recover() {
  FEDCASE_RETURN_IF_ERROR(clients.load());
  FEDCASE_RETURN_IF_ERROR(tenants.load());
  auto records = store->list_jobs();
  if (!records.ok()) return records.status();
  for (auto& record : *records) {
    const JobId id = record.id;
    auto latest = store->latest_model(id);
    if (!latest.ok()) return latest.status();
    Status decoded;
    auto model = stored_model(*latest, decoded);
    FEDCASE_RETURN_IF_ERROR(decoded);
    auto rounds = store->list_rounds(id);
    if (!rounds.ok()) return rounds.status();
    RoundIndex last_round = 0;
    for (auto& r : *rounds) {
      last_round = std::max(last_round, r.index);
      metrics.add(metric::kRounds,
                  {{"job", std::to_string(id)},
                   {"outcome", r.state == RoundState::kCommitted ? "committed" : "failed"}});
      if (r.state != RoundState::kOpen) continue;
      r.state = RoundState::kFailed;
      r.closed_at = clock();
      r.metrics = {{"failure", "coordinator restarted while the round was open"}};
      FEDCASE_RETURN_IF_ERROR(store->fail_round(r));
      log_info("job " + std::to_string(id) + ": round " + std::to_string(r.index) +
               " was open at restart and is marked failed");
    }
    const std::string name = record.name;
    auto config = rounds::parse_job_config(record.config);
    if (!config.ok()) return config.status();
    std::shared_ptr<const std::string> module;
    if (config->model == "torchscript") {
      auto stored = store->get_job_module(id);
      if (!stored.ok()) return stored.status();
      module = std::make_shared<const std::string>(std::move(stored).value());
    }
    FEDCASE_RETURN_IF_ERROR(install(std::move(record), std::move(config).value(), model,
                                    std::move(module), latest->optimizer_state, last_round,
                                    *rounds));
    log_info("job " + std::to_string(id) + " (" + name + ") resumes at model version " +
             std::to_string(model->version) + ", checksum " + model->checksum.substr(0, 12));
    FEDCASE_RETURN_IF_ERROR(evaluate_unscored(id, *rounds));
  }
  return ok_status();
}

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
  {
    std::lock_guard<std::mutex> lock(jobs.mu);
    for (const auto& [id, job] : jobs.jobs) {
      by_state[state_name(job->state)] += 1;
      if (job->last_accuracy) accuracy.emplace_back(std::to_string(id), *job->last_accuracy);
      if (job->privacy.is_object() && job->privacy.value("epsilon", json()).is_number()) {
        epsilon.emplace_back(std::to_string(id), job->privacy["epsilon"].get<double>());
      }
    }
  }
  for (const auto& [state, count] : by_state) m.set(metric::kJobs, {{"state", state}}, count);
  m.clear(metric::kJobTestAccuracy);
  for (const auto& [job, value] : accuracy) m.set(metric::kJobTestAccuracy, {{"job", job}}, value);
  m.clear(metric::kJobPrivacyEpsilon);
  for (const auto& [job, value] : epsilon) m.set(metric::kJobPrivacyEpsilon, {{"job", job}}, value);
}

Status Coordinator::State::evaluate_unscored(JobId id,
                                             const std::vector<storage::RoundRecord>& rounds) {
  JobEntry* job = nullptr;
  {
    std::lock_guard<std::mutex> lock(jobs.mu);
    job = jobs.find(id);
  }
  if (!job->config.server_evaluated()) return ok_status();
  for (const auto& r : rounds) {
    if (r.state != RoundState::kCommitted || r.metrics.contains("test_accuracy")) continue;
    auto stored = store->get_model(id, r.index);
    if (!stored.ok()) return stored.status();
    Status decoded;
    auto model = stored_model(*stored, decoded);
    FEDCASE_RETURN_IF_ERROR(decoded);
    log_info("job " + std::to_string(id) + ": evaluating model " + std::to_string(r.index) +
             ", committed before the restart");
    driver.evaluate(*job, model, json::object());
  }
  return ok_status();
}

Coordinator::Coordinator(std::unique_ptr<State> state) : state_(std::move(state)) {}

Coordinator::~Coordinator() = default;

Result<std::unique_ptr<Coordinator>> Coordinator::open(const CoordinatorConfig& config,
                                                       std::unique_ptr<storage::Store> store,
                                                       std::unique_ptr<ModelEvaluator> evaluator,
                                                       Clock clock) {
  if (!store || !evaluator) return invalid_argument("a coordinator needs a store and an evaluator");
  auto state =
      std::make_unique<State>(config, std::move(store), std::move(evaluator), std::move(clock));
  FEDCASE_RETURN_IF_ERROR(state->recover());
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(state)));
}

Result<std::unique_ptr<Coordinator>> Coordinator::open(const CoordinatorConfig& config) {
  auto store = storage::open_sqlite_store(config.database);
  if (!store.ok()) return store.status();
  auto eval = ml::load_fashion_mnist(config.eval_data_dir, ml::Split::kTest);
  if (!eval.ok()) return eval.status();
  auto evaluator = std::make_unique<TestSetEvaluator>(std::move(eval).value(), config.eval_samples,
                                                      config.torch_threads);
  return open(config, std::move(store).value(), std::move(evaluator));
}

const CoordinatorConfig& Coordinator::config() const { return state_->config; }

Metrics& Coordinator::metrics() { return state_->metrics; }

void Coordinator::start_driver() { state_->driver.start(); }
void Coordinator::stop_driver() { state_->driver.stop(); }
void Coordinator::tick() { state_->driver.tick(); }
void Coordinator::conclude_rounds() {
  state_->driver.stop();
  state_->driver.conclude_all();
}

Caller Coordinator::identify(std::string_view token) const {
  const State& s = *state_;
  if (token.empty()) return {};
  if (constant_time_equal(token, s.config.admin_token)) return {Role::kAdmin, 0};
  if (constant_time_equal(token, s.config.enrollment_token)) return {Role::kEnrollment, 0};
  if (!s.config.metrics_token.empty() && constant_time_equal(token, s.config.metrics_token)) {
    return {Role::kMetrics, 0};
  }
  const std::string hash = sha256_hex(token);
  if (auto client = s.clients.identify(hash)) return {Role::kClient, *client, 0};
  if (auto tenant = s.tenants.identify(hash)) return {Role::kTenant, 0, *tenant};
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
  std::lock_guard<std::mutex> lock(s.jobs.mu);
  for (auto& [id, job] : s.jobs.jobs) {
    if (!job->round) continue;
    rounds::Round& r = *job->round;
    const scheduling::ClientTask* task = r.task_for(client);
    if (!task || r.admission(client, now) != rounds::Admission::kWanted) continue;
    r.hand_out(client, now);
    const rounds::EvaluationConfig& evaluation = job->config.evaluation;
    return std::optional<TaskOffer>(TaskOffer{
        id, r.index(), job->config.model, job->config.loss, r.base_version(), job->model->checksum,
        job->module_checksum, r.deadline(), job->config.training.local_epochs,
        evaluation.federated ? std::optional<size_t>(evaluation.max_samples) : std::nullopt,
        *task});
  }
  return std::optional<TaskOffer>();
}

uint64_t Coordinator::watch_tasks(ClientId client, std::function<void()> wake) {
  return state_->tasks_ready.watch(client, std::move(wake));
}

void Coordinator::unwatch_tasks(ClientId client, uint64_t handle) {
  state_->tasks_ready.cancel(client, handle);
}

namespace {

// Whether `client` (when a client asks) holds a task of `job`'s open round, for a model of
// `version` (when one is asked for); kPermissionDenied otherwise.
Status check_participant(const JobEntry& job, JobId job_id, std::optional<ClientId> client,
                         std::optional<uint64_t> version) {
  if (!client) return ok_status();
  const bool holds = job.round && job.round->holds_task(*client) &&
                     (!version || *version == job.round->base_version());
  if (holds) return ok_status();
  return permission_denied("client " + std::to_string(*client) + " holds no task of job " +
                           std::to_string(job_id) +
                           (version ? " on model version " + std::to_string(*version) : ""));
}

}  // namespace

Result<ModelDownload> Coordinator::model(JobId job_id, uint64_t version, Scope scope,
                                         std::optional<ClientId> client) {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.jobs.mu);
    JobEntry* job = s.jobs.find(job_id);
    if (!job || (scope && job->tenant != *scope)) {
      return not_found("job " + std::to_string(job_id) + " not found");
    }
    FEDCASE_RETURN_IF_ERROR(check_participant(*job, job_id, client, version));
    if (job->model->version == version) {
      const auto& m = job->model;
      return ModelDownload{version, m->checksum, std::shared_ptr<const std::string>(m, &m->blob)};
    }
  }
  auto record = s.store->get_model(job_id, version);
  if (!record.ok()) return record.status();
  return ModelDownload{version, record->checksum,
                       std::make_shared<const std::string>(std::move(record->blob))};
}

Result<ModuleDownload> Coordinator::module(JobId job_id, Scope scope,
                                           std::optional<ClientId> client) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.jobs.mu);
  JobEntry* job = s.jobs.find(job_id);
  if (!job || (scope && job->tenant != *scope)) {
    return not_found("job " + std::to_string(job_id) + " not found");
  }
  FEDCASE_RETURN_IF_ERROR(check_participant(*job, job_id, client, std::nullopt));
  if (!job->module) return not_found("job " + std::to_string(job_id) + " has no module");
  return ModuleDownload{job->module_checksum, job->module};
}

Result<rounds::Admission> Coordinator::task_status(ClientId client, JobId job_id,
                                                   RoundIndex round) {
  State& s = *state_;
  const double now = s.clock();
  std::lock_guard<std::mutex> lock(s.jobs.mu);
  JobEntry* job = s.jobs.find(job_id);
  if (!job) return not_found("job " + std::to_string(job_id) + " not found");
  if (!job->round || job->round->index() != round) return rounds::Admission::kClosed;
  return job->round->admission(client, now);
}

Result<UpdateAccepted> Coordinator::submit_update(ClientId client, JobId job_id,
                                                  RoundIndex round_index,
                                                  const Result<json>& meta_json,
                                                  std::string_view bytes, double upload_seconds) {
  State& s = *state_;
  // Decide: the state checks come first and hold one of the round's places for this upload.
  std::shared_ptr<rounds::RoundAggregate> aggregate;
  std::shared_ptr<const rounds::GlobalModel> base;
  JobEntry* job = nullptr;
  double max_norm = 0;
  size_t max_eval_samples = 0;
  {
    std::lock_guard<std::mutex> lock(s.jobs.mu);
    job = s.jobs.find(job_id);
    if (!job) return not_found("job " + std::to_string(job_id) + " not found");
    if (!job->round || job->round->index() != round_index) {
      return conflict("round " + std::to_string(round_index) + " of job " + std::to_string(job_id) +
                      " is not open for updates");
    }
    auto reserved = job->round->reserve(client, s.clock());
    if (!reserved.ok()) return reserved.status();
    aggregate = *reserved;
    base = job->model;
    max_norm = job->config.max_update_norm;
    max_eval_samples = job->config.evaluation.max_samples;
  }
  auto release = [&] {
    std::lock_guard<std::mutex> lock(s.jobs.mu);
    if (job->round && job->round->index() == round_index) job->round->release(client);
  };
  // Write, without any lock: parse, validate, record the update, fold it in.
  auto meta = meta_json.ok() ? protocol::read_update_meta(*meta_json)
                             : Result<protocol::UpdateMeta>(meta_json.status());
  if (!meta.ok()) {
    release();
    return meta.status();
  }
  // The update's values are validated and folded where they lie in the request body.
  BlobView decoded;
  if (Status read = view_blob(bytes, s.config.max_upload_bytes, decoded); !read.ok()) {
    release();
    return read;
  }
  Status valid = decoded.model_version == base->version
                     ? aggregation::validate_update(base->layout, decoded, {max_norm})
                     : unprocessable("update was trained on model version " +
                                     std::to_string(decoded.model_version) + ", round " +
                                     std::to_string(round_index) + " trains version " +
                                     std::to_string(base->version));
  if (valid.ok() && meta->evaluation && meta->evaluation->model_version != base->version) {
    valid = unprocessable("the evaluation scores model version " +
                          std::to_string(meta->evaluation->model_version) + ", round " +
                          std::to_string(round_index) + " evaluates version " +
                          std::to_string(base->version));
  }
  // A client scores at most max_samples held-out samples: a larger count is no honest report
  // (and would outweigh the others in the round's means).
  if (valid.ok() && meta->evaluation && max_eval_samples > 0 &&
      meta->evaluation->samples > max_eval_samples) {
    valid = unprocessable("the evaluation reports " + std::to_string(meta->evaluation->samples) +
                          " samples, the job asks at most " + std::to_string(max_eval_samples));
  }
  if (!valid.ok()) {
    release();
    return valid;
  }
  const double now = s.clock();
  Status written = s.store->record_update({job_id, round_index, client, *meta_json, now});
  double fold_s = 0;
  if (written.ok()) {
    const auto fold_start = std::chrono::steady_clock::now();
    written = aggregate->add(decoded.values, decoded.count, meta->samples);
    fold_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - fold_start).count();
    s.metrics.observe(metric::kFoldSeconds, {}, fold_s);
  }
  if (!written.ok()) {
    release();
    return written;
  }
  // Publish.
  rounds::ProfileChange completed;
  UpdateAccepted accepted{round_index, 0};
  bool filled = false;
  {
    std::lock_guard<std::mutex> lock(s.jobs.mu);
    rounds::Round& r = *job->round;  // a round with a reservation in flight stays open
    completed =
        r.accept(client, completion_report(*meta, base->blob.size(), bytes.size(), upload_seconds),
                 now, fold_s, std::move(meta->evaluation));
    accepted.updates = r.accepted();
    filled = r.filled();
  }
  s.clients.apply({completed});
  Status touched = s.clients.touch(client, now);
  (void)touched;  // the client exists: it was identified by its token
  if (filled) s.driver.wake();
  return accepted;
}

Result<JobSummary> Coordinator::create_job(const json& request) {
  double retry_after_s = 0;
  return create_job(request, 0, retry_after_s);
}

Result<JobSummary> Coordinator::create_job(const json& request, TenantId owner,
                                           double& retry_after_s,
                                           std::optional<std::string_view> model_file) {
  State& s = *state_;
  auto config = rounds::parse_job_config(request);
  if (!config.ok()) return config.status();
  if (owner != 0 && !config->evaluation.server_dataset.empty()) {
    return permission_denied(
        "evaluation.server_dataset is for the admin's jobs: the coordinator runs the module to "
        "score it");
  }
  std::error_code ec;
  if (const std::string dataset = server_dataset_dir(s.config, *config);
      !dataset.empty() && !std::filesystem::is_directory(dataset, ec)) {
    return invalid_argument("evaluation.server_dataset \"" + config->evaluation.server_dataset +
                            "\" is not a folder under the coordinator's datasets_dir");
  }
  auto initial = initial_parameters(*config, model_file, s.config.max_model_bytes);
  if (!initial.ok()) return initial.status();
  // One creation at a time: two submissions of a tenant cannot both pass its running-job cap.
  std::lock_guard<std::mutex> creating(s.create_mu);
  size_t running = 0;
  {
    std::lock_guard<std::mutex> lock(s.jobs.mu);
    for (const auto& [id, job] : s.jobs.jobs) {
      running += job->tenant == owner &&
                 (job->state == JobState::kRunning || job->state == JobState::kPaused);
    }
  }
  const bool overload = s.driver.fleet_overloaded(
      s.clock(), scheduling::invited_count(config->clients_per_round, config->overcommit));
  if (!s.tenants.admit_job(owner, running, overload, s.clock(), retry_after_s)) {
    return resource_exhausted("the fleet is overloaded and this tenant is at its limit of " +
                              std::string("running jobs or job submissions; retry in ") +
                              std::to_string(int(std::ceil(retry_after_s))) + " s");
  }
  auto model = rounds::make_global_model(0, std::move(initial->layout), std::move(initial->data));
  std::shared_ptr<const std::string> module;
  if (config->model == "torchscript") module = std::make_shared<const std::string>(*model_file);
  const double now = s.clock();
  storage::JobRecord record{0,   config->name, request, JobState::kRunning, json::object(),
                            now, owner};
  static const std::string kNoModule;
  auto id = s.store->create_job(record, {0, 0, model->blob, model->checksum, std::string(), now},
                                module ? *module : kNoModule);
  if (!id.ok()) return id.status();
  record.id = *id;
  const std::string created = "job " + std::to_string(*id) + " (" + config->name +
                              ") created: " + config->model + ", " +
                              std::to_string(model->params.size()) + " parameters";
  FEDCASE_RETURN_IF_ERROR(
      s.install(record, std::move(config).value(), model, std::move(module), std::string(), 0, {}));
  log_info(created);
  s.driver.wake();
  std::lock_guard<std::mutex> lock(s.jobs.mu);
  return summary_of(*s.jobs.find(*id));
}

std::vector<JobSummary> Coordinator::list_jobs(Scope scope) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.jobs.mu);
  std::vector<JobSummary> out;
  for (const auto& [id, job] : s.jobs.jobs) {
    if (!scope || job->tenant == *scope) out.push_back(summary_of(*job));
  }
  return out;
}

Result<JobDetail> Coordinator::job_detail(JobId id, Scope scope) {
  State& s = *state_;
  JobDetail d;
  {
    std::lock_guard<std::mutex> lock(s.jobs.mu);
    JobEntry* job = s.jobs.find(id);
    if (!job || (scope && job->tenant != *scope)) {
      return not_found("job " + std::to_string(id) + " not found");
    }
    d.summary = summary_of(*job);
    d.config = job->config_json;
    d.created_at = job->created_at;
    d.parameters = job->model->layout.element_count();
    d.module_bytes = job->module ? job->module->size() : 0;
    d.evaluation_target = job->config.evaluation.target;
    d.selection_policy = job->policy_name;
    d.aggregation = job->config.aggregation.rule;
    d.server_optimizer = job->optimizer_name;
    d.policy_state = job->policy_state;
    d.privacy = job->privacy;
    if (job->round) {
      d.current_round = JobDetail::OpenRound{job->round->index(), job->round->tasks().size(),
                                             job->round->accepted(), job->round->deadline()};
    }
  }
  auto rounds = s.store->list_rounds(id);
  if (!rounds.ok()) return rounds.status();
  d.rounds = std::move(rounds).value();
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
  {
    std::lock_guard<std::mutex> lock(s.jobs.mu);
    for (const auto& [id, job] : s.jobs.jobs) {
      if (job->state != JobState::kRunning && job->state != JobState::kPaused) continue;
      active.push_back({id, job->config.training, job->model->blob.size()});
    }
  }
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
  JobEntry* job = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.jobs.mu);
    job = s.jobs.find(id);
    if (job && scope && job->tenant != *scope) job = nullptr;
  }
  if (!job) return not_found("job " + std::to_string(id) + " not found");
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

json Coordinator::tenants_view() {
  State& s = *state_;
  std::map<TenantId, size_t> jobs_of;
  {
    std::lock_guard<std::mutex> lock(s.jobs.mu);
    for (const auto& [id, job] : s.jobs.jobs) {
      jobs_of[job->tenant] += job->state == JobState::kRunning || job->state == JobState::kPaused;
    }
  }
  json share = s.tenants.share_json()["tenants"];
  json out = json::array();
  auto view = [&](TenantId id, const std::string& name, double weight, const json& limits) {
    json entry = {{"tenant_id", id},
                  {"name", name},
                  {"weight", weight},
                  {"limits", limits},
                  {"active_jobs", jobs_of[id]}};
    const std::string key = std::to_string(id);
    for (const char* field : {"counter", "client_seconds", "share", "throttle_events"}) {
      entry[field] = share.contains(key) ? share[key].value(field, json(0)) : json(0);
    }
    out.push_back(entry);
  };
  view(0, kOperatorTenantName, 1, scheduling::tenant_limits_json({}));
  for (const storage::TenantRecord& t : s.tenants.list()) view(t.id, t.name, t.weight, t.limits);
  return {{"tenants", out}};
}

}  // namespace fedcase::server
