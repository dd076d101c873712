#pragma once
// The life cycle of a job's round on one coordinator: one state machine for every mode. A
// synchronous round, an asynchronous job's buffer and a secure round (SecAgg+) are phases and
// data of the same machine; a round served by several replicas is the same machine with
// replication behind it (server/core/rounds/replication.h), and a replica that serves another
// replica's round runs the follower's phases of it.
//
// The machine is pure: the coordinator's round driver observes a job (its state, its round,
// the secure stages, what the store says about a shared round) as Facts, turns them into
// Events (events_of), asks step() which transition they fire, publishes the new phase and
// carries out the transition's action (open a round, close admission, conclude, ...). An
// action's outcome (the round opened, the commit's answer) is itself an event, stepped the
// same way when the driver publishes what the action did. Nothing else changes a phase.
//
// The transitions (kTransitions below; docs/architecture.md prints the same table, made from
// this one by `lifecycle_table`):
//  - an owner's round: kIdle -> kOpen (or, secure, kAdvertiseKeys -> kShareKeys ->
//    kMaskedInput) -> kClosingAdmission -> kGathering -> (secure: kUnmask ->) kConcluding ->
//    kIdle, through kResolving when the store's answer to the conclusion was lost; a secure
//    asynchronous job's buffer goes from kOpen to the key stages once K of its clients
//    reported their updates ready (its cohort, docs/secure_aggregation.md);
//  - a follower's copy of another replica's round: kIdle -> kFollowing -> kHandingOver ->
//    (secure: kRelaying ->) kIdle.
//
// Thread safety: pure functions and constants.

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/states.h"

namespace fedcase::rounds {

enum class Phase : uint8_t {
  kIdle,              // no round of the job here
  kOpen,              // the round (or buffer) hands out tasks and admits updates
  kAdvertiseKeys,     // secure: clients advertise their keys; the round admits nothing yet
  kShareKeys,         // secure: clients share their secrets with their neighbours
  kMaskedInput,       // secure: the round admits masked inputs
  kClosingAdmission,  // the round admits nothing more (in the store first, when shared)
  kGathering,         // the other replicas' partial aggregates come in (at once when local)
  kUnmask,            // secure: the survivors reveal what removes the masks
  kConcluding,        // the conclusion (a commit or a failure) is decided and written
  kResolving,         // the store's answer to the conclusion was lost: it is read back
  kFollowing,         // a copy of another replica's round serves and admits here
  kHandingOver,       // the copy's admission closed: its partial aggregate is written
  kRelaying,          // secure: the copy relays its clients' unmask answers to the owner
};
inline constexpr size_t kPhaseCount = static_cast<size_t>(Phase::kRelaying) + 1;
const char* phase_name(Phase phase);  // "idle", "open", ...

// What the driver observed, or an outcome of an action it carried out.
enum class Event : uint8_t {
  // Outcomes.
  kOpened,                // a round opened: its tasks are out
  kOpenedSecure,          // a secure round opened: its invitees advertise their keys
  kCohortOpened,          // a buffer's cohort opened its secure round: its members advertise keys
  kFollowed,              // a copy of the owner's round serves here
  kStageClosed,           // a secure key stage closed: its messages reach every replica
  kAdmissionClosed,       // admission closed (in the store, when shared)
  kInputsClosed,          // secure: the masked inputs closed, the unmask requests are out
  kCommitted,             // the round and its model are durable
  kRoundFailed,           // the round's failure is durable (or the store refused it for good)
  kOutcomeLost,           // the store's answer to the conclusion was lost
  kResolvedOpen,          // read back: the store holds the round open still
  kPartialWritten,        // the copy's partial aggregate is in the store (or refused for good)
  kMaskedPartialWritten,  // a secure copy's masked partial is in the store
  kFenced,                // the store refused this coordinator's lease epoch
  // Observations.
  kSteppedDown,        // the job's owner is another replica now, and no upload is in flight
  kFailing,            // the round is to fail: its job stopped, or its secure round failed
  kEvaluationPending,  // the previous model's evaluation decides whether this round may commit
  kStageDue,           // the open key stage: every client answered, or its deadline passed
  kDue,                // filled, or past its deadline, with no upload in flight
  kFilledElsewhere,    // shared: the replicas admitted K updates between them
  kInputsComplete,     // secure: every client that shared its keys sent its masked input
                       // (a cohort's: or stage_seconds passed)
  kCohortDue,          // a secure job's buffer holds K updates reported ready for a cohort
  kTaskDeadline,       // a buffer's task passed its deadline
  kSlotsFree,          // a running buffer has free slots
  kPartialsIn,         // every replica holding admitted updates wrote its partial
  kWaitedOut,          // lease_s passed since admission closed: missing partials are lost
  kMaskedPartialsIn,   // secure: the masked partials are in, or lease_s passed
  kUnmaskDue,          // secure: every survivor answered, or the unmask deadline passed
  kRoundCapReached,    // the job used all its rounds
  kWantsRound,         // the job is driven here with no round, and runs (or, asynchronous, is
                       // paused: its buffer takes the updates of the tasks in flight)
  kOwnerRoundOpen,     // follower: the owner's round is open and trains from the model here
  kOwnerClosed,        // follower: the owner closed the round's admission
  kOwnerReplanned,     // follower: the owner handed out more of its buffer's tasks
  kOwnerConcluded,     // follower: the round is no longer open (or this replica acquired the
                       // job, failing it), and no upload is in flight
  kShuttingDown,       // the coordinator stops: every round here ends now
  kPending,            // nothing else: the phase's action is (re)tried
};
inline constexpr size_t kEventCount = static_cast<size_t>(Event::kPending) + 1;
const char* event_name(Event event);  // "opened", "stepped_down", ...
using Events = std::bitset<kEventCount>;

// What the driver carries out for a transition.
enum class Action : uint8_t {
  kNone,
  kOpen,             // select, plan, record and publish a round (jobs in their tenants' turn)
  kFinishJob,        // the job is finished
  kFollow,           // a copy of the owner's round, from the store
  kCloseStage,       // closes the open key stage and publishes the next stage's messages
  kCloseAdmission,   // closes the round to admission (in the store first, when shared)
  kOpenCohort,       // opens the secure round of a cohort of the buffer's ready clients
  kExpire,           // drops the buffer's tasks past their deadline
  kRefill,           // hands out tasks for the buffer's free slots (jobs in their tenants' turn)
  kCloseInputs,      // merges the masked partials and closes the masked inputs
  kConclude,         // merges the partials, concludes and commits (or fails) the round
  kFail,             // concludes the round as failed, for the reason it fails
  kReadBack,         // reads the round back from the store
  kWriteConclusion,  // writes the conclusion kept since its answer was lost, again
  kDrop,             // forgets the round here, writing nothing
  kWritePartial,     // closes the copy and writes its partial aggregate
};
const char* action_name(Action action);  // "none", "open", ...

// A set of phases a transition leaves from.
using Phases = std::bitset<kPhaseCount>;
Phases phases(std::initializer_list<Phase> list);

struct Transition {
  Phases from;
  Event on;
  Phase to;  // kIdle..., or the phase it left from when `stays`
  bool stays = false;
  Action action = Action::kNone;
  const char* why = "";
};

// Every transition, in the order step() tries them.
const std::vector<Transition>& transitions();

// What happened to `phase` given `events`: the first transition leaving `phase` on one of them
// (its `to` is `phase` itself when it stays), or nullopt when none does: the phase waits.
struct Step {
  Phase to = Phase::kIdle;
  Event on = Event::kPending;
  Action action = Action::kNone;
  const char* why = "";
};
std::optional<Step> step(Phase phase, const Events& events);

// What the driver observes of a job and its round, at one moment.
struct Facts {
  // The job.
  bool owned = true;  // this coordinator drives the job
  JobState job = JobState::kRunning;
  bool asynchronous = false;        // it trains in buffers (FedBuff): paused, they still open
  bool round_cap_reached = false;   // its last round index is used
  bool evaluation_pending = false;  // a target job's previous model is being evaluated
  // The round here (not read in kIdle).
  bool secure = false;    // its sum is unmasked (SecAgg+)
  bool buffered = false;  // an asynchronous job's buffer
  bool due = false;       // filled, past its deadline or closed
  bool uploads_in_flight = false;
  bool task_deadline_passed = false;  // a buffer's task is past its deadline
  bool slots_free = false;            // a buffer's free slots
  bool cohort_due = false;            // a secure job's buffer holds K ready updates
  bool failing = false;               // a reason to fail it was recorded
  bool shutting_down = false;         // the coordinator stops
  // The secure round (secure rounds only).
  bool secure_failed = false;
  bool stage_due = false;
  bool inputs_complete = false;
  bool unmask_due = false;
  // Replication: what the store says of a shared round.
  bool filled_elsewhere = false;
  bool partials_in = false;
  bool waited_out = false;
  // Follower: the owner's round as the store holds it.
  bool owner_round_open = false;
  bool owner_closed = false;
  bool owner_replanned = false;
  bool owner_concluded = false;
};

// The observations `facts` make in `phase` (outcomes are added by the driver).
Events events_of(Phase phase, const Facts& facts);

// The transition table as Markdown (docs/architecture.md).
std::string transition_table_markdown();

}  // namespace fedcase::rounds
