#pragma once
// Restart recovery: the coordinator's memory rebuilt from its store, so that a crash at any
// point loses no committed round. Runs once, at start, before any request or driver tick.

#include "server/core/client_registry.h"
#include "server/core/config.h"
#include "server/core/job_table.h"
#include "server/core/metrics.h"
#include "server/core/round_driver.h"
#include "server/core/tenants.h"
#include "storage/store.h"

namespace fedcase::server {

// The parts recovery fills; each must outlive the call.
struct RecoveryTargets {
  const CoordinatorConfig& config;
  storage::Store& store;
  ClientRegistry& clients;
  TenantRegistry& tenants;
  JobTable& jobs;
  RoundDriver& driver;  // queues the evaluations a crash left undone
  Metrics& metrics;     // round counters start from the stored rounds
  const Clock& clock;
};

// Loads every client and tenant; marks each round that a crash left open as failed
// ("coordinator restarted while the round was open"); installs every job at its latest
// committed model with the policy and optimizer state saved with it; and queues the server
// evaluation of committed models that have none. A replica (config.lease_s > 0) installs
// every job unowned and leaves its rounds as they are: their owner, or the replica that
// acquires the job next, concludes them (ownership.h). kInternal / kInvalidArgument when a
// stored record cannot be used (nothing is started then).
[[nodiscard]] Status recover(const RecoveryTargets& targets);

// `record`'s job as the store holds it now, owned at `epoch`: its latest committed model with
// the optimizer and policy state saved with it, its module, and `rounds`, its rounds (filled
// in), of which those left open are first marked failed at `epoch` for `why` when
// `fail_open`. Errors as recover()'s, and the store's (a kConflict: `epoch` is stale).
Result<InstalledJob> load_job(const RecoveryTargets& targets, const storage::JobRecord& record,
                              bool fail_open, storage::Epoch epoch, const std::string& why,
                              std::vector<storage::RoundRecord>& rounds);

// Queues the server evaluation of `job`'s committed models among `rounds` that have none (a
// crash, or the end of an owner, came first).
[[nodiscard]] Status evaluate_unscored(const RecoveryTargets& targets, JobEntry& job,
                                       const std::vector<storage::RoundRecord>& rounds);

// A stored model decoded for serving and training from; kInternal for a corrupt blob.
Result<std::shared_ptr<const rounds::GlobalModel>> stored_model(const storage::ModelRecord& record);

}  // namespace fedcase::server
