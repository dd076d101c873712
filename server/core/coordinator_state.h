#pragma once
// What a Coordinator holds (coordinator.h), shared by the files that write its operations:
// coordinator.cpp (the wiring), client_api.cpp and admin_api.cpp. Internal to server/core/.

#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "common/mutex.h"
#include "server/core/base/client_registry.h"
#include "server/core/base/model_exports.h"
#include "server/core/base/task_notifier.h"
#include "server/core/base/tenants.h"
#include "server/core/base/token_lookups.h"
#include "server/core/coordinator.h"
#include "server/core/jobs/job_table.h"
#include "server/core/replica/ownership.h"
#include "server/core/replica/shared_replication.h"
#include "server/core/rounds/replication.h"
#include "server/core/rounds/round_driver.h"
#include "server/core/secure/secure_rounds.h"

namespace fedcase::server {

struct Coordinator::State {
  State(const CoordinatorConfig& c, std::unique_ptr<storage::Store> s,
        std::unique_ptr<ModelEvaluator> e, Clock k);
  // The driver's thread stops, then the evaluator finishes its queue (its callbacks use the
  // driver, the jobs and the store), before any of them is destroyed.
  ~State();

  // Sets the gauges of clients and jobs (at each scrape).
  void collect(Metrics& m);
  // The job if this coordinator has it and `scope` sees it; kNotFound otherwise. A replica
  // that does not have it yet (created through another replica a moment ago) but finds it in
  // the store answers kUnavailable (retry shortly) and loads it at once.
  Result<JobEntry*> find_job(JobId id, const Scope& scope = std::nullopt);
  // A replica that is behind the store (a job, a round or a stage it has not read yet) reads
  // it at once: its ownership pass and replication readings run at the driver's next tick.
  void catch_up();
  // Whether a request about round `asked` of a job (`status`) may have come before this
  // replica followed that round (it opened a moment ago at its owner): on a replica that does
  // not own the job, a round after the newest it read, while a wake-up (the store's, or a
  // catch-up's) came since that reading. Without one the store holds no such round, and the
  // request is answered from what is here. A single coordinator and an owner hold every round
  // of their jobs: never.
  bool may_be_behind(const JobStatus& status, RoundIndex asked) const {
    return asked > status.read_round && reading_pending(status);
  }
  // Whether, on a replica that does not own the job, a wake-up came since it last read the
  // job's rounds: the store may hold one it has not followed yet.
  bool reading_pending(const JobStatus& status) const {
    return replication->shared() && !status.owned && status.read_wakes != replication->wakes();
  }
  // The one answer to such a request (`what` names what it is about): the replica reads the
  // store at once (catch_up) and the client is told to retry (kUnavailable, 503 with
  // Retry-After); no request waits for the store.
  Status not_followed_yet(const std::string& what);

  Metrics metrics;  // first: the store and the driver record into it
  const CoordinatorConfig config;
  const std::string replica_id;
  const std::unique_ptr<storage::Store> store;
  const Clock clock;
  ClientRegistry clients;
  TenantRegistry tenants;
  Mutex create_mu;  // job creations, one at a time (held across their store write only)
  // The upload sessions whose pieces requests are storing, by id, and how many requests: a
  // question of where a session stands waits for them (half a second at most), so that a
  // client resumes after the pieces its cut chunk delivered (upload_sessions.cpp).
  Mutex storing_mu;
  CondVar stored;
  std::map<std::string, int> storing FEDCASE_GUARDED_BY(storing_mu);
  JobTable jobs;
  ModelExports exports{config.export_cache_bytes};
  std::unique_ptr<ModelEvaluator> evaluator;
  TaskNotifier tasks_ready;
  SecureRounds secure;  // the stages of jobs with secure aggregation
  // How rounds reach the other replicas: through the store on a replica (config.lease_s > 0),
  // nowhere on a single coordinator.
  const std::unique_ptr<RoundReplication> replication;
  RoundDriver driver;
  // Replicas only: which jobs this one drives (runs in driver passes), the store's wake-ups,
  // and the lookups of tokens registered through other replicas.
  std::unique_ptr<Ownership> ownership;
  std::unique_ptr<WakeupThread> wakeups;
  std::unique_ptr<TokenLookups> token_lookups;
  const std::unique_ptr<Metrics::Registration> collector;  // last: it reads all of the above

  // The last database probe (database_health): when it ended on the steady clock, what it
  // found, and whether one runs now.
  Mutex health_mu;
  std::optional<std::chrono::steady_clock::time_point> health_checked_at
      FEDCASE_GUARDED_BY(health_mu);
  Status health FEDCASE_GUARDED_BY(health_mu) = unavailable("the database was not probed yet");
  bool health_probing FEDCASE_GUARDED_BY(health_mu) = false;
};

// "job N not found".
Status job_not_found(JobId id);

}  // namespace fedcase::server
