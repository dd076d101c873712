#pragma once
// The secure rounds of a coordinator, by job: the owner's SecureRound of each secure job's
// open round (secure_round.h), and on a replica the SecureRoundCopy of each round another
// replica owns (secure_copy.h); the stages a client's request reaches (SecureStages); and the
// notifier that wakes stage long polls.
//
// Thread safety: every method may be called from any thread. One mutex guards the maps, a
// leaf: no round's method is called with it held.

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/mutex.h"
#include "server/core/base/metrics.h"
#include "server/core/base/task_notifier.h"
#include "server/core/secure/secure_copy.h"
#include "server/core/secure/secure_round.h"

namespace fedcase::server {

// The secure rounds of every job, by job: at most one open per job, and on a replica the copies
// of the rounds other replicas own (the round driver makes and drops them).
class SecureRounds {
 public:
  // `wake_driver` is called when a round may close a stage early.
  SecureRounds(Metrics& metrics, std::function<void()> wake_driver);

  // Opens the secure round `setup` describes (its invitees in any order); it replaces any
  // earlier one of the job. A round that cannot be set up is opened failed.
  std::shared_ptr<SecureRound> open(SecureRound::Setup setup);
  // The job's secure round, or null.
  std::shared_ptr<SecureRound> find(JobId job) const;
  // The job's round is over: it is forgotten.
  void close(JobId job, const SecureRound& round);
  // A job's public keys are refused for this many rounds after the round that used them
  // (Store::put_used_keys).
  static constexpr uint64_t kKeptRounds = 64;

  // The earliest stage deadline after `now` over every round.
  std::optional<double> next_deadline(double now) const;

  // Long polls of stage messages wait here (as task polls on the task notifier).
  uint64_t watch(ClientId client, std::function<void()> wake);
  void unwatch(ClientId client, uint64_t handle);
  // What wakes them: copies publish through it.
  TaskNotifier& stage_notifier() { return stage_ready_; }

  // ---- copies of rounds another replica owns ----
  // Serves `copy` as the job's secure round here; an earlier copy of the job ends.
  void serve_copy(JobId job, std::shared_ptr<SecureRoundCopy> copy);
  // The job's copy, or null.
  std::shared_ptr<SecureRoundCopy> find_copy(JobId job) const;
  // The job's copy ends (`why`) and is forgotten.
  void drop_copy(JobId job, const std::string& why);
  // Every job that has a copy.
  std::vector<JobId> copied_jobs() const;
  // The job's round as a client's request sees it here: its own round, else a copy; null.
  std::shared_ptr<SecureStages> stages(JobId job) const;

 private:
  std::vector<std::shared_ptr<SecureRound>> all() const;

  Metrics& metrics_;
  const std::function<void()> wake_driver_;
  TaskNotifier stage_ready_;
  mutable Mutex mu_;
  std::map<JobId, std::shared_ptr<SecureRound>> rounds_ FEDCASE_GUARDED_BY(mu_);
  std::map<JobId, std::shared_ptr<SecureRoundCopy>> copies_ FEDCASE_GUARDED_BY(mu_);
};

}  // namespace fedcase::server
