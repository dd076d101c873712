#include "server/api/views.h"

#include "protocol/registration.h"
#include "protocol/task_offer.h"
#include "protocol/task_status.h"
#include "protocol/upload_session.h"
#include "rounds/evaluation.h"

namespace fedcase::server {

using nlohmann::json;

std::string model_url(JobId job, uint64_t version) {
  return "/v1/jobs/" + std::to_string(job) + "/models/" + std::to_string(version);
}

std::string module_url(JobId job) { return "/v1/jobs/" + std::to_string(job) + "/module"; }

std::string update_url(JobId job, RoundIndex round) {
  return "/v1/jobs/" + std::to_string(job) + "/rounds/" + std::to_string(round) + "/update";
}

std::string status_url(JobId job, RoundIndex round) {
  return "/v1/jobs/" + std::to_string(job) + "/rounds/" + std::to_string(round) + "/status";
}

std::string uploads_url(JobId job, RoundIndex round) {
  return "/v1/jobs/" + std::to_string(job) + "/rounds/" + std::to_string(round) + "/uploads";
}

std::string ready_url(JobId job, RoundIndex round) {
  return "/v1/jobs/" + std::to_string(job) + "/rounds/" + std::to_string(round) + "/ready";
}

json upload_state_json(const Coordinator::UploadProgress& p) {
  return protocol::write_upload_state(
      {uploads_url(p.job, p.round) + "/" + p.id, p.bytes, p.chunk_bytes, p.received});
}

std::string secagg_url(JobId job, RoundIndex round, const char* stage) {
  return "/v1/jobs/" + std::to_string(job) + "/rounds/" + std::to_string(round) + "/secagg/" +
         stage;
}

json task_json(const TaskOffer& o) {
  const scheduling::ClientTask& t = o.task;
  protocol::TaskOffer task;
  task.job = o.job;
  task.round = o.round;
  task.model = o.model;
  task.loss = o.loss;
  task.model_version = o.model_version;
  task.model_checksum = o.model_checksum;
  if (!o.module_checksum.empty()) {
    task.module_checksum = o.module_checksum;
    task.module_url = module_url(o.job);
  }
  task.model_url = model_url(o.job, o.model_version);
  task.upload_url = update_url(o.job, o.round);
  task.status_url = status_url(o.job, o.round);
  task.deadline = o.deadline;
  task.train = {o.local_epochs, t.batch_size,   t.learning_rate,
                t.momentum,     t.weight_decay, t.prox_mu};
  if (o.evaluate_max_samples) task.evaluate = protocol::EvaluationSettings{*o.evaluate_max_samples};
  task.sample_budget = t.samples;
  task.sampling = t.sampling;
  task.cache = t.cache;
  task.expected_duration_s = t.expected_duration_s;
  task.local_buffers = o.local_buffers;
  if (!o.trainable.empty()) {
    task.trainable = o.trainable;
    task.trainable_url = model_url(o.job, o.model_version) + "/trainable";
  }
  task.compression = o.compression;
  if (o.chunk_bytes > 0) {
    task.uploads_url = uploads_url(o.job, o.round);
    task.chunk_bytes = o.chunk_bytes;
  }
  if (o.secure_stage_seconds && o.ready) {
    protocol::SecAggTask ready;
    ready.ready_url = ready_url(o.job, o.round);
    ready.stage_seconds = *o.secure_stage_seconds;
    task.secure_aggregation = ready;
  } else if (o.secure_stage_seconds) {
    task.secure_aggregation = protocol::SecAggTask{
        secagg_url(o.job, o.round, "keys"), secagg_url(o.job, o.round, "shares"),
        secagg_url(o.job, o.round, "masked_input"), secagg_url(o.job, o.round, "unmask"),
        *o.secure_stage_seconds};
    task.secure_aggregation->staleness_factor = o.staleness_factor;
  }
  return protocol::write_task_offer(task);
}

json registration_json(const ClientRegistry::Registration& r) {
  return protocol::write_registration_reply({r.id, r.token});
}

json admission_json(rounds::Admission admission) {
  // A held place may be freed by a refused upload: the update may still be wanted.
  const bool needed =
      admission == rounds::Admission::kWanted || admission == rounds::Admission::kHeld;
  return protocol::write_task_status({needed, rounds::admission_reason(admission)});
}

json update_accepted_json(const UpdateAccepted& a) {
  return {{"accepted", true}, {"round", a.round}, {"updates", a.updates}};
}

json job_summary_json(const JobSummary& j) {
  json out = {{"job_id", j.id},
              {"name", j.name},
              {"tenant_id", j.tenant},
              {"model", j.model},
              {"selection_policy", j.selection_policy},
              {"state", state_name(j.state)},
              {"model_version", j.model_version},
              {"model_checksum", j.model_checksum},
              {"round", j.round},
              {"round_open", j.round_open}};
  if (j.test_accuracy) out["test_accuracy"] = *j.test_accuracy;
  return out;
}

json jobs_json(const std::vector<JobSummary>& jobs) {
  json out = json::array();
  for (const JobSummary& j : jobs) out.push_back(job_summary_json(j));
  return {{"jobs", out}};
}

json round_json(const storage::RoundRecord& r) {
  return {
      {"round", r.index},         {"state", state_name(r.state)}, {"base_version", r.base_version},
      {"selected", r.selected},   {"opened_at", r.opened_at},     {"deadline", r.deadline},
      {"closed_at", r.closed_at}, {"metrics", r.metrics}};
}

json job_detail_json(const JobDetail& d) {
  json out = job_summary_json(d.summary);
  out["config"] = d.config;
  out["created_at"] = d.created_at;
  out["parameters"] = d.parameters;
  out["buffer_values"] = d.buffer_values;
  if (d.module_bytes > 0) out["module_bytes"] = d.module_bytes;
  out["selection_policy"] = d.selection_policy;
  out["policy_state"] = d.policy_state;
  out["aggregation"] = d.aggregation;
  out["server_optimizer"] = d.server_optimizer;
  if (!d.privacy.is_null()) out["privacy"] = d.privacy;
  if (d.current_round) {
    out["current_round"] = {{"round", d.current_round->index},
                            {"invited", d.current_round->invited},
                            {"updates", d.current_round->updates},
                            {"deadline", d.current_round->deadline}};
    if (!d.current_round->secure_aggregation.is_null()) {
      out["current_round"]["secure_aggregation"] = d.current_round->secure_aggregation;
    }
  }
  out["rounds"] = json::array();
  const double target = d.config.value("target_accuracy", 0.0);
  // A round's test accuracy scores the model it committed, its federated accuracy the model
  // it trained from.
  const bool federated = d.evaluation_target == "federated";
  json result;
  for (const auto& r : d.rounds) {
    out["rounds"].push_back(round_json(r));
    const auto accuracy = rounds::recorded_accuracy(r.metrics, d.evaluation_target);
    if (result.is_null() && target > 0 && r.state == RoundState::kCommitted && accuracy &&
        *accuracy >= target) {
      result = {{"model_version", federated ? r.base_version : r.index},
                {"round", r.index},
                {"test_accuracy", *accuracy}};
    }
  }
  out["result"] = result;
  return out;
}

std::string export_url(JobId job, const std::string& version, ExportFormat format) {
  return "/v1/admin/jobs/" + std::to_string(job) + "/models/" + version +
         "/export?format=" + export_format_name(format);
}

json models_json(const ModelListing& m) {
  json models = json::array();
  for (const ModelVersion& v : m.models) {
    json exports = json::object();
    for (ExportFormat format :
         {ExportFormat::kTorchScript, ExportFormat::kNpz, ExportFormat::kBlob}) {
      exports[export_format_name(format)] = export_url(m.job, std::to_string(v.version), format);
    }
    models.push_back({{"version", v.version},
                      {"round", v.round ? json(*v.round) : json()},
                      {"created_at", v.created_at},
                      {"accuracy", v.accuracy ? json(*v.accuracy) : json()},
                      {"exports", exports}});
  }
  return {{"job_id", m.job},    {"evaluation_target", m.evaluation_target},
          {"bytes", m.bytes},   {"parameters", m.parameters},
          {"buffer_values", m.buffer_values}, {"local_buffers", m.local_buffers},
          {"latest", m.latest}, {"best", m.best ? json(*m.best) : json()},
          {"models", models}};
}

json clients_json(const ClientPage& page) {
  json out = json::array();
  for (const ClientSummary* client : page.clients) {
    const ClientSummary& c = *client;
    json expected = json::object();
    for (const auto& [job, seconds] : c.expected_duration_s)
      expected[std::to_string(job)] = seconds;
    out.push_back({{"client_id", c.record.id},
                   {"info", c.record.info},
                   {"profile", scheduling::profile_to_json(c.profile)},
                   {"expected_duration_s", expected},
                   {"registered_at", c.record.registered_at},
                   {"last_seen", c.record.last_seen},
                   {"available", c.available}});
  }
  json histogram = nullptr;
  if (page.histogram.job) {
    histogram = {{"job_id", *page.histogram.job},
                 {"edges", page.histogram.edges},
                 {"counts", page.histogram.counts}};
  }
  return {{"clients", out},
          {"total", page.total},
          {"matched", page.matched},
          {"expected_duration_histogram", histogram}};
}

json tenant_created_json(const TenantRegistry::Created& c) {
  return {{"tenant_id", c.record.id},
          {"name", c.record.name},
          {"weight", c.record.weight},
          {"limits", c.record.limits},
          {"token", c.token}};
}

json tenants_json(const TenantsOverview& overview) {
  json out = json::array();
  for (const storage::TenantRecord& t : overview.tenants) {
    auto jobs = overview.active_jobs.find(t.id);
    json entry = {{"tenant_id", t.id},
                  {"name", t.name},
                  {"weight", t.weight},
                  {"limits", t.limits},
                  {"active_jobs", jobs == overview.active_jobs.end() ? 0 : jobs->second}};
    const std::string key = std::to_string(t.id);
    const bool shared = overview.share.contains(key);
    for (const char* field : {"counter", "client_seconds", "share", "throttle_events"}) {
      entry[field] = shared ? overview.share[key].value(field, json(0)) : json(0);
    }
    out.push_back(entry);
  }
  return {{"tenants", out}};
}

json job_state_json(JobId job, JobState state) {
  return {{"job_id", job}, {"state", state_name(state)}};
}

}  // namespace fedcase::server
