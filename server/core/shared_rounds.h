#pragma once
// A replica serving the open rounds of jobs it does not own (docs/scaling.md, "Clients and
// failover"): when a job's owner opens a shared round (JobStatus::shared_round; its plan and K
// stored with it), every other replica rebuilds it from the store (JobRuntime::follow_round)
// and publishes the copy, so that an invitee's long poll on any replica gets the task the
// owner planned for it, and its upload to any replica is admitted through the store and
// folded into that replica's own aggregate of the round. Once the owner closes the round to
// admission, the copy closes, and when no upload is being folded into it any more its
// aggregate is written as this replica's partial (Store::put_partial) and the copy is dropped;
// the owner merges the partials and commits. A copy whose round concluded meanwhile is dropped
// unwritten.
//
// A secure job's round (docs/scaling.md, "Secure rounds on every replica") is served here by a
// SecureRoundCopy beside the Round copy: the owner's stage messages are read from the store on
// every pass until the round concludes, and the partial written at the close is the copy's
// masked partial; the SecureRoundCopy outlives the Round copy, through the unmask stage.
//
// The store is read every kFollowEvery seconds (the rounds of each job this replica does not
// own), and at once after wake() (a kRound wake-up: a round opened, closed, got a partial or
// concluded); a job whose model version is behind the round's base version waits for the
// ownership pass to load the newer model.
//
// Thread safety: follow() runs on the round driver's thread (it uses the jobs' runtimes);
// wake() may be called from any thread.

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "server/core/job_table.h"
#include "server/core/metrics.h"
#include "server/core/secure_round.h"
#include "server/core/task_notifier.h"
#include "storage/store.h"

namespace fedcase::server {

class SharedRounds {
 public:
  // Every argument must outlive the object; `replica` names this replica in the store.
  SharedRounds(storage::Store& store, JobTable& jobs, TaskNotifier& tasks_ready,
               SecureRounds& secure, Metrics& metrics, std::string replica);

  // One pass at `now` (the coordinator's clock), unless the last one was less than
  // kFollowEvery ago; returns when the next one is due.
  double follow(double now);
  // The next follow() reads the store whenever it comes, however recent the last read.
  void wake() { woken_ = true; }

 private:
  // Publishes a copy of `record`, the owner's open shared round of `job`, unless the job
  // changed meanwhile.
  void serve(JobEntry& job, const storage::RoundRecord& record);
  // Closes the copy of round `index` of `job`; once no upload is being folded into it, writes
  // its aggregate as this replica's partial (unless the round `concluded`) and drops it.
  void close(JobEntry& job, RoundIndex index, bool concluded, double now);
  // Publishes the owner's stage messages of the job's secure round copy that the store holds
  // now, or drops the copy once its round is no longer open (`rounds`: the job's).
  void follow_secure(JobEntry& job, const std::vector<storage::RoundRecord>& rounds);
  // Serves a copy of the secure round `record` of `job` (invited: its invitees).
  void serve_secure(JobEntry& job, const storage::RoundRecord& record,
                    const std::vector<ClientId>& invited);

  storage::Store& store_;
  JobTable& jobs_;
  TaskNotifier& tasks_ready_;
  SecureRounds& secure_;
  Metrics& metrics_;
  const std::string replica_;
  double next_ = 0;
  std::atomic<bool> woken_{false};
};

// The store's wake-ups (Store::listen) on a thread of its own: `woken` runs on that thread for
// every kRound, kLease or kJob wake-up, and whenever some may have been missed (the listener
// lost its connection: re-read everything), and must be quick. A store that cannot listen now
// is asked again every second; the replicas' periodic reads cover the meantime.
class WakeupThread {
 public:
  // `store` must outlive the object.
  WakeupThread(storage::Store& store, std::function<void()> woken);
  ~WakeupThread();  // stop()
  // Stops and joins the thread (within about half a second). Idempotent.
  void stop();

 private:
  void run();

  storage::Store& store_;
  const std::function<void()> woken_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fedcase::server
