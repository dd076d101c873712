// The round's life cycle (rounds/lifecycle.h) as data: every transition of the table, every
// mode's path from facts to actions and outcomes, the priorities between events, and the docs'
// table made from the code's.

#include "rounds/lifecycle.h"

#include <doctest/doctest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <vector>

namespace fedcase::rounds {
namespace {

using A = Action;
using E = Event;
using P = Phase;

Events only(std::initializer_list<Event> list) {
  Events e;
  for (Event event : list) e.set(static_cast<size_t>(event));
  return e;
}

// What the driver does: steps until an action is to be carried out or the phase waits; the
// phases it went through and the action it stopped at.
struct Walk {
  std::vector<Phase> phases;
  Action action = A::kNone;
};
Walk walk(Phase phase, const Facts& f) {
  Walk w;
  for (int i = 0; i < 16; ++i) {
    std::optional<Step> s = step(phase, events_of(phase, f));
    if (!s) return w;
    const Phase from = phase;
    phase = s->to;
    w.phases.push_back(phase);
    if (s->action != A::kNone) {
      w.action = s->action;
      return w;
    }
    if (phase == from) return w;
  }
  FAIL("the life cycle did not settle");
  return w;
}

// An outcome's step (the driver steps an outcome alone).
Step outcome(Phase phase, Event e) {
  std::optional<Step> s = step(phase, only({e}));
  REQUIRE_MESSAGE(s.has_value(), "no transition from ", phase_name(phase), " on ", event_name(e));
  return *s;
}

TEST_CASE("each transition fires on its event alone, unless an earlier one of its phase does") {
  std::map<std::pair<Phase, Event>, const Transition*> first;
  for (const Transition& t : transitions()) {
    for (size_t p = 0; p < kPhaseCount; ++p) {
      if (t.from.test(p)) first.emplace(std::make_pair(static_cast<Phase>(p), t.on), &t);
    }
  }
  size_t checked = 0;
  for (const auto& [key, t] : first) {
    const auto [phase, event] = key;
    std::optional<Step> s = step(phase, only({event}));
    REQUIRE(s.has_value());
    CHECK_MESSAGE(s->to == (t->stays ? phase : t->to), phase_name(phase), " on ",
                  event_name(event));
    CHECK(s->action == t->action);
    CHECK(s->on == event);
    ++checked;
  }
  CHECK(checked >= transitions().size());
}

TEST_CASE("every phase is reached from idle, and every phase but idle can be left") {
  std::set<Phase> reached{P::kIdle};
  for (bool grew = true; grew;) {
    grew = false;
    for (const Transition& t : transitions()) {
      for (size_t p = 0; p < kPhaseCount; ++p) {
        if (t.from.test(p) && reached.count(static_cast<Phase>(p)) && !t.stays) {
          grew |= reached.insert(t.to).second;
        }
      }
    }
  }
  CHECK(reached.size() == kPhaseCount);
  for (size_t p = 1; p < kPhaseCount; ++p) {
    bool leaves = false;
    for (const Transition& t : transitions()) leaves |= t.from.test(p) && !t.stays;
    CHECK_MESSAGE(leaves, phase_name(static_cast<Phase>(p)), " is a dead end");
  }
}

TEST_CASE("a synchronous round: open, due, admission closed, gathered, committed") {
  Facts f;  // owned, running, a single coordinator: partials are always in
  f.partials_in = true;
  CHECK(walk(P::kIdle, f).action == A::kOpen);
  CHECK(outcome(P::kIdle, E::kOpened).to == P::kOpen);
  CHECK(walk(P::kOpen, f).action == A::kNone);  // not due: it waits
  f.due = true;
  Walk closing = walk(P::kOpen, f);
  CHECK(closing.phases.back() == P::kClosingAdmission);
  CHECK(closing.action == A::kCloseAdmission);
  CHECK(outcome(P::kClosingAdmission, E::kAdmissionClosed).to == P::kGathering);
  Walk concluding = walk(P::kGathering, f);
  CHECK(concluding.phases.back() == P::kConcluding);
  CHECK(concluding.action == A::kConclude);
  CHECK(outcome(P::kConcluding, E::kCommitted).to == P::kIdle);
  CHECK(outcome(P::kConcluding, E::kRoundFailed).to == P::kIdle);
}

TEST_CASE("a round due while an upload is being folded waits for it") {
  Facts f;
  f.due = true;
  f.uploads_in_flight = true;
  CHECK(walk(P::kOpen, f).action == A::kNone);
  f.uploads_in_flight = false;
  CHECK(walk(P::kOpen, f).action == A::kCloseAdmission);
}

TEST_CASE("a shared round closes when the replicas filled it, and waits for their partials") {
  Facts f;
  f.filled_elsewhere = true;
  CHECK(walk(P::kOpen, f).action == A::kCloseAdmission);
  f = Facts();
  CHECK(walk(P::kGathering, f).action == A::kNone);  // partials not in yet
  f.waited_out = true;
  CHECK(walk(P::kGathering, f).action == A::kConclude);
  f = Facts();
  f.partials_in = true;
  CHECK(walk(P::kGathering, f).action == A::kConclude);
}

TEST_CASE("a store that cannot close admission or be read back is tried again") {
  Facts f;
  CHECK(walk(P::kClosingAdmission, f).action == A::kCloseAdmission);
  CHECK(walk(P::kResolving, f).action == A::kReadBack);
}

TEST_CASE("an owner whose close of admission was fenced forgets the round once uploads settle") {
  Facts f;
  f.owned = false;  // it stepped down
  f.uploads_in_flight = true;
  CHECK(walk(P::kClosingAdmission, f).action == A::kNone);  // an upload is being folded into it
  f.uploads_in_flight = false;
  const Walk dropped = walk(P::kClosingAdmission, f);
  CHECK(dropped.action == A::kDrop);
  CHECK(dropped.phases.back() == P::kIdle);
}

TEST_CASE("a commit whose answer was lost is read back, written again, or settled") {
  Facts f;
  const Step lost = outcome(P::kConcluding, E::kOutcomeLost);
  CHECK(lost.to == P::kResolving);
  CHECK(walk(P::kResolving, f).action == A::kReadBack);
  CHECK(outcome(P::kResolving, E::kCommitted).to == P::kIdle);
  CHECK(outcome(P::kResolving, E::kRoundFailed).to == P::kIdle);
  CHECK(outcome(P::kResolving, E::kFenced).to == P::kIdle);
  const Step open = outcome(P::kResolving, E::kResolvedOpen);
  CHECK(open.to == P::kConcluding);
  CHECK(walk(P::kConcluding, f).action == A::kWriteConclusion);
  // Neither a stop, a step-down nor a shutdown leaves a conclusion unresolved.
  f.job = JobState::kCancelled;
  f.owned = false;
  f.shutting_down = true;
  CHECK(walk(P::kResolving, f).action == A::kReadBack);
}

TEST_CASE("a target job's round waits for the previous model's evaluation before it concludes") {
  Facts f;
  f.partials_in = true;
  f.evaluation_pending = true;
  CHECK(walk(P::kGathering, f).action == A::kNone);
  f.job = JobState::kFinished;  // the evaluation found the target reached: the round fails
  CHECK(walk(P::kGathering, f).action == A::kFail);
}

TEST_CASE("a stopped job's round stops admitting at once and fails once settled") {
  Facts f;
  f.job = JobState::kCancelled;
  f.uploads_in_flight = true;
  Walk stopping = walk(P::kOpen, f);
  CHECK(stopping.phases.back() == P::kClosingAdmission);
  CHECK(stopping.action == A::kCloseAdmission);
  CHECK(walk(P::kGathering, f).action == A::kNone);  // an upload is still being folded
  f.uploads_in_flight = false;
  CHECK(walk(P::kGathering, f).action == A::kFail);
  // A paused job's round runs to its end; no round opens for it.
  f = Facts();
  f.job = JobState::kPaused;
  f.due = true;
  CHECK(walk(P::kOpen, f).action == A::kCloseAdmission);
  CHECK(walk(P::kIdle, f).action == A::kNone);
}

TEST_CASE("a replica that stepped down forgets its round once no upload is in flight") {
  Facts f;
  f.owned = false;
  f.uploads_in_flight = true;
  for (Phase p : {P::kOpen, P::kMaskedInput, P::kGathering, P::kClosingAdmission}) {
    CHECK(walk(p, f).action == A::kNone);
  }
  f.uploads_in_flight = false;
  for (Phase p : {P::kOpen, P::kAdvertiseKeys, P::kShareKeys, P::kMaskedInput, P::kClosingAdmission,
                  P::kGathering, P::kUnmask}) {
    Walk w = walk(p, f);
    CHECK_MESSAGE(w.phases.back() == P::kIdle, phase_name(p));
    CHECK(w.action == A::kDrop);
  }
  // Not owned and idle: nothing opens; it follows the owner's round.
  CHECK(walk(P::kIdle, f).action == A::kNone);
  f.owner_round_open = true;
  CHECK(walk(P::kIdle, f).action == A::kFollow);
}

TEST_CASE("a secure round: key stages, masked inputs, masked partials, unmask, conclusion") {
  Facts f;
  f.secure = true;
  CHECK(outcome(P::kIdle, E::kOpenedSecure).to == P::kAdvertiseKeys);
  CHECK(walk(P::kAdvertiseKeys, f).action == A::kNone);
  f.stage_due = true;
  CHECK(walk(P::kAdvertiseKeys, f).action == A::kCloseStage);
  CHECK(outcome(P::kAdvertiseKeys, E::kStageClosed).to == P::kShareKeys);
  CHECK(walk(P::kShareKeys, f).action == A::kCloseStage);
  CHECK(outcome(P::kShareKeys, E::kStageClosed).to == P::kMaskedInput);
  f.stage_due = false;
  CHECK(walk(P::kMaskedInput, f).action == A::kNone);
  f.inputs_complete = true;
  CHECK(walk(P::kMaskedInput, f).action == A::kCloseAdmission);
  f.inputs_complete = false;
  f.partials_in = true;  // local: at once
  CHECK(walk(P::kGathering, f).action == A::kCloseInputs);
  CHECK(outcome(P::kGathering, E::kInputsClosed).to == P::kUnmask);
  CHECK(walk(P::kUnmask, f).action == A::kNone);
  f.unmask_due = true;
  CHECK(walk(P::kUnmask, f).action == A::kConclude);
  f.evaluation_pending = true;
  CHECK(walk(P::kUnmask, f).action == A::kNone);
}

TEST_CASE("a secure round that fails in any stage fails the round") {
  Facts f;
  f.secure = true;
  f.secure_failed = true;
  for (Phase p : {P::kAdvertiseKeys, P::kShareKeys, P::kGathering, P::kUnmask}) {
    CHECK_MESSAGE(walk(p, f).action == A::kFail, phase_name(p));
  }
  CHECK(walk(P::kMaskedInput, f).action == A::kCloseAdmission);
}

TEST_CASE("a buffer refills its free slots, drops late tasks, and concludes at K") {
  Facts f;
  f.buffered = true;
  f.asynchronous = true;
  f.slots_free = true;
  CHECK(walk(P::kOpen, f).action == A::kRefill);
  f.task_deadline_passed = true;
  CHECK(walk(P::kOpen, f).action == A::kExpire);  // before the refill
  f.task_deadline_passed = false;
  f.job = JobState::kPaused;  // a paused job hands out nothing
  CHECK(walk(P::kOpen, f).action == A::kNone);
  f.due = true;
  CHECK(walk(P::kOpen, f).action == A::kCloseAdmission);
  // Paused, the next buffer still opens: the tasks in flight deliver into it.
  CHECK(walk(P::kIdle, f).action == A::kOpen);
  f.asynchronous = false;
  CHECK(walk(P::kIdle, f).action == A::kNone);
}

TEST_CASE("a secure job's buffer opens a cohort at K ready updates, then runs its stages") {
  Facts f;
  f.secure = true;
  f.buffered = true;
  f.asynchronous = true;
  f.slots_free = true;
  CHECK(walk(P::kOpen, f).action == A::kRefill);
  f.cohort_due = true;
  CHECK(walk(P::kOpen, f).action == A::kOpenCohort);  // before the refill
  CHECK(outcome(P::kOpen, E::kCohortOpened).to == P::kAdvertiseKeys);
  // From there, a secure round's stages; a plain buffer never opens a cohort.
  f.stage_due = true;
  CHECK(walk(P::kAdvertiseKeys, f).action == A::kCloseStage);
  f.secure = false;
  CHECK(walk(P::kOpen, f).action == A::kRefill);
}

TEST_CASE("a follower copies the owner's round, hands over its partial, and relays unmasking") {
  Facts f;
  f.owned = false;
  f.owner_round_open = true;
  CHECK(walk(P::kIdle, f).action == A::kFollow);
  CHECK(outcome(P::kIdle, E::kFollowed).to == P::kFollowing);
  f = Facts();
  f.owned = false;
  CHECK(walk(P::kFollowing, f).action == A::kNone);
  f.owner_replanned = true;
  CHECK(walk(P::kFollowing, f).action == A::kFollow);
  f.owner_closed = true;
  Walk handing = walk(P::kFollowing, f);
  CHECK(handing.phases.back() == P::kHandingOver);
  CHECK(handing.action == A::kWritePartial);
  CHECK(walk(P::kHandingOver, f).action == A::kWritePartial);  // until written
  CHECK(outcome(P::kHandingOver, E::kPartialWritten).to == P::kIdle);
  CHECK(outcome(P::kHandingOver, E::kMaskedPartialWritten).to == P::kRelaying);
  f = Facts();
  f.owned = false;
  CHECK(walk(P::kRelaying, f).action == A::kNone);
  f.owner_concluded = true;
  for (Phase p : {P::kFollowing, P::kHandingOver, P::kRelaying}) {
    CHECK_MESSAGE(walk(p, f).action == A::kDrop, phase_name(p));
  }
  f.uploads_in_flight = true;  // a copy being folded into is not dropped under the upload
  CHECK(walk(P::kFollowing, f).action == A::kNone);
}

TEST_CASE("the job's round cap finishes it; a shutdown ends every round here") {
  Facts f;
  f.round_cap_reached = true;
  CHECK(walk(P::kIdle, f).action == A::kFinishJob);
  f = Facts();
  f.shutting_down = true;
  CHECK(walk(P::kIdle, f).action == A::kNone);  // nothing opens
  for (Phase p : {P::kOpen, P::kAdvertiseKeys, P::kMaskedInput, P::kGathering, P::kUnmask}) {
    Walk w = walk(p, f);
    CHECK_MESSAGE(w.phases.back() == P::kConcluding, phase_name(p));
    CHECK(w.action == A::kConclude);
  }
  for (Phase p : {P::kFollowing, P::kHandingOver, P::kRelaying}) {
    CHECK(walk(p, f).action == A::kDrop);
  }
}

TEST_CASE("docs/architecture.md shows the code's transition table") {
  std::ifstream in(std::string(FEDCASE_SOURCE_DIR) + "/docs/architecture.md");
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string text = doc.str();
  const std::string begin = "<!-- lifecycle table: begin -->\n",
                    end = "<!-- lifecycle table: end -->";
  const size_t a = text.find(begin), b = text.find(end);
  REQUIRE_MESSAGE(a != std::string::npos, "docs/architecture.md has no lifecycle table markers");
  REQUIRE(b != std::string::npos);
  const std::string shown = text.substr(a + begin.size(), b - a - begin.size());
  CHECK_MESSAGE(shown == transition_table_markdown(),
                "docs/architecture.md's table is not the code's; put this between its markers:\n",
                transition_table_markdown());
}

}  // namespace
}  // namespace fedcase::rounds
