#pragma once
// The coordinator's round driver: one thread that opens rounds when enough clients are free,
// concludes them when they are due, commits them durably, and hands committed models to the
// evaluator. Each step decides under JobTable::mu, runs the engine and writes to the store
// without any lock, and publishes under JobTable::mu again.
//
// When several jobs could open a round at once, their rounds open in the order the tenants'
// fair share says (TenantRegistry::next_round: least-served tenant first; under overload a
// tenant over its round-start limit waits); each opened round is charged to its tenant at
// once, and corrected to the client-seconds it really used when it concludes.
//
// An asynchronous job (FedBuff) keeps one buffer open: its free slots are refilled whenever
// clients are free (slot by slot, the jobs of the least-served tenants first, each batch
// charged at once), tasks past their deadline are dropped, and once K updates are in the
// buffer concludes and the next one opens at once with the tasks still in flight.
//
// A job with a target accuracy on the server's test set does not commit its next round while
// the evaluation of its previous model is pending: once a model is known to reach the target,
// the job finishes with it, and a round opened meanwhile is failed ("job reached its target"),
// never committed. The server evaluates built-in models, and TorchScript models with a server
// dataset (rounds::JobConfig::server_evaluated). A job whose evaluation target is
// "federated" finishes after a committed round whose federated accuracy (of the round's base
// model, reported by its clients) reaches the target.
//
// A job with secure aggregation (secure_round.h) runs its round through the stages of SecAgg+
// beside the Round: the key stages close at their deadlines (or once every client answered),
// the masked input stage when the Round is due (or every sharer sent its input), after which
// the Round stays closed through the unmask stage; then the masks are removed in conclude(),
// with no lock held, and the sum goes through the server optimizer as a plain aggregate does.
// A stage that ends below the threshold fails the round with the library's reason.
//
// The thread runs on events, never on a fixed tick: it sleeps until the next thing that is due
// (an open round's deadline, a tenant's round-start window freeing, contacts to save) or until
// wake() says something changed (an upload accepted or refused, a client registered or back
// online, a job created or controlled, an evaluation done). The clients' profiles are copied
// only when a job waits for a round and enough clients are free to open one, or an
// asynchronous job's buffer has a free slot and a client is free (once a tick).
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

#include "common/mutex.h"
#include "server/core/client_registry.h"
#include "server/core/evaluator.h"
#include "server/core/job_table.h"
#include "server/core/metrics.h"
#include "server/core/secure_round.h"
#include "server/core/task_notifier.h"
#include "server/core/tenants.h"
#include "storage/store.h"

namespace fedcase::server {

class RoundDriver {
 public:
  // Every argument must outlive the driver.
  RoundDriver(JobTable& jobs, ClientRegistry& clients, TenantRegistry& tenants,
              storage::Store& store, ModelEvaluator& evaluator, TaskNotifier& tasks_ready,
              SecureRounds& secure, Metrics& metrics, Clock clock);
  ~RoundDriver();  // stops the thread

  // A pass to run at the start of every tick, on the driver's thread, that returns when it is
  // due next (e.g. Ownership::pass). Set before start().
  void set_pass(std::function<double(double now)> pass);
  // Replicas: this replica's name and lease seconds. The rounds of the jobs it owns are then
  // shared (JobStatus::shared_round) when the job allows (rounds::owner_only_reason): opened
  // with their plan and K for the other replicas to serve, closed to admission in the store
  // when K updates are recorded or at the deadline, and concluded once every replica holding
  // updates wrote its partial aggregate, or `lease_s` after the close (the updates of a
  // replica without a partial are then lost). Set before start().
  void set_replica(std::string replica, double lease_s);
  // Starts / stops the thread that calls tick() at its deadlines and at once after wake().
  void start();
  void stop();
  void wake();
  // A shared round may have changed in the store (a partial written, admission closed): the
  // next tick reads the owner's open shared rounds at once, then wakes the driver.
  void wake_shared();
  // Advances every job once: concludes due rounds, opens rounds for running jobs, saves
  // contacts when due. Returns when the next tick is due if nothing wakes the driver first
  // (nullopt: only an event can make one useful).
  std::optional<double> tick();
  // Concludes every open round at once, as the coordinator stops: a running job's round with
  // min_updates accepted updates commits (unless the job waits for an evaluation to learn
  // whether it reached its target); any other fails ("coordinator stopped", or as tick()
  // would for a cancelled or finished job) without blaming its invitees. Call with the thread
  // stopped and no upload being folded (the HTTP front end stopped).
  void conclude_all();
  // Queues the evaluation of `job`'s committed `model`; `timing` (seconds) is recorded in the
  // round's metrics with the result and the evaluation's own eval_s. Used after each commit of
  // a server-evaluated job, and at start for committed models that a crash left unevaluated.
  void evaluate(JobEntry& job, std::shared_ptr<const rounds::GlobalModel> model,
                nlohmann::json timing);
  // Whether the running jobs waiting to open a round, plus `extra_wanted` clients (a job being
  // submitted), want more clients (ceil(K x overcommit) a job, at most its eligible clients;
  // none for a job that no set of free clients could serve) than are free (available and
  // holding no task): only then are tenants throttled. Takes JobTable::mu and the registry's
  // lock, one after the other; any thread.
  bool fleet_overloaded(double now, size_t extra_wanted = 0);

 private:
  struct Closing;
  // Opens a round of `job` over the available clients less the `busy` ones, if enough are
  // free; whether it did.
  bool open(JobEntry& job, const std::set<ClientId>& busy, double now);
  // Hands out tasks for the free slots of an asynchronous `job`'s buffer among `clients` less
  // the `busy` ones (which gains the new invitees).
  void refill(JobEntry& job, const std::vector<ClientSnapshot>& clients, std::set<ClientId>& busy,
              double now);
  // Refills the buffers of the running asynchronous jobs with free slots, the least-served
  // tenant's first.
  void refill_in_turn(double now);
  // The clients of `clients` that `job` may pick: available, with its labels, not `busy`.
  static std::vector<rounds::PoolClient> pool_for(const JobEntry& job,
                                                  const std::vector<ClientSnapshot>& clients,
                                                  const std::set<ClientId>& busy);
  // Opens rounds for `waiting` jobs in the fair share's order (finishing those at their round
  // cap), after telling the fair share which tenants are active.
  void open_in_turn(std::vector<JobEntry*> waiting, double now);
  // The driver thread's loop.
  void run();
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
  void conclude(Closing& closing, double now);
  // The owner's view of its open shared rounds, read from the store every kSharedPollS: K
  // recorded (JobEntry::shared_close.filled), or after the close whether every replica holding
  // updates wrote its partial; a secure round's relayed stage messages taken. Whether some
  // shared round is open.
  bool check_shared_rounds(double now);
  // Merges the other replicas' partials of a shared round (`merge`: into its aggregate), and
  // counts their updates in the round (Round::accept); the updates of a replica without a
  // partial `merge` takes are lost. Returns the round's "partials" metrics.
  nlohmann::json merge_partials(JobEntry& job, rounds::Round& round,
                                const std::function<Status(const storage::PartialRecord&)>& merge);
  // A shared secure round's close of its masked inputs: the other replicas' masked partials
  // merged into `secure`; the replicas merged.
  std::set<std::string> merge_masked_partials(JobEntry& job, SecureRound& secure);
  // The clients' messages of the secure round's open stage that other replicas passed on
  // through the store, taken by `secure`.
  void take_relayed(JobEntry& job, SecureRound& secure);
  // A secure round's conclusion: the masks removed, the sum folded into the round's aggregate
  // and concluded as a plain round; or failed with the reason.
  rounds::Conclusion conclude_secure(Closing& closing, double now);
  // The lease epoch the driver's writes for `job` carry.
  storage::Epoch epoch_of(const JobEntry& job) const;
  // After the store `refused` a write of `job`'s owner: when it refused a leased epoch
  // (kConflict: another replica acquired the job since), this coordinator stops owning the
  // job (stop_owning: its open round is closed, then forgotten unwritten once no upload is
  // being folded into it), and the new owner concludes that round. A single coordinator
  // (epoch kUnleased) keeps its job.
  void step_down_if_fenced(JobEntry& job, const Status& refused);
  // Records `record`, a round of `job` that failed. A store that cannot take it now
  // (kUnavailable: the database restarting) leaves the round open there, so the failure is kept
  // and written again before the job opens another round (open): the store never holds two
  // open rounds of a job. Returns the store's answer.
  Status record_failure(JobEntry& job, const storage::RoundRecord& record);
  // Running or paused -> finished (round cap or target reached).
  void finish(JobEntry& job);
  // Records the evaluation of model `version` with `timing` (commit and evaluation seconds).
  void on_evaluated(JobEntry& job, uint64_t version, const Result<ml::EvalResult>& evaluation,
                    nlohmann::json timing);
  // After `round` committed: its federated accuracy becomes the job's, and finishes the job if
  // it reaches the target.
  void on_federated_evaluation(JobEntry& job, const storage::RoundRecord& round);

  JobTable& jobs_;
  ClientRegistry& clients_;
  TenantRegistry& tenants_;
  storage::Store& store_;
  ModelEvaluator& evaluator_;
  TaskNotifier& tasks_ready_;  // told who was invited once a round is published
  SecureRounds& secure_;       // the secure rounds of jobs with secure aggregation
  Metrics& metrics_;           // selection time, rounds concluded and their durations
  Clock clock_;

  std::function<double(double now)> pass_;  // set before start(), then constant
  std::string replica_;                     // set before start(), then constant
  std::atomic<bool> shared_woken_{false};   // wake_shared() since the last check
  double lease_s_ = 0;                      // set before start(), then constant
  Mutex tick_mu_;                           // one tick at a time
  // When contacts were last saved (at first, when the driver was made).
  double last_flush_ FEDCASE_GUARDED_BY(tick_mu_);
  // Failed rounds the store could not record yet, by job (record_failure); used by ticks
  // alone, one at a time.
  std::map<JobId, storage::RoundRecord> unrecorded_failures_;
  Mutex wake_mu_;
  CondVar wake_cv_;
  bool stop_ FEDCASE_GUARDED_BY(wake_mu_) = false;
  bool woken_ FEDCASE_GUARDED_BY(wake_mu_) = false;
  std::thread thread_;
};

}  // namespace fedcase::server
