#include "server/core/recovery.h"

#include <algorithm>

#include "common/blob.h"
#include "common/log.h"
#include "rounds/job_config.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// Marks the rounds of `job` left open as failed at `epoch`, for `why` (only when
// `fail_open`); the highest round index.
Result<RoundIndex> close_open_rounds(const RecoveryTargets& t, JobId job,
                                     std::vector<storage::RoundRecord>& rounds, bool fail_open,
                                     storage::Epoch epoch, const std::string& why) {
  RoundIndex last_round = 0;
  for (auto& r : rounds) {
    last_round = std::max(last_round, r.index);
    if (r.state != RoundState::kOpen || !fail_open) continue;
    r.state = RoundState::kFailed;
    r.closed_at = t.clock();
    r.metrics = {{"failure", why}};
    r.epoch = epoch;
    FEDCASE_RETURN_IF_ERROR(t.store.fail_round(r));
    log_info("job " + std::to_string(job) + ": round " + std::to_string(r.index) +
             " was left open and is marked failed (" + why + ")");
  }
  return last_round;
}

// Counts the concluded rounds of `job` in the round metrics.
void count_rounds(const RecoveryTargets& t, JobId job,
                  const std::vector<storage::RoundRecord>& rounds) {
  for (const auto& r : rounds) {
    if (r.state == RoundState::kOpen) continue;
    t.metrics.add(metric::kRounds,
                  {{"job", std::to_string(job)},
                   {"outcome", r.state == RoundState::kCommitted ? "committed" : "failed"}});
  }
}

Status recover_job(const RecoveryTargets& t, const storage::JobRecord& record) {
  const bool leased = t.config.lease_s > 0;
  std::vector<storage::RoundRecord> rounds;
  auto job = load_job(t, record, /*fail_open=*/!leased, storage::kUnleased,
                      "coordinator restarted while the round was open", rounds);
  if (!job.ok()) return job.status();
  // A replica drives no job before it acquires the job's lease (ownership.h).
  job->status.owned = !leased;
  JobEntry& entry = *job->entry;
  t.jobs.install(std::move(job).value());
  count_rounds(t, record.id, rounds);
  return leased ? ok_status() : evaluate_unscored(t, entry, rounds);
}

}  // namespace

Result<std::shared_ptr<const rounds::GlobalModel>> stored_model(
    const storage::ModelRecord& record) {
  auto blob = decode_blob(record.blob, record.blob.size());
  if (!blob.ok()) return blob.status();
  auto model = std::make_shared<rounds::GlobalModel>();
  model->version = record.version;
  model->layout = std::move(blob->layout);
  model->params = std::move(blob->data);
  model->blob = record.blob;
  model->checksum = record.checksum;
  return std::shared_ptr<const rounds::GlobalModel>(std::move(model));
}

Result<InstalledJob> load_job(const RecoveryTargets& t, const storage::JobRecord& record,
                              bool fail_open, storage::Epoch epoch, const std::string& why,
                              std::vector<storage::RoundRecord>& rounds) {
  const JobId id = record.id;
  auto latest = t.store.latest_model(id);
  if (!latest.ok()) return latest.status();
  auto model = stored_model(*latest);
  if (!model.ok()) return model.status();
  auto listed = t.store.list_rounds(id);
  if (!listed.ok()) return listed.status();
  rounds = std::move(listed).value();
  auto last_round = close_open_rounds(t, id, rounds, fail_open, epoch, why);
  if (!last_round.ok()) return last_round.status();
  auto parts = rounds::build_job(record.config);
  if (!parts.ok()) return parts.status();
  std::shared_ptr<const std::string> module;
  if (parts->config.model == "torchscript") {
    auto stored = t.store.get_job_module(id);
    if (!stored.ok()) return stored.status();
    module = std::make_shared<const std::string>(std::move(stored).value());
  }
  auto job = make_job(record, std::move(parts).value(), *model, std::move(module),
                      latest->optimizer_state, *last_round, rounds, t.config.datasets_dir);
  if (!job.ok()) return job.status();
  job->status.epoch = epoch;
  log_info("job " + std::to_string(id) + " (" + record.name + ") at model version " +
           std::to_string((*model)->version) + ", checksum " + (*model)->checksum.substr(0, 12));
  return job;
}

Status evaluate_unscored(const RecoveryTargets& t, JobEntry& job,
                         const std::vector<storage::RoundRecord>& rounds) {
  if (!job.config.server_evaluated()) return ok_status();
  for (const auto& r : rounds) {
    if (r.state != RoundState::kCommitted || r.metrics.contains("test_accuracy")) continue;
    auto stored = t.store.get_model(job.id, r.index);
    if (!stored.ok()) return stored.status();
    auto model = stored_model(*stored);
    if (!model.ok()) return model.status();
    log_info("job " + std::to_string(job.id) + ": evaluating model " + std::to_string(r.index) +
             ", committed without an evaluation");
    t.driver.evaluate(job, *model, json::object());
  }
  return ok_status();
}

Status recover(const RecoveryTargets& t) {
  FEDCASE_RETURN_IF_ERROR(t.clients.load());
  FEDCASE_RETURN_IF_ERROR(t.tenants.load());
  auto records = t.store.list_jobs();
  if (!records.ok()) return records.status();
  for (const auto& record : *records) FEDCASE_RETURN_IF_ERROR(recover_job(t, record));
  return ok_status();
}

}  // namespace fedcase::server
