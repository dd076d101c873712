#pragma once
// The JSON the client and admin APIs answer with, and the URLs they name (docs/protocol.md).
// Pure functions of the coordinator's plain results; the only place these shapes are written.
// What an SDK reads (the task, the registration's answer, the task status) is written through
// protocol/, which the SDK reads with.

#include <nlohmann/json.hpp>

#include "server/api/client_query.h"
#include "server/core/coordinator.h"

namespace fedcase::server {

std::string model_url(JobId job, uint64_t version);
std::string module_url(JobId job);
std::string update_url(JobId job, RoundIndex round);
std::string status_url(JobId job, RoundIndex round);
std::string uploads_url(JobId job, RoundIndex round);  // where upload sessions open
std::string ready_url(JobId job, RoundIndex round);    // where a cohort's update is reported
// The upload session as its client sees it: protocol::UploadState, with its URL.
nlohmann::json upload_state_json(const Coordinator::UploadProgress& progress);
// A secure round's stage route: `stage` is "keys", "shares", "masked_input" or "unmask".
std::string secagg_url(JobId job, RoundIndex round, const char* stage);
// The export of `version` (a number, "latest" or "best") of `job` in `format`.
std::string export_url(JobId job, const std::string& version, ExportFormat format);

nlohmann::json task_json(const TaskOffer& offer);
nlohmann::json registration_json(const ClientRegistry::Registration& registration);
nlohmann::json admission_json(rounds::Admission admission);
nlohmann::json update_accepted_json(const UpdateAccepted& accepted);
nlohmann::json job_summary_json(const JobSummary& job);
nlohmann::json jobs_json(const std::vector<JobSummary>& jobs);
nlohmann::json round_json(const storage::RoundRecord& round);
// The job detail; `result` names the first model that reached the target accuracy: a
// committed model by its test accuracy, or a round's base model by its federated accuracy.
nlohmann::json job_detail_json(const JobDetail& job);
// A page of the fleet: {"clients": [...], "total", "matched", "expected_duration_histogram"}.
nlohmann::json clients_json(const ClientPage& page);
nlohmann::json job_state_json(JobId job, JobState state);
// A job's models: {"job_id", "evaluation_target", "bytes", "parameters", "buffer_values",
// "local_buffers", "latest", "best", "models": [{"version", "round", "created_at", "accuracy", "exports": {format: url}}]}.
nlohmann::json models_json(const ModelListing& listing);
// A new tenant with its token (shown only here): {"tenant_id", "name", "weight", "limits",
// "token"}.
nlohmann::json tenant_created_json(const TenantRegistry::Created& created);
// Every tenant, the operator first: {"tenants": [{"tenant_id", "name", "weight", "limits",
// "active_jobs", "counter", "client_seconds", "share", "throttle_events"}]}.
nlohmann::json tenants_json(const TenantsOverview& overview);

}  // namespace fedcase::server
