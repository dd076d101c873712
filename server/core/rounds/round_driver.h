#pragma once
// The coordinator's round driver: the one thread that carries every job's round through its
// life cycle (rounds/lifecycle.h). Each tick observes the jobs (their rounds, the secure
// stages, and through the replication what other replicas did: replication.h), steps each
// job's phase under the job table's lock with rounds::step, and carries out the actions the
// steps return without any lock: opening rounds (in the tenants' fair-share order:
// TenantRegistry::next_round), closing admission and key stages, gathering partials,
// concluding and committing, reading a lost commit back, following and handing over another
// replica's round. Each action's outcome is stepped the same way when it is published.
//
// When several jobs could open a round at once, their rounds open in the order the tenants'
// fair share says (least-served tenant first; under overload a tenant over its round-start
// limit waits); each opened round is charged to its tenant at once, and corrected to the
// client-seconds it really used when it concludes. An asynchronous job's buffer (FedBuff) is
// refilled slot by slot the same way, its tasks past their deadline are dropped, and once K
// updates are in it concludes and the next one opens at once with the tasks still in flight.
//
// A job with a target accuracy on the server's test set does not commit its next round while
// the evaluation of its previous model is pending: once a model is known to reach the target,
// the job finishes with it, and a round opened meanwhile fails ("job reached its target").
// A job whose evaluation target is "federated" finishes after a committed round whose
// federated accuracy (of the round's base model, reported by its clients) reaches the target.
//
// A commit whose answer was lost (the database connection dropped during COMMIT) is never
// guessed: the job's conclusion is kept and the round read back from the store until the store
// answers; then its model is adopted, or the same conclusion written again, or dropped if
// another replica fenced this one out.
//
// The thread runs on events, never on a fixed tick: it sleeps until the next thing that is due
// (a round's or a stage's deadline, a tenant's round-start window freeing, the replication's
// next reading, contacts to save) or until wake() says something changed (an upload accepted
// or refused, a client registered or back online, a job created or controlled, an evaluation
// done, a store wake-up).
//
// Thread safety: start, stop, wake and tick may be called from any thread; tick runs on the
// driver thread when started (tests without a thread may call it directly, one at a time).
// The thread turns the clock's deadlines into waits, so its clock must advance in real time.

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "rounds/lifecycle.h"
#include "server/core/base/client_registry.h"
#include "server/core/base/evaluator.h"
#include "server/core/base/metrics.h"
#include "server/core/base/task_notifier.h"
#include "server/core/base/tenants.h"
#include "server/core/jobs/job_table.h"
#include "server/core/rounds/replication.h"
#include "server/core/secure/secure_rounds.h"

namespace fedcase::server {

class RoundDriver {
 public:
  // Every argument must outlive the driver.
  RoundDriver(JobTable& jobs, ClientRegistry& clients, TenantRegistry& tenants,
              storage::Store& store, RoundReplication& replication, ModelEvaluator& evaluator,
              TaskNotifier& tasks_ready, SecureRounds& secure, Metrics& metrics, Clock clock);
  ~RoundDriver();  // stops the thread

  // A pass to run at the start of every tick, on the driver's thread, that returns when it is
  // due next (e.g. Ownership::pass). Set before start().
  void set_pass(std::function<double(double now)> pass);
  // Starts / stops the thread that calls tick() at its deadlines and at once after wake().
  void start();
  void stop();
  void wake();
  // Advances every job's round as far as it goes now, and saves contacts when due. Returns
  // when the next tick is due if nothing wakes the driver first (nullopt: only an event can
  // make one useful).
  std::optional<double> tick();
  // Ends every round here at once, as the coordinator stops (rounds::Event::kShuttingDown): a
  // running job's round with min_updates accepted updates commits (unless the job waits for
  // an evaluation to learn whether it reached its target, or the round is secure or shared
  // with other replicas); any other fails ("coordinator stopped", or as a tick would for a
  // cancelled or finished job) without blaming its invitees; copies of other replicas' rounds
  // are dropped. Call with the thread stopped and no upload being folded.
  void conclude_all();
  // Queues the evaluation of `job`'s committed `model`; `timing` (seconds) is recorded in the
  // round's metrics with the result and the evaluation's own eval_s.
  void evaluate(JobEntry& job, std::shared_ptr<const rounds::GlobalModel> model,
                nlohmann::json timing);
  // Queues the evaluation of `job`'s committed models among `rounds` that have none (a crash,
  // or the end of an owner, came first). kInternal / the store's errors for a model that
  // cannot be read.
  [[nodiscard]] Status evaluate_unscored(JobEntry& job,
                                         const std::vector<storage::RoundRecord>& rounds);
  // Whether the running jobs waiting to open a round, plus `extra_wanted` clients (a job being
  // submitted), want more clients (ceil(K x overcommit) a job, at most its eligible clients;
  // none for a job that no set of free clients could serve) than are free (available and
  // holding no task): only then are tenants throttled. Any thread.
  bool fleet_overloaded(double now, size_t extra_wanted = 0);

 private:
  // What one step of a job asks the driver to carry out without a lock.
  struct Task {
    JobEntry* job = nullptr;
    rounds::Action action = rounds::Action::kNone;
    std::optional<rounds::Round> round;  // kConclude, kFail: the round, taken out of the job
    std::string failure;                 // kConclude, kFail: why it fails ("": it may commit)
    std::optional<RoundReplication::Followed> followed;  // kFollow: the owner's round, as read
  };
  // What the tick observed of the store for each job (the replication's readings).
  struct Seen {
    RoundReplication::Contributions contributions;
    // The owner's newest round, when it was read (else nothing is known of it).
    std::optional<RoundReplication::Followed> followed;
  };
  using Observations = std::map<JobId, Seen>;

  // ---- round_driver.cpp: the thread and the machine ----
  void run();
  // The replication's readings of every job with a shared round or a followed owner, and
  // the stage messages they carry (taken by the owner's secure rounds, published to copies).
  Observations observe(double now);
  // Steps every job as far as it goes under the job table's lock; the tasks to carry out.
  std::vector<Task> decide(const Observations& seen, double now);
  // The facts of `job` now, for rounds::events_of.
  rounds::Facts facts_of(JobEntry& job, const JobStatus& status, const Seen* seen,
                         bool clients_free, double now) const;
  // Applies `step` to `job`'s status (its phase, and what entering it means under the lock:
  // the failure's reason, a closed round, a dropped one, expired tasks whose profile `changes`
  // are collected); false when the step is a task to carry out, which `task` then holds.
  bool apply(JobEntry& job, JobStatus& status, const rounds::Step& step, double now, Task& task,
             std::vector<rounds::ProfileChange>& changes);
  // Carries `tasks` out; whether any made progress.
  bool carry_out(std::vector<Task> tasks, double now);
  // Steps `job` on `outcome` under the job table's lock, after `publish` (also under it).
  void publish_outcome(JobEntry& job, rounds::Event outcome,
                       const std::function<void(JobStatus&)>& publish = {});
  // Forgets `job`'s round here, writing nothing (under the job table's lock).
  void drop(JobEntry& job, JobStatus& status, const std::string& why);

  // ---- round_opening.cpp ----
  // A round's record as it opens (a buffer's deadline is its earliest task's), at `epoch`.
  static storage::RoundRecord round_record(JobId job, const rounds::Round& round,
                                           storage::Epoch epoch);
  // Opens rounds for `waiting` jobs in the fair share's order (after telling the fair share
  // which tenants are active); whether any opened.
  bool open_in_turn(std::vector<JobEntry*> waiting, double now);
  // Opens a round of `job` over the available clients less the `busy` ones, if enough are
  // free; whether it did.
  bool open(JobEntry& job, const std::set<ClientId>& busy, double now);
  // Opens the secure round of a cohort of K clients whose updates `job`'s buffer holds ready
  // (docs/secure_aggregation.md, "ready cohorts"); whether it opened.
  bool open_cohort(JobEntry& job, double now);
  // The secure round of `invitees` in round `index` of `job`, opening at `now`, refusing
  // `used_keys` (those of the job's earlier rounds).
  SecureRound::Setup secure_setup(const JobEntry& job, RoundIndex index,
                                  const std::vector<ClientId>& invitees, double now,
                                  std::set<std::string> used_keys);
  // Refills the buffers of `wanting` jobs with free slots, the least-served tenant's first.
  bool refill_in_turn(std::vector<JobEntry*> wanting, double now);
  // Hands out tasks for the free slots of an asynchronous `job`'s buffer among `clients` less
  // the `busy` ones (which gains the new invitees); whether it handed out any.
  bool refill(JobEntry& job, const std::vector<ClientSnapshot>& clients, std::set<ClientId>& busy,
              double now);
  // The clients of `clients` that `job` may pick: available, with its labels, not `busy`.
  static std::vector<rounds::PoolClient> pool_for(const JobEntry& job,
                                                  const std::vector<ClientSnapshot>& clients,
                                                  const std::set<ClientId>& busy);
  // A job's clients now: `eligible` (available and matching its labels), `free` (of those,
  // not busy), whether it could open at all with all eligible clients free, and how many it
  // wants for a round (its invitation, at most its eligible clients; 0 if it cannot open).
  struct Pool {
    size_t eligible = 0, free = 0, wanted = 0;
    bool can_ever_open = false;
  };
  Pool pool_of(const JobEntry& job, const std::set<ClientId>& busy, double now) const;
  // A job's class cost (scheduling::class_cost) over its eligible clients, from the
  // coordinator's duration priors, not the job's.
  static double class_cost_of(const JobEntry& job, const std::vector<ClientSnapshot>& clients);

  // ---- round_concluding.cpp ----
  // Closes `job`'s round to admission (everywhere, through the replication); whether the
  // store answered.
  bool close_admission(JobEntry& job, double now);
  // Concludes `round` of `job` (`failure`: why it fails, "" when it may commit), writes the
  // conclusion and publishes the outcome.
  void conclude(JobEntry& job, rounds::Round round, std::string failure, double now);
  // Writes `job`'s unresolved conclusion to the store and publishes what the answer says.
  void write_conclusion(JobEntry& job, double now);
  // Reads `job`'s unresolved conclusion's round back and publishes what the store holds;
  // false when the store cannot say yet.
  bool read_back(JobEntry& job, double now);
  // Publishes what the store holds of `job`'s unresolved conclusion: `outcome`
  // (rounds::Event::kCommitted: the model is adopted; else the step is undone), with the
  // round's metrics, logs and evaluation.
  void settle(JobEntry& job, rounds::Event outcome, double now);
  // Counts the other replicas' updates of a shared `round` (their partials merged by `merge`)
  // and returns the round's "partials" metrics.
  nlohmann::json merge_partials(JobEntry& job, rounds::Round& round,
                                const std::function<Status(const storage::PartialRecord&)>& merge);
  // A secure round's masked partials merged and its masked inputs closed; whether it closed.
  bool close_inputs(JobEntry& job, double now);
  // The lease epoch the driver's writes for `job` carry.
  storage::Epoch epoch_of(const JobEntry& job) const;
  // After the store refused a write of `job`'s owner with kConflict at a leased epoch (another
  // replica acquired the job): this coordinator stops owning it. Whether it stepped down.
  bool step_down_if_fenced(JobEntry& job, const Status& refused);
  // Running or paused -> finished (round cap or target reached).
  void finish(JobEntry& job);
  void on_evaluated(JobEntry& job, uint64_t version, const Result<ml::EvalResult>& evaluation,
                    nlohmann::json timing);
  void on_federated_evaluation(JobEntry& job, const storage::RoundRecord& round);

  // ---- round_following.cpp ----
  // Serves a copy of the owner's round `record` of `job` here (read at the replication's
  // `read_wakes`), or hands out the tasks its buffer gained since; whether it did.
  bool follow(JobEntry& job, const storage::RoundRecord& record, uint64_t read_wakes);
  // Closes `job`'s copy and writes its partial once no upload is being folded into it;
  // whether it was written (or needed none, or was refused for good).
  bool write_partial(JobEntry& job, double now);
  // The owner's secure round of `job`: the stage messages other replicas relayed to it,
  // taken; and a copy's: the owner's messages the store holds, published.
  void relay_stage_messages(JobEntry& job, bool owned);

  JobTable& jobs_;
  ClientRegistry& clients_;
  TenantRegistry& tenants_;
  storage::Store& store_;
  RoundReplication& replication_;
  ModelEvaluator& evaluator_;
  TaskNotifier& tasks_ready_;  // told who was invited once a round is published
  SecureRounds& secure_;       // the secure rounds of jobs with secure aggregation
  Metrics& metrics_;           // selection time, rounds concluded and their durations
  Clock clock_;

  std::function<double(double now)> pass_;  // set before start(), then constant
  Mutex tick_mu_;                           // one tick at a time
  // When contacts were last saved (at first, when the driver was made).
  double last_flush_ FEDCASE_GUARDED_BY(tick_mu_);
  bool shutting_down_ = false;  // conclude_all() runs (driver thread, or none)
  Mutex wake_mu_;
  CondVar wake_cv_;
  bool stop_ FEDCASE_GUARDED_BY(wake_mu_) = false;
  bool woken_ FEDCASE_GUARDED_BY(wake_mu_) = false;
  std::thread thread_;
};

}  // namespace fedcase::server
