#include "server/core/jobs/loading.h"

#include <algorithm>

#include "common/blob.h"
#include "common/log.h"
#include "rounds/job_config.h"

namespace fedcase::server {
namespace {

// Marks the rounds of `job` left open as failed at `epoch`, closed at `now`, for `why` (only
// when `fail_open`); the highest round index.
Result<RoundIndex> close_open_rounds(storage::Store& store, JobId job,
                                     std::vector<storage::RoundRecord>& rounds, bool fail_open,
                                     storage::Epoch epoch, const std::string& why, double now) {
  RoundIndex last_round = 0;
  for (auto& r : rounds) {
    last_round = std::max(last_round, r.index);
    if (r.state != RoundState::kOpen || !fail_open) continue;
    r.state = RoundState::kFailed;
    r.closed_at = now;
    r.metrics = {{"failure", why}};
    r.epoch = epoch;
    FEDCASE_RETURN_IF_ERROR(store.fail_round(r));
    log_info("job " + std::to_string(job) + ": round " + std::to_string(r.index) +
             " was left open and is marked failed (" + why + ")");
  }
  return last_round;
}

}  // namespace

Result<std::shared_ptr<const rounds::GlobalModel>> stored_model(
    const storage::ModelRecord& record) {
  BlobView view;
  FEDCASE_RETURN_IF_ERROR(view_blob(record.blob, record.blob.size(), view));
  if (view.encoding != ValueEncoding::kFloat32) {
    return invalid_argument("model version " + std::to_string(record.version) +
                            " is not stored as float32 values");
  }
  auto model = std::make_shared<rounds::GlobalModel>();
  model->version = record.version;
  model->layout = std::move(view.layout);
  model->blob = record.blob;
  model->checksum = record.checksum;
  return std::shared_ptr<const rounds::GlobalModel>(std::move(model));
}

Result<InstalledJob> load_job(storage::Store& store, const storage::JobRecord& record,
                              const CoordinatorConfig& coordinator, bool fail_open,
                              storage::Epoch epoch,
                              const std::string& why, double now,
                              std::vector<storage::RoundRecord>& rounds) {
  const JobId id = record.id;
  auto latest = store.latest_model(id);
  if (!latest.ok()) return latest.status();
  auto model = stored_model(*latest);
  if (!model.ok()) return model.status();
  auto listed = store.list_rounds(id);
  if (!listed.ok()) return listed.status();
  rounds = std::move(listed).value();
  auto last_round = close_open_rounds(store, id, rounds, fail_open, epoch, why, now);
  if (!last_round.ok()) return last_round.status();
  auto parts = rounds::build_job(record.config);
  if (!parts.ok()) return parts.status();
  std::shared_ptr<const std::string> module;
  if (parts->config.model == "torchscript") {
    auto stored = store.get_job_module(id);
    if (!stored.ok()) return stored.status();
    module = std::make_shared<const std::string>(std::move(stored).value());
  }
  auto job = make_job(record, std::move(parts).value(), *model, std::move(module),
                      latest->optimizer_state, *last_round, rounds, coordinator);
  if (!job.ok()) return job.status();
  job->status.epoch = epoch;
  log_info("job " + std::to_string(id) + " (" + record.name + ") at model version " +
           std::to_string((*model)->version) + ", checksum " + (*model)->checksum.substr(0, 12));
  return job;
}

}  // namespace fedcase::server
