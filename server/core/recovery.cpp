#include "server/core/recovery.h"

#include "server/core/jobs/loading.h"

namespace fedcase::server {
namespace {

// Counts the concluded rounds of `job` in the round metrics.
void count_rounds(Metrics& metrics, JobId job, const std::vector<storage::RoundRecord>& rounds) {
  for (const auto& r : rounds) {
    if (r.state == RoundState::kOpen) continue;
    metrics.add(metric::kRounds,
                {{"job", std::to_string(job)},
                 {"outcome", r.state == RoundState::kCommitted ? "committed" : "failed"}});
  }
}

Status recover_job(const CoordinatorParts& t, const storage::JobRecord& record) {
  const bool leased = t.config.lease_s > 0;
  std::vector<storage::RoundRecord> rounds;
  auto job =
      load_job(t.store, record, t.config, /*fail_open=*/!leased, storage::kUnleased,
               "coordinator restarted while the round was open", t.clock(), rounds);
  if (!job.ok()) return job.status();
  // A replica drives no job before it acquires the job's lease (replica/ownership.h).
  job->status.owned = !leased;
  JobEntry& entry = *job->entry;
  t.jobs.install(std::move(job).value());
  count_rounds(t.metrics, record.id, rounds);
  return leased ? ok_status() : t.driver.evaluate_unscored(entry, rounds);
}

}  // namespace

Status recover(const CoordinatorParts& t) {
  FEDCASE_RETURN_IF_ERROR(t.clients.load());
  FEDCASE_RETURN_IF_ERROR(t.tenants.load());
  auto records = t.store.list_jobs();
  if (!records.ok()) return records.status();
  for (const auto& record : *records) FEDCASE_RETURN_IF_ERROR(recover_job(t, record));
  return ok_status();
}

}  // namespace fedcase::server
