#include "rounds/lifecycle.h"

namespace fedcase::rounds {
namespace {

using P = Phase;
using E = Event;
using A = Action;

// Who holds a round of its own job here, and who a copy of another replica's.
const Phases kOwnerRound = phases({P::kOpen, P::kAdvertiseKeys, P::kShareKeys, P::kMaskedInput,
                                   P::kClosingAdmission, P::kGathering, P::kUnmask});
const Phases kKeyStages = phases({P::kAdvertiseKeys, P::kShareKeys});
const Phases kAdmitting = phases({P::kOpen, P::kMaskedInput});
const Phases kFollower = phases({P::kFollowing, P::kHandingOver, P::kRelaying});

Transition go(Phases from, Event on, Phase to, Action action, const char* why) {
  return {from, on, to, false, action, why};
}
Transition stay(Phases from, Event on, Action action, const char* why) {
  return {from, on, P::kIdle, true, action, why};
}

std::vector<Transition> make_transitions() {
  const Phases idle = phases({P::kIdle});
  return {
      // A job between rounds.
      go(idle, E::kOpened, P::kOpen, A::kNone, "the round opened: its tasks are out"),
      go(idle, E::kOpenedSecure, P::kAdvertiseKeys, A::kNone,
         "the secure round opened: its invitees advertise their keys"),
      go(idle, E::kFollowed, P::kFollowing, A::kNone,
         "a copy of the owner's round serves its invitees here"),
      stay(idle, E::kOwnerRoundOpen, A::kFollow,
           "another replica drives the job and opened a round"),
      stay(idle, E::kRoundCapReached, A::kFinishJob, "the job used all its rounds"),
      stay(idle, E::kWantsRound, A::kOpen,
           "the job runs here: a round opens in its tenant's turn once enough clients are free"),

      // Every round of the owner's.
      go(kOwnerRound, E::kShuttingDown, P::kConcluding, A::kConclude,
         "the coordinator stops: the round commits if it may, and fails otherwise"),
      go(kOwnerRound, E::kSteppedDown, P::kIdle, A::kDrop,
         "another replica drives the job now: the round is forgotten here, unwritten"),

      // A secure round's key stages.
      go(kKeyStages, E::kFailing, P::kConcluding, A::kFail,
         "the job stopped, or too few clients are left: the round fails"),
      go(phases({P::kAdvertiseKeys}), E::kStageClosed, P::kShareKeys, A::kNone,
         "the key lists are out (to every replica first)"),
      go(phases({P::kShareKeys}), E::kStageClosed, P::kMaskedInput, A::kNone,
         "the forwarded shares are out (to every replica first)"),
      stay(kKeyStages, E::kStageDue, A::kCloseStage,
           "every client answered the stage, or its deadline passed"),

      // A round that admits updates (or masked inputs).
      go(kAdmitting, E::kFailing, P::kClosingAdmission, A::kCloseAdmission,
         "the job stopped, or the secure round failed: admission closes, and the round fails"),
      go(kAdmitting, E::kDue, P::kClosingAdmission, A::kCloseAdmission,
         "K updates in, or the deadline passed: admission closes"),
      go(kAdmitting, E::kFilledElsewhere, P::kClosingAdmission, A::kCloseAdmission,
         "the replicas admitted K updates between them: admission closes"),
      go(phases({P::kMaskedInput}), E::kInputsComplete, P::kClosingAdmission, A::kCloseAdmission,
         "every client that shared its keys sent its masked input (or, a cohort's, "
         "stage_seconds passed)"),
      stay(phases({P::kOpen}), E::kCohortDue, A::kOpenCohort,
           "a secure job's buffer holds K updates reported ready: their cohort's secure round "
           "opens"),
      go(phases({P::kOpen}), E::kCohortOpened, P::kAdvertiseKeys, A::kNone,
         "the cohort's secure round opened: its members advertise their keys"),
      stay(phases({P::kOpen}), E::kTaskDeadline, A::kExpire,
           "a buffer's task passed its deadline: it is dropped"),
      stay(phases({P::kOpen}), E::kSlotsFree, A::kRefill,
           "a buffer has free slots: clients are picked for them in their tenants' turn"),

      go(phases({P::kClosingAdmission}), E::kAdmissionClosed, P::kGathering, A::kNone,
         "admission is closed everywhere: the partial aggregates come in"),
      stay(phases({P::kClosingAdmission}), E::kPending, A::kCloseAdmission,
           "the store could not close admission yet: tried again"),

      // Gathering the replicas' partial aggregates.
      go(phases({P::kGathering}), E::kFailing, P::kConcluding, A::kFail,
         "the round fails: no partial is waited for"),
      stay(phases({P::kGathering}), E::kMaskedPartialsIn, A::kCloseInputs,
           "secure: the masked partials are in (or lease_s passed): they are merged, and the "
           "unmask requests go out"),
      go(phases({P::kGathering}), E::kInputsClosed, P::kUnmask, A::kNone,
         "the survivors are asked for what removes the masks"),
      stay(phases({P::kGathering, P::kUnmask}), E::kEvaluationPending, A::kNone,
           "waits: whether the previous model reached the target decides whether this round "
           "may commit"),
      go(phases({P::kGathering}), E::kPartialsIn, P::kConcluding, A::kConclude,
         "every replica holding admitted updates wrote its partial"),
      go(phases({P::kGathering}), E::kWaitedOut, P::kConcluding, A::kConclude,
         "lease_s passed since admission closed: the updates of replicas without a partial are "
         "lost"),

      go(phases({P::kUnmask}), E::kFailing, P::kConcluding, A::kFail,
         "the job stopped, or too few survivors answered: the round fails"),
      go(phases({P::kUnmask}), E::kUnmaskDue, P::kConcluding, A::kConclude,
         "every survivor answered, or the unmask deadline passed: the masks are removed"),

      // The conclusion and its answer.
      go(phases({P::kConcluding, P::kResolving}), E::kCommitted, P::kIdle, A::kNone,
         "the round and its model are durable: the model is the job's"),
      go(phases({P::kConcluding, P::kResolving}), E::kRoundFailed, P::kIdle, A::kNone,
         "the round's failure is recorded"),
      go(phases({P::kConcluding, P::kResolving}), E::kFenced, P::kIdle, A::kNone,
         "the store refused this coordinator's epoch: it steps down"),
      go(phases({P::kConcluding}), E::kOutcomeLost, P::kResolving, A::kNone,
         "the store's answer was lost: the round is read back, never guessed"),
      go(phases({P::kResolving}), E::kResolvedOpen, P::kConcluding, A::kNone,
         "the store holds the round open: the same conclusion is written again"),
      stay(phases({P::kResolving}), E::kPending, A::kReadBack,
           "the round is read back from the store"),
      stay(phases({P::kConcluding}), E::kPending, A::kWriteConclusion,
           "the conclusion kept since its answer was lost is written again"),

      // A copy of another replica's round.
      go(kFollower, E::kShuttingDown, P::kIdle, A::kDrop, "the coordinator stops"),
      go(kFollower, E::kOwnerConcluded, P::kIdle, A::kDrop,
         "the owner concluded the round: the copy is forgotten"),
      go(phases({P::kFollowing}), E::kOwnerClosed, P::kHandingOver, A::kWritePartial,
         "the owner closed admission: the copy's partial aggregate is written"),
      stay(phases({P::kFollowing}), E::kOwnerReplanned, A::kFollow,
           "the owner handed out more of its buffer's tasks: the copy hands them out too"),
      go(phases({P::kHandingOver}), E::kPartialWritten, P::kIdle, A::kNone,
         "the partial is in the store: the owner merges it"),
      go(phases({P::kHandingOver}), E::kMaskedPartialWritten, P::kRelaying, A::kNone,
         "the masked partial is in the store: the copy relays the unmask stage"),
      stay(phases({P::kHandingOver}), E::kPending, A::kWritePartial,
           "an upload is still being folded, or the store was away: written again"),
  };
}

}  // namespace

Phases phases(std::initializer_list<Phase> list) {
  Phases out;
  for (Phase p : list) out.set(static_cast<size_t>(p));
  return out;
}

const char* phase_name(Phase phase) {
  switch (phase) {
    case P::kIdle:
      return "idle";
    case P::kOpen:
      return "open";
    case P::kAdvertiseKeys:
      return "advertise_keys";
    case P::kShareKeys:
      return "share_keys";
    case P::kMaskedInput:
      return "masked_input";
    case P::kClosingAdmission:
      return "closing_admission";
    case P::kGathering:
      return "gathering";
    case P::kUnmask:
      return "unmask";
    case P::kConcluding:
      return "concluding";
    case P::kResolving:
      return "resolving";
    case P::kFollowing:
      return "following";
    case P::kHandingOver:
      return "handing_over";
    case P::kRelaying:
      return "relaying";
  }
  return "";
}

const char* event_name(Event event) {
  switch (event) {
    case E::kOpened:
      return "opened";
    case E::kOpenedSecure:
      return "opened_secure";
    case E::kFollowed:
      return "followed";
    case E::kCohortOpened:
      return "cohort_opened";
    case E::kStageClosed:
      return "stage_closed";
    case E::kAdmissionClosed:
      return "admission_closed";
    case E::kInputsClosed:
      return "inputs_closed";
    case E::kCommitted:
      return "committed";
    case E::kRoundFailed:
      return "round_failed";
    case E::kOutcomeLost:
      return "outcome_lost";
    case E::kResolvedOpen:
      return "resolved_open";
    case E::kPartialWritten:
      return "partial_written";
    case E::kMaskedPartialWritten:
      return "masked_partial_written";
    case E::kFenced:
      return "fenced";
    case E::kSteppedDown:
      return "stepped_down";
    case E::kFailing:
      return "failing";
    case E::kEvaluationPending:
      return "evaluation_pending";
    case E::kStageDue:
      return "stage_due";
    case E::kDue:
      return "due";
    case E::kFilledElsewhere:
      return "filled_elsewhere";
    case E::kInputsComplete:
      return "inputs_complete";
    case E::kCohortDue:
      return "cohort_due";
    case E::kTaskDeadline:
      return "task_deadline";
    case E::kSlotsFree:
      return "slots_free";
    case E::kPartialsIn:
      return "partials_in";
    case E::kWaitedOut:
      return "waited_out";
    case E::kMaskedPartialsIn:
      return "masked_partials_in";
    case E::kUnmaskDue:
      return "unmask_due";
    case E::kRoundCapReached:
      return "round_cap_reached";
    case E::kWantsRound:
      return "wants_round";
    case E::kOwnerRoundOpen:
      return "owner_round_open";
    case E::kOwnerClosed:
      return "owner_closed";
    case E::kOwnerReplanned:
      return "owner_replanned";
    case E::kOwnerConcluded:
      return "owner_concluded";
    case E::kShuttingDown:
      return "shutting_down";
    case E::kPending:
      return "pending";
  }
  return "";
}

const char* action_name(Action action) {
  switch (action) {
    case A::kNone:
      return "none";
    case A::kOpen:
      return "open";
    case A::kFinishJob:
      return "finish_job";
    case A::kFollow:
      return "follow";
    case A::kCloseStage:
      return "close_stage";
    case A::kCloseAdmission:
      return "close_admission";
    case A::kOpenCohort:
      return "open_cohort";
    case A::kExpire:
      return "expire";
    case A::kRefill:
      return "refill";
    case A::kCloseInputs:
      return "close_inputs";
    case A::kConclude:
      return "conclude";
    case A::kFail:
      return "fail";
    case A::kReadBack:
      return "read_back";
    case A::kWriteConclusion:
      return "write_conclusion";
    case A::kDrop:
      return "drop";
    case A::kWritePartial:
      return "write_partial";
  }
  return "";
}

const std::vector<Transition>& transitions() {
  static const std::vector<Transition> kTransitions = make_transitions();
  return kTransitions;
}

std::optional<Step> step(Phase phase, const Events& events) {
  for (const Transition& t : transitions()) {
    if (!t.from.test(static_cast<size_t>(phase)) || !events.test(static_cast<size_t>(t.on))) {
      continue;
    }
    return Step{t.stays ? phase : t.to, t.on, t.action, t.why};
  }
  return std::nullopt;
}

Events events_of(Phase phase, const Facts& f) {
  Events e;
  auto set = [&e](Event event, bool on) {
    if (on) e.set(static_cast<size_t>(event));
  };
  const bool stopped = f.job == JobState::kCancelled || f.job == JobState::kFinished;
  const bool settled = !f.uploads_in_flight;
  // A replica that stepped down retries nothing of its round: it only waits to forget it.
  set(E::kPending, f.owned || !kOwnerRound.test(static_cast<size_t>(phase)));
  set(E::kShuttingDown, f.shutting_down && phase != P::kConcluding && phase != P::kResolving);
  if (phase == P::kIdle) {
    set(E::kOwnerRoundOpen, !f.owned && f.owner_round_open);
    set(E::kRoundCapReached, f.owned && f.job == JobState::kRunning && f.round_cap_reached);
    const bool runs = f.job == JobState::kRunning || (f.job == JobState::kPaused && f.asynchronous);
    set(E::kWantsRound, f.owned && runs && !f.round_cap_reached && !f.shutting_down);
    return e;
  }
  if (kFollower.test(static_cast<size_t>(phase))) {
    // A replica that acquired the job failed the round it copied (replica/ownership.h).
    set(E::kOwnerConcluded, (f.owner_concluded || f.owned) && settled);
    set(E::kOwnerClosed, f.owner_closed);
    set(E::kOwnerReplanned, f.owner_replanned);
    return e;
  }
  set(E::kSteppedDown, !f.owned && settled);
  // A round stops admitting at once; it is concluded as failed once no upload is in flight.
  const bool failing = f.failing || stopped || (f.secure && f.secure_failed);
  set(E::kFailing, failing && (kAdmitting.test(static_cast<size_t>(phase)) || settled));
  set(E::kEvaluationPending, f.evaluation_pending);
  set(E::kStageDue, f.secure && f.stage_due);
  set(E::kDue, f.due && settled);
  set(E::kFilledElsewhere, f.filled_elsewhere);
  set(E::kInputsComplete, f.secure && f.inputs_complete && settled);
  set(E::kCohortDue, f.secure && f.buffered && f.cohort_due);
  set(E::kTaskDeadline, f.buffered && f.task_deadline_passed);
  set(E::kSlotsFree, f.buffered && f.slots_free && f.job == JobState::kRunning);
  set(E::kPartialsIn, !f.secure && f.partials_in && settled);
  set(E::kWaitedOut, !f.secure && f.waited_out && settled);
  set(E::kMaskedPartialsIn, f.secure && (f.partials_in || f.waited_out) && settled);
  set(E::kUnmaskDue, f.secure && f.unmask_due);
  return e;
}

std::string transition_table_markdown() {
  std::string out =
      "| from | on | to | action | why |\n"
      "|---|---|---|---|---|\n";
  for (const Transition& t : transitions()) {
    std::string from;
    for (size_t p = 0; p < kPhaseCount; ++p) {
      if (!t.from.test(p)) continue;
      if (!from.empty()) from += ", ";
      from += phase_name(static_cast<Phase>(p));
    }
    out += "| " + from + " | " + event_name(t.on) + " | " +
           (t.stays ? std::string("(stays)") : std::string(phase_name(t.to))) + " | " +
           action_name(t.action) + " | " + t.why + " |\n";
  }
  return out;
}

}  // namespace fedcase::rounds
