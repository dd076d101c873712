#include "rounds/round.h"

#include <doctest/doctest.h>

#include "tests/rounds/uploads.h"

namespace fedcase::rounds {
namespace {

std::shared_ptr<RoundAggregate> make_aggregate() {
  auto aggregator = aggregation::make_aggregator(aggregation::AggregatorConfig{}, 2);
  REQUIRE(aggregator.ok());
  return std::make_shared<RoundAggregate>(std::move(aggregator).value());
}

// The tasks of clients 1 to `count`.
std::vector<scheduling::ClientTask> tasks_of(size_t count) {
  std::vector<scheduling::ClientTask> tasks(count);
  for (ClientId id = 1; id <= count; ++id) tasks[id - 1].client = id;
  return tasks;
}

// Round 3 of a job: clients 1, 2 and 3 invited, K = 2, open at t = 100, deadline t = 160.
Round make_round() { return Round({3, 2, "", 100, 160, 2, 7}, tasks_of(3), make_aggregate()); }

// Buffer 3 of an asynchronous job: K = 2, clients 1 to `clients` hold tasks due at t = 160.
Round make_buffer(size_t clients) {
  Round::Spec spec{3, 2, "", 100, 160, 2, 7};
  spec.buffered = true;
  return Round(spec, tasks_of(clients), make_aggregate());
}

// An update of `samples` samples with mean loss 1 and mean squared loss 4.
void fold(Round& round, ClientId client, double at, float value, uint64_t samples) {
  ProfileChange change =
      testing::upload(round, client, at, value, testing::report_of(samples, 1, 4));
  CHECK(change.kind == ProfileChange::Kind::kCompleted);
  CHECK(change.client == client);
  CHECK(change.report.round == 3);
}

TEST_CASE("admission refuses, in order: closed, not invited, already uploaded, filled, late") {
  Round round = make_round();
  CHECK(round.admission(9, 110) == Admission::kNotInvited);
  CHECK(round.check_admission(9, 110).code() == Code::kPermissionDenied);
  CHECK(round.admission(1, 170) == Admission::kPastDeadline);
  CHECK(round.check_admission(1, 170).code() == Code::kConflict);
  CHECK(round.admission(1, 110) == Admission::kWanted);

  REQUIRE(round.reserve(1, 110).ok());
  CHECK(round.admission(1, 111) == Admission::kAlreadyUploaded);  // in flight counts
  REQUIRE(round.reserve(2, 112).ok());
  CHECK(round.admission(3, 113) == Admission::kHeld);                  // two places held for K = 2
  CHECK(round.reserve(3, 113).status().code() == Code::kUnavailable);  // retry shortly
  round.release(2);  // a failed fold frees its place
  CHECK(round.admission(3, 113) == Admission::kWanted);

  round.close();
  CHECK(round.admission(3, 114) == Admission::kClosed);
  CHECK(round.admission(9, 114) == Admission::kClosed);
  CHECK(std::string(admission_reason(Admission::kFilled)) == "round filled");
  CHECK(std::string(admission_reason(Admission::kHeld)) == "places held");
}

TEST_CASE("a round is due when filled or past its deadline, never with a fold in flight") {
  Round round = make_round();
  CHECK_FALSE(round.due(150));
  CHECK(round.due(160));  // deadline
  fold(round, 1, 120, 1, 10);
  CHECK_FALSE(round.due(130));
  auto in_flight = round.reserve(2, 130);
  REQUIRE(in_flight.ok());
  CHECK_FALSE(round.due(200));  // past the deadline, but client 2 is being folded
  const float delta[2] = {3, 3};
  REQUIRE((*in_flight)->add(delta, 2, 30).ok());
  round.accept(2, testing::report_of(30, 1, 4), 131);
  CHECK(round.filled());
  CHECK(round.admission(3, 131) == Admission::kFilled);  // accepted: final
  CHECK(round.check_admission(3, 131).code() == Code::kConflict);
  CHECK(round.due(131));
  CHECK(round.accepted() == 2);

  auto mean = round.aggregate()->result();
  REQUIRE(mean.ok());
  CHECK((*mean)[0] == doctest::Approx((1 * 10 + 3 * 30) / 40.0));  // weighted by samples
}

TEST_CASE("a buffer that filled or closed tells its tasks in flight to retry: they carry over") {
  Round buffer = make_buffer(3);
  fold(buffer, 1, 110, 1, 10);
  fold(buffer, 2, 111, 1, 10);
  CHECK(buffer.filled());
  CHECK(buffer.admission(3, 112) == Admission::kHeld);  // the next buffer takes it
  CHECK(buffer.check_admission(3, 112).code() == Code::kUnavailable);
  CHECK(buffer.admission(1, 112) == Admission::kAlreadyUploaded);
  CHECK(buffer.admission(9, 112) == Admission::kNotInvited);
  buffer.close();
  CHECK(buffer.admission(3, 113) == Admission::kHeld);
  CHECK(buffer.admission(1, 113) == Admission::kClosed);
  CHECK(buffer.admission(9, 113) == Admission::kClosed);
}

TEST_CASE("a buffer's ready updates form a cohort; the others wait for the next; members retrain") {
  Round buffer = make_buffer(4);
  CHECK(buffer.in_flight_count() == 4);
  REQUIRE(buffer.report_ready(2, 110).ok());
  CHECK(buffer.report_ready(2, 111).code() == Code::kConflict);  // once
  CHECK(buffer.report_ready(9, 111).code() == Code::kPermissionDenied);
  CHECK(buffer.report_ready(4, 170).code() == Code::kConflict);  // past its task's deadline
  REQUIRE(buffer.report_ready(1, 112).ok());
  REQUIRE(buffer.report_ready(3, 113).ok());
  CHECK(buffer.ready() == std::vector<ClientId>{2, 1, 3});
  CHECK(buffer.in_flight_count() == 1);  // the ready ones train no more
  CHECK(buffer.admission(2, 114) == Admission::kReady);
  CHECK(buffer.reserve(2, 114).status().code() == Code::kConflict);  // it goes masked, in a cohort
  CHECK(std::string(admission_reason(Admission::kReady)) == "reported ready");

  buffer.open_cohort({2, 1}, 115);
  CHECK(buffer.cohort_opened_at() == 115);
  CHECK(buffer.ready() == std::vector<ClientId>{3});
  // The members' inputs are wanted whatever their deadlines, in the buffer's own round; the
  // others wait for the next cohort, and may still report for it.
  CHECK(buffer.admission(2, 200) == Admission::kWanted);
  CHECK(buffer.check_task_round(2, 3).ok());
  CHECK(buffer.admission(3, 116) == Admission::kReady);
  CHECK(buffer.admission(4, 116) == Admission::kHeld);
  REQUIRE(buffer.report_ready(4, 117).ok());
  CHECK(buffer.next_deadline() == 160);  // the members' tasks do not expire
  CHECK(buffer.expire(150).empty());
  fold(buffer, 2, 118, 1, 10);  // member 2's input; member 1's never comes

  // Committed: member 2 counted; member 1 carries over to train again (its update is never
  // masked twice), the ready 3 and 4 still ready.
  std::map<ClientId, bool> carried;
  for (const Round::Assignment& a : buffer.in_flight(/*committed=*/true)) {
    carried[a.task.client] = a.ready;
  }
  CHECK(carried == std::map<ClientId, bool>{{1, false}, {3, true}, {4, true}});
  // Failed: member 2's update counted for nothing (and its sum may have been revealed): it
  // trains again too.
  std::vector<Round::Assignment> after_failure = buffer.in_flight(/*committed=*/false);
  CHECK(after_failure.size() == 4);
  Round::Spec next_spec{4, 2, "", 120, 180, 2, 7};
  next_spec.buffered = true;
  Round next(next_spec, std::move(after_failure), make_aggregate());
  CHECK(next.ready() == std::vector<ClientId>{3, 4});
  CHECK(next.admission(2, 120) == Admission::kWanted);
  CHECK(next.admission(3, 120) == Admission::kReady);
  CHECK(next.in_flight_count() == 2);
}

TEST_CASE("durations count from the first task fetch, or from the open") {
  Round round = make_round();
  round.hand_out(1, 105);
  round.hand_out(1, 140);  // a later fetch does not restart the clock
  round.hand_out(9, 105);  // not invited: ignored
  fold(round, 1, 125, 1, 10);
  fold(round, 2, 130, 1, 10);
  const auto& accepted = round.accepted_updates();
  CHECK(accepted.at(1).duration_s == doctest::Approx(20));
  CHECK(accepted.at(2).duration_s == doctest::Approx(30));
  CHECK(accepted.at(1).utility == doctest::Approx(scheduling::statistical_utility(10, 10, 40)));
}

TEST_CASE("invitees hold their task until accepted or the round closes") {
  Round round = make_round();
  CHECK(round.holds_task(1));
  CHECK_FALSE(round.holds_task(9));
  fold(round, 1, 120, 1, 10);
  CHECK_FALSE(round.holds_task(1));
  CHECK(round.holds_task(2));
  round.close();
  CHECK_FALSE(round.holds_task(2));
  auto changes = round.selection_changes();
  REQUIRE(changes.size() == 3);
  CHECK(changes[0].kind == ProfileChange::Kind::kSelected);
  CHECK(changes[2].client == 3);
  CHECK(changes[2].round == 3);
}

TEST_CASE("client-seconds: each invitee from the open until its update or the close") {
  Round round = make_round();  // open at 100, clients 1, 2, 3
  fold(round, 1, 110, 1, 10);
  fold(round, 2, 130, 1, 10);
  CHECK(round.client_seconds(150) == doctest::Approx(10 + 30 + 50));
  CHECK(round.client_seconds(120) == doctest::Approx(10 + 20 + 20));  // 2 was still working
  CHECK(round.expected_client_seconds() == 0);  // these tasks carry no estimate
}

TEST_CASE("profile changes fold into profiles") {
  scheduling::ClientProfile p;
  p.id = 1;
  const scheduling::ProfileParams params;
  REQUIRE(apply_profile_change({ProfileChange::Kind::kSelected, 1, 4, {}, {}}, p, params).ok());
  CHECK(p.last_selected_round == 4);
  CHECK(p.times_selected == 1);
  scheduling::RoundReport r = testing::report_of(20, 1, 4);
  r.round = 4;
  REQUIRE(apply_profile_change({ProfileChange::Kind::kCompleted, 1, 4, r, {}}, p, params).ok());
  CHECK(p.completions == 1);
  CHECK(p.utility == doctest::Approx(scheduling::statistical_utility(20, 20, 80)));
  REQUIRE(
      apply_profile_change({ProfileChange::Kind::kMissedDeadline, 1, 5, {}, {}}, p, params).ok());
  CHECK(p.missed_deadlines == 1);
  REQUIRE(
      apply_profile_change({ProfileChange::Kind::kNotKept, 1, 5, {}, {5, 30, 12}}, p, params).ok());
  CHECK(p.feedback_round == 5);
  CHECK(p.feedback_utility == 30);
  CHECK(p.duration_floor_s == 12);
  CHECK(p.utility_round == 4);  // its own last report stays
  scheduling::RoundReport bad = r;
  bad.samples = 0;
  CHECK_FALSE(
      apply_profile_change({ProfileChange::Kind::kCompleted, 1, 6, bad, {}}, p, params).ok());
  CHECK(p.completions == 1);
}

TEST_CASE("another replica rebuilds a round from its plan, with the same tasks and terms") {
  std::vector<scheduling::ClientTask> tasks(2);
  tasks[0].client = 4;
  tasks[0].samples = 300;
  tasks[0].unique_samples = 250;
  tasks[0].local_steps = 10;
  tasks[0].batch_size = 30;
  tasks[0].learning_rate = 0.05;
  tasks[0].momentum = 0.9;
  tasks[0].weight_decay = 1e-4;
  tasks[0].prox_mu = 0.01;
  tasks[0].sampling = protocol::Sampling::kImportance;
  tasks[0].cache = {protocol::CachePolicy::kImportance, 1 << 20, 2.5,
                    protocol::Repetition::kAdaptive};
  tasks[0].expected_duration_s = 12.25;
  tasks[1].client = 9;
  auto aggregate = [] {
    auto made = aggregation::make_aggregator(aggregation::AggregatorConfig{}, 2);
    REQUIRE(made.ok());
    return std::make_shared<RoundAggregate>(std::move(made).value());
  };
  const Round owner({5, 4, "sum4", 100, 160, 2, 8}, tasks, aggregate());
  // The plan travels as JSON text through the store.
  const nlohmann::json plan = nlohmann::json::parse(round_plan_json(owner).dump());
  auto copy = round_from_plan({5, 4, "", 100, 160, 2, 0}, plan, aggregate());
  REQUIRE_MESSAGE(copy.ok(), copy.status().to_string());
  CHECK(copy->index() == 5);
  CHECK(copy->base_checksum() == "sum4");
  CHECK(copy->available() == 8);
  CHECK(copy->target() == 2);
  CHECK(copy->invited() == owner.invited());
  for (ClientId client : {ClientId(4), ClientId(9)}) {
    const scheduling::ClientTask& want = *owner.task_for(client);
    const scheduling::ClientTask& got = *copy->task_for(client);
    CHECK(got.samples == want.samples);
    CHECK(got.unique_samples == want.unique_samples);
    CHECK(got.local_steps == want.local_steps);
    CHECK(got.batch_size == want.batch_size);
    CHECK(got.learning_rate == want.learning_rate);
    CHECK(got.momentum == want.momentum);
    CHECK(got.weight_decay == want.weight_decay);
    CHECK(got.prox_mu == want.prox_mu);
    CHECK(got.sampling == want.sampling);
    CHECK(got.cache == want.cache);
    CHECK(got.expected_duration_s == want.expected_duration_s);
    CHECK(copy->terms_for(client)->deadline == owner.terms_for(client)->deadline);
    CHECK(copy->terms_for(client)->base_checksum == "sum4");
  }
  // A plan that is not one is refused, never half-read.
  for (const char* broken :
       {R"({})", R"({"format": 2, "base_checksum": "", "available": 1, "tasks": []})",
        R"({"format": 1, "base_checksum": "x", "available": 1, "tasks": []})",
        R"({"format": 1, "base_checksum": "x", "available": 1, "tasks": [{"client": 1}]})"}) {
    CAPTURE(broken);
    CHECK(round_from_plan({5, 4, "", 100, 160, 2, 0}, nlohmann::json::parse(broken), aggregate())
              .status()
              .code() == Code::kInvalidArgument);
  }
  nlohmann::json bad_sampling = plan;
  bad_sampling["tasks"][0]["sampling"] = "psychic";
  CHECK(round_from_plan({5, 4, "", 100, 160, 2, 0}, bad_sampling, aggregate()).status().code() ==
        Code::kInvalidArgument);
  Round::Spec buffer{5, 4, "", 100, 160, 2, 0, /*buffered=*/true};
  CHECK(round_from_plan(buffer, plan, aggregate()).status().code() == Code::kInvalidArgument);
}

}  // namespace
}  // namespace fedcase::rounds
