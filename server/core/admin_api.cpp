// The coordinator's admin operations (coordinator.h): jobs created, listed, detailed and
// controlled, their models listed and exported, the fleet and the tenants.

#include <cmath>
#include <filesystem>

#include "common/blob.h"
#include "common/log.h"
#include "formats/torchscript_reader.h"
#include "ml/model.h"
#include "rounds/job_config.h"
#include "scheduling/round_plan.h"
#include "server/core/coordinator.h"
#include "server/core/coordinator_state.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

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
  auto read = config.model == "torchscript" ? read_torchscript_model(*file, limits)
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

}  // namespace

Result<ModelListing> Coordinator::models(JobId id, Scope scope) {
  State& s = *state_;
  auto found = s.find_job(id, scope);
  if (!found.ok()) return found.status();
  const JobEntry* job = *found;
  ModelListing out;
  out.job = id;
  out.evaluation_target = job->config.evaluation.target;
  s.jobs.read(*job, [&](const JobStatus& status) {
    out.bytes = status.model->blob.size();
    out.parameters = status.model->layout.parameter_count();
    out.buffer_values = status.model->layout.element_count() - out.parameters;
    out.local_buffers = job->local_buffers;
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
  auto found = s.find_job(id, scope);
  if (!found.ok()) return found.status();
  const JobEntry* job = *found;
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
  if (config.secure_aggregation && config.asynchronous() && s.replication->shared()) {
    return conflict(
        "an asynchronous job with secure_aggregation (ready cohorts) runs on one coordinator: "
        "coordinator replicas do not relay a cohort's stages yet");
  }
  std::error_code ec;
  if (const std::string dataset = server_dataset_dir(s.config.datasets_dir, config);
      !dataset.empty() && !std::filesystem::is_directory(dataset, ec)) {
    return invalid_argument("evaluation.server_dataset \"" + config.evaluation.server_dataset +
                            "\" is not a folder under the coordinator's datasets_dir");
  }
  auto initial = initial_parameters(config, model_file, s.config.max_model_bytes);
  if (!initial.ok()) return initial.status();
  FEDCASE_RETURN_IF_ERROR(rounds::check_model_layout(config, initial->layout));
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
                              std::to_string(model->layout.element_count()) + " parameters";
  auto job = make_job(record, std::move(parts).value(), model, std::move(module), std::string(), 0,
                      {}, s.config);
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
  auto found = s.find_job(from.job, owner == 0 ? Scope() : Scope(owner));
  if (!found.ok()) {
    return found.status().code() == Code::kNotFound ? invalid_argument(source + " not found")
                                                    : found.status();
  }
  const JobEntry* job = *found;
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
  auto found = s.find_job(id, scope);
  if (!found.ok()) return found.status();
  const JobEntry* job = *found;
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
    d.parameters = status.model->layout.parameter_count();
    d.buffer_values = status.model->layout.element_count() - d.parameters;
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
  auto found = s.find_job(id, scope);
  if (!found.ok()) return found.status();
  JobEntry* job = *found;
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
