#include "server/core/jobs/job.h"

#include <chrono>
#include <filesystem>

#include "common/crypto.h"
#include "rounds/evaluation.h"

namespace fedcase::server {

double wall_clock() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

nlohmann::json privacy_view(const rounds::JobRuntime& runtime) {
  if (!runtime.private_rounds()) return nullptr;
  const rounds::JobConfig& c = runtime.config();
  auto spent = runtime.privacy().spent(c.dp_delta);
  return {{"noise_multiplier", c.aggregation.dp_noise_multiplier},
          {"clip_norm", c.aggregation.clip_norm},
          {"rounds", runtime.privacy().rounds()},
          {"delta", c.dp_delta},
          {"epsilon", spent.ok() ? spent->epsilon : 0.0}};
}

std::string server_dataset_dir(const std::string& datasets_dir, const rounds::JobConfig& job) {
  if (job.evaluation.server_dataset.empty()) return std::string();
  return (std::filesystem::path(datasets_dir) / job.evaluation.server_dataset).string();
}

Result<InstalledJob> make_job(const storage::JobRecord& record, rounds::JobParts parts,
                              std::shared_ptr<const rounds::GlobalModel> model,
                              std::shared_ptr<const std::string> module,
                              const std::string& optimizer_state, RoundIndex last_round,
                              const std::vector<storage::RoundRecord>& history,
                              const CoordinatorConfig& coordinator) {
  auto dp_secret = random_u64();
  if (!dp_secret.ok()) return dp_secret.status();
  parts.config.aggregation.buffer_dir = coordinator.spool_dir;
  auto runtime = rounds::JobRuntime::create(std::move(parts), model, record.policy_state,
                                            optimizer_state, last_round, *dp_secret | 1);
  if (!runtime.ok()) return runtime.status();
  rounds::JobRuntime& r = **runtime;
  const rounds::JobConfig& config = r.config();
  JobStatus status;
  for (const auto& round : history) {
    if (round.state != RoundState::kCommitted) continue;
    FEDCASE_RETURN_IF_ERROR(r.replay_privacy(round.metrics));
    auto accuracy = rounds::recorded_accuracy(round.metrics, config.evaluation.target);
    if (accuracy) status.last_accuracy = accuracy;
  }
  auto job = std::make_unique<JobEntry>();
  job->id = record.id;
  job->name = record.name;
  job->config_json = record.config;
  job->config = config;
  job->created_at = record.created_at;
  job->tenant = record.tenant;
  if (module) job->module_checksum = sha256_hex(*module);
  job->module = std::move(module);
  for (const TensorSpec& tensor : model->layout.tensors) {
    if (rounds::is_local_buffer(config.local_buffers, tensor)) {
      job->local_buffers.push_back(tensor.name);
    }
  }
  job->update = r.update_layout();
  job->evaluated = {config.model,
                    job->module,
                    job->module_checksum,
                    config.loss,
                    server_dataset_dir(coordinator.datasets_dir, config),
                    config.evaluation.input_shape};
  job->policy_name = r.policy_name();
  job->optimizer_name = r.optimizer_name();
  status.state = record.state;
  status.model = std::move(model);
  status.last_round = r.last_round();
  status.policy_state = r.policy_state();
  status.privacy = privacy_view(r);
  job->runtime = std::move(runtime).value();
  return InstalledJob{std::move(job), std::move(status)};
}

}  // namespace fedcase::server
