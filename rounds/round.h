#pragma once
// One round of a job, from its opening to the moment it is due to close: who is invited with
// which task, whose updates were admitted, and when it closes. JobRuntime (job_runtime.h)
// opens rounds and concludes them; the coordinator and the simulator drive the same Round.
//
// A synchronous round's tasks are all handed out at its open, train from its base version and
// share its deadline. An asynchronous job's round is a buffer (Spec::buffered): tasks come and
// go while it is open, each with the terms it was handed out on (the round whose offer carries
// it, the version it trains from, its own deadline); tasks still in flight when the buffer is
// concluded carry over to the next one, and the buffer is due once K updates are in.
//
// Pure logic: no store, no clock (every time is an argument, seconds on the coordinator's
// clock), no lock. Not thread-safe: the owner serialises calls, except that the aggregate a
// reservation hands out may be folded into outside the owner's lock (RoundAggregate).
//
// An upload is admitted in three steps, so that its fold runs outside the owner's lock:
//   1. reserve() (under the owner's lock): the state checks; holds one of the K places;
//   2. RoundAggregate::add() (no owner's lock): the fold;
//   3. accept() or release() (under the owner's lock): publishes or frees the place.
// A round with a reservation in flight is never due, so its aggregate outlives every fold.

#include <cstddef>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "aggregation/aggregator.h"
#include "common/blob.h"
#include "common/ids.h"
#include "common/mutex.h"
#include "common/status.h"
#include "rounds/evaluation.h"
#include "scheduling/profile.h"
#include "scheduling/round_plan.h"

namespace fedcase::rounds {

// A round's aggregate, shared by the round and the uploads being folded into it. Thread-safe:
// add() serialises folds with its own mutex.
class RoundAggregate {
 public:
  explicit RoundAggregate(std::unique_ptr<aggregation::Aggregator> aggregator);

  // Folds in one validated update (see Aggregator::add for the errors).
  Status add(const UnalignedFloat* values, size_t count, double weight);
  // Folds it in scaled by `discount` (Aggregator::add with a discount).
  Status add(const UnalignedFloat* values, size_t count, double weight, double discount);
  // An update as it arrived, of any encoding (aggregation::Aggregator::add).
  Status add(const BlobView& update, double weight, double discount);
  // An update's `count` values where they lie, in memory or read a piece at a time (see
  // aggregation::Aggregator::add for the errors).
  Status add(const aggregation::UpdateValues& values, size_t count, double weight,
             double discount);
  // Folds in a sum its senders weighted and clipped (Aggregator::add_sum: secure aggregation).
  Status add_sum(const float* sum, size_t count, double total_weight, size_t updates);
  // The aggregate of everything added (see Aggregator::result).
  Result<std::vector<float>> result() const;
  // Everything added, as a partial aggregate for another replica's aggregate of the round
  // (Aggregator::partial), and another replica's partial taken in (Aggregator::merge_partial).
  Result<aggregation::EncodedPartial> partial() const;
  Status merge_partial(std::string_view bytes, size_t updates);
  std::string rule() const;

 private:
  mutable Mutex mu_;
  std::unique_ptr<aggregation::Aggregator> aggregator_ FEDCASE_GUARDED_BY(mu_);
};

// A change to one client's profile that a round step decided. The owner of the profiles
// applies it (apply_profile_change) under whatever lock guards them.
struct ProfileChange {
  // kNotKept: the round concluded without the client's update (selection feedback).
  enum class Kind { kSelected, kCompleted, kMissedDeadline, kNotKept };
  Kind kind = Kind::kSelected;
  ClientId client = 0;
  RoundIndex round = 0;
  scheduling::RoundReport report;      // kCompleted: the task's statistics
  scheduling::NotKeptReport not_kept;  // kNotKept: the round's mean utility, the time it ran
};

// Folds `change` into `profile` (observe_selected, observe_completion,
// observe_missed_deadline or observe_not_kept). kInvalidArgument (profile unchanged) for a
// bad report.
Status apply_profile_change(const ProfileChange& change, scheduling::ClientProfile& profile,
                            const scheduling::ProfileParams& params);

// Why an invited client's update is not (or no longer) wanted; kWanted when it is. kHeld: the
// remaining places are held by uploads still being checked, one of which may yet be refused,
// or the client's task is in a buffer that filled or closed and carries it over to the next
// one: the update may be wanted shortly. kTooStale: a buffer's task whose version fell further
// behind than the job allows. kReady: the client reported its update ready for a cohort and
// waits for one (a secure asynchronous job's buffer).
enum class Admission {
  kWanted,
  kNotInvited,
  kClosed,
  kPastDeadline,
  kAlreadyUploaded,
  kFilled,
  kHeld,
  kTooStale,
  kReady
};
const char* admission_reason(Admission admission);  // "open", "not invited", "round closed", ...

class Round {
 public:
  // What a round needs from its job when it opens.
  struct Spec {
    RoundIndex index = 0;
    // The model version the round's updates are applied to; a synchronous round's tasks all
    // train from it.
    uint64_t base_version = 0;
    std::string base_checksum;  // of that version's blob
    double opened_at = 0;
    double deadline = 0;    // absolute time (a buffer has none: its tasks have their own)
    size_t target = 0;      // K: the round is filled at K accepted updates
    size_t available = 0;   // clients available when it opened
    bool buffered = false;  // an asynchronous job's buffer
  };
  // The terms a task was handed out on.
  struct Terms {
    RoundIndex round = 0;       // the round whose task offer carries it (its upload URL's)
    uint64_t base_version = 0;  // the version it trains from
    std::string base_checksum;  // of that version's blob
    double assigned_at = 0;     // when it was planned
    double deadline = 0;        // absolute: its update is refused after it
  };
  // A buffer's task still in flight, carried to the next buffer (in_flight()).
  struct Assignment {
    scheduling::ClientTask task;
    Terms terms;
    std::optional<double> fetched_at;  // its first fetch
    bool ready = false;                // its update was reported ready for a cohort
  };

  // A synchronous round: every task on the round's terms (its index, base version, open and
  // deadline).
  Round(Spec spec, std::vector<scheduling::ClientTask> tasks,
        std::shared_ptr<RoundAggregate> aggregate);
  // A buffer (spec.buffered), holding the tasks `carried` from the previous one.
  Round(Spec spec, std::vector<Assignment> carried, std::shared_ptr<RoundAggregate> aggregate);

  RoundIndex index() const { return spec_.index; }
  uint64_t base_version() const { return spec_.base_version; }
  const std::string& base_checksum() const { return spec_.base_checksum; }
  size_t target() const { return spec_.target; }
  double opened_at() const { return spec_.opened_at; }
  double deadline() const { return spec_.deadline; }
  size_t available() const { return spec_.available; }
  bool buffered() const { return spec_.buffered; }
  // The tasks it holds: a buffer's include those carried in, not those dropped (dropped()).
  const std::vector<scheduling::ClientTask>& tasks() const { return tasks_; }
  // The clients this round invited: a synchronous round's every task, a buffer's dispatched().
  std::vector<ClientId> invited() const;
  // The client's task, or nullptr when it holds none.
  const scheduling::ClientTask* task_for(ClientId client) const;
  // The terms of the client's task, or nullptr when it holds none.
  const Terms* terms_for(ClientId client) const;
  // Whether the client holds a task handed out in round `round` (its offer's round).
  bool holds_task_of(ClientId client, RoundIndex round) const;
  // Whether an upload or a status question of `client` about its task of round `round` (its
  // URL's) reaches this round: a synchronous round's own index; in a buffer, the round of the
  // task the client holds, or for a client without one the buffer's own index or that of a
  // task it dropped. kConflict saying which round is open otherwise.
  Status check_task_round(ClientId client, RoundIndex round) const;

  // ---- buffers only ----
  // Hands out a task on `terms` (the client must hold none); it counts as invited by this
  // buffer.
  void assign(scheduling::ClientTask task, Terms terms);
  // Drops the tasks whose deadline is `now` or earlier and whose update is neither accepted
  // nor being folded; returns their clients.
  std::vector<ClientId> expire(double now);
  // Drops a carried task that fell more than the job allows behind base_version.
  void drop_stale(ClientId client);
  // The tasks neither accepted nor dropped, for the next buffer, those reported ready and in
  // no cohort still ready. A cohort's members go on as training tasks: they train again,
  // never masking the same update twice (a sum of it may have been revealed). When the buffer
  // was not `committed`, also the members whose masked inputs it took (they counted for
  // nothing).
  std::vector<Assignment> in_flight(bool committed) const;
  // Tasks in flight: handed out, neither accepted nor dropped, and still training (not ready
  // for a cohort, nor in it): those a buffer's concurrency counts.
  size_t in_flight_count() const;
  // Clients invited by this buffer (assign), as opposed to carried in.
  const std::vector<ClientId>& dispatched() const { return dispatched_; }
  // Why each dropped task was dropped: "missed deadline" or "too stale".
  const std::map<ClientId, std::string>& dropped() const { return dropped_why_; }
  // Versions between the one the client's task trains from and base_version.
  uint64_t staleness(ClientId client) const;
  // The earliest time the round changes by itself: a synchronous round's deadline, a buffer's
  // earliest task deadline (of a task neither accepted nor in the cohort); nullopt when a
  // buffer has no such task.
  std::optional<double> next_deadline() const;
  size_t accepted() const { return accepted_.size(); }
  // Invited, not yet accepted, and the round still open: the client is busy with this task.
  bool holds_task(ClientId client) const;
  bool filled() const { return accepted_.size() >= spec_.target; }
  bool closed() const { return closed_; }

  // ---- ready cohorts: a secure asynchronous job's buffer (docs/secure_aggregation.md) ----
  // The client reports the update of its task trained and kept on the device, for a cohort
  // (while one runs, for the next). Errors as check_admission; kConflict for a client already
  // ready or in the cohort.
  Status report_ready(ClientId client, double now);
  // The clients ready and in no cohort, earliest report first.
  const std::vector<ClientId>& ready() const { return ready_; }
  // `members` (ready clients) become the buffer's cohort, opened at `now`: their masked inputs
  // are the updates the buffer takes (kWanted whatever their tasks' deadlines, and their tasks
  // do not expire); any other client waits for the next cohort (kReady once ready, kHeld for an
  // upload). Precondition: every member is ready.
  void open_cohort(const std::vector<ClientId>& members, double now);
  bool in_cohort(ClientId client) const { return cohort_.count(client) > 0; }
  // When the cohort opened; nullopt while there is none.
  std::optional<double> cohort_opened_at() const { return cohort_opened_at_; }

  // The invitations (invited()) as profile changes (kSelected), for the owner of the profiles.
  std::vector<ProfileChange> selection_changes() const;

  // The client fetched its task at `now`; its task's duration counts from its first fetch.
  void hand_out(ClientId client, double now);
  // When the client's task started: its first fetch, or when it was planned if it never
  // fetched.
  double task_started_at(ClientId client) const;
  // Whether `client` fetched its task (hand_out).
  bool fetched(ClientId client) const { return handed_out_.count(client) > 0; }
  // Whether an upload from `client` at `now` would be admitted.
  Admission admission(ClientId client, double now) const;
  // As admission(), as a Status: kPermissionDenied (not invited), kUnavailable (held: retry
  // shortly) or kConflict with a message.
  Status check_admission(ClientId client, double now) const;
  // Admits `client`'s upload and holds one of the K places for it; the aggregate to fold into.
  // Errors as check_admission.
  Result<std::shared_ptr<RoundAggregate>> reserve(ClientId client, double now);
  // The reserved update was folded in with `report` at `now`, its fold having taken `fold_s`
  // seconds: it counts, with the client's `evaluation` of the base model if it sent one
  // (checked by the caller: of base_version()). Returns the change of the client's profile.
  // Precondition: `client` holds a reservation, or its update was admitted and folded by
  // another coordinator replica whose partial aggregate the round's aggregate merged (then
  // `now` is when that replica received it, and `fold_s` 0).
  ProfileChange accept(ClientId client, const scheduling::RoundReport& report, double now,
                       double fold_s = 0,
                       std::optional<protocol::EvalReport> evaluation = std::nullopt);
  // The reserved update could not be folded in: frees its place.
  void release(ClientId client);
  // Another coordinator replica admitted the client's update to this round (one all replicas
  // serve): the client is not handed its task again, and its uploads here are refused as
  // already uploaded. Its update counts once the owner merges that replica's partial.
  void admitted_elsewhere(ClientId client) { admitted_elsewhere_.insert(client); }
  // Whether an upload holds a reservation (is being checked or folded).
  bool uploads_in_flight() const { return !reserved_.empty(); }
  // Filled, or past its deadline (not a buffer), or closed, with no upload being folded.
  bool due(double now) const;
  // Admits nothing more (the round is being concluded or cancelled).
  void close() { closed_ = true; }
  // The client-seconds the round occupied, closing at `closed_at`: each task from the open (or
  // its later assignment) until its update was accepted, it was dropped, or `closed_at` (what
  // a tenant is charged).
  double client_seconds(double closed_at) const;
  // The sum of the expected seconds of the tasks it invited (invited()), as planned.
  double expected_client_seconds() const;

  // Read by JobRuntime when it concludes the round.
  struct Accepted {
    double at = 0;          // when the update was accepted
    double duration_s = 0;  // first task fetch (or the round's open) to acceptance
    double dispatch_s = 0;  // the round's open to the first task fetch
    uint64_t samples = 0;
    double loss_sum = 0;
    double utility = 0;                                // statistical utility of its report
    double download_s = 0, train_s = 0, upload_s = 0;  // reported or measured; 0 = unknown
    double fold_s = 0;
    std::optional<protocol::EvalReport> evaluation;  // the client's scores of the base model
    uint64_t staleness = 0;                          // versions behind base_version (buffers)
  };
  const std::map<ClientId, Accepted>& accepted_updates() const { return accepted_; }
  const std::shared_ptr<RoundAggregate>& aggregate() const { return aggregate_; }

 private:
  bool is_ready(ClientId client) const;
  // Drops the client's task for `why`, counting its client-seconds until `until`.
  void drop(ClientId client, const std::string& why, double until);
  void index_tasks();

  Spec spec_;
  std::vector<scheduling::ClientTask> tasks_;
  std::vector<Terms> terms_;  // of tasks_[i]
  std::map<ClientId, size_t> task_index_;
  std::map<ClientId, double> handed_out_;
  std::set<ClientId> reserved_;  // uploads being folded
  std::set<ClientId> admitted_elsewhere_;
  std::map<ClientId, Accepted> accepted_;
  std::vector<ClientId> dispatched_;
  double dispatched_expected_s_ = 0;
  std::map<ClientId, std::string> dropped_why_;
  double dropped_client_s_ = 0;  // client-seconds of the dropped tasks
  std::vector<ClientId> ready_;  // reported ready, in no cohort, earliest first
  std::set<ClientId> cohort_;
  std::optional<double> cohort_opened_at_;
  std::shared_ptr<RoundAggregate> aggregate_;
  bool closed_ = false;
};

// What another coordinator replica needs to serve a round this one opened: its invitees'
// tasks, the base model's checksum and the clients available at its open; for a buffer, each
// task with its terms, and the plan's revision (the tasks the buffer handed out so far: it
// grows with every refill). With the round's stored record (index, base version, open,
// deadline, K) it rebuilds the round (round_from_plan). JSON, stored with the round
// (storage::RoundRecord::plan). Pure.
nlohmann::json round_plan_json(const Round& round);

// The round `plan` (round_plan_json) describes, of `spec` (index, base version, open, deadline,
// target and whether it is a buffer, as stored; base_checksum and available are read from the
// plan), folding into `aggregate`. A buffer's tasks are all taken as carried in.
// kInvalidArgument for a plan that is not one, or not of the spec's kind.
Result<Round> round_from_plan(Round::Spec spec, const nlohmann::json& plan,
                              std::shared_ptr<RoundAggregate> aggregate);
// Hands out the tasks of the buffer's newer `plan` that `buffer` (a copy) does not hold yet;
// their clients. kInvalidArgument for a plan that is not a buffer's.
Result<std::vector<ClientId>> assign_from_plan(Round& buffer, const nlohmann::json& plan);

}  // namespace fedcase::rounds
