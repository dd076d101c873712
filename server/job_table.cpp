#include "server/job_table.h"

#include <chrono>

#include "common/log.h"

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

JobEntry* JobTable::find(JobId id) {
  auto it = jobs.find(id);
  return it == jobs.end() ? nullptr : it->second.get();
}

Result<JobState> JobTable::transition(JobEntry& job, const Decide& decide) {
  std::lock_guard<std::mutex> serial(state_mu_);
  const Result<JobState> next = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return decide(job.state);
  }();
  if (!next.ok()) return next.status();
  FEDCASE_RETURN_IF_ERROR(store_.set_job_state(job.id, *next));
  std::lock_guard<std::mutex> lock(mu);
  job.state = *next;
  const bool stopped = *next == JobState::kCancelled || *next == JobState::kFinished;
  if (stopped && job.round) job.round->close();
  log_info("job " + std::to_string(job.id) + " is now " + state_name(*next));
  return *next;
}

}  // namespace fedcase::server
