#include "rounds/job_runtime.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "tests/rounds/uploads.h"

namespace fedcase::rounds {
namespace {

using nlohmann::json;

// A job over a two-parameter model, K = 2, with a fixed 60 s deadline.
JobConfig config_of(json patch = json::object()) {
  json j = {{"name", "t"},
            {"model", "mlp"},
            {"seed", 5},
            {"rounds", 10},
            {"clients_per_round", 2},
            {"min_clients", 2},
            {"min_updates", 1},
            {"selection", {{"policy", "random"}, {"overcommit", 1.5}}},
            {"training", {{"deadline", {{"mode", "fixed"}, {"seconds", 60}}}}}};
  j.merge_patch(patch);
  auto c = parse_job_config(j);
  REQUIRE_MESSAGE(c.ok(), c.status().to_string());
  return *c;
}

std::shared_ptr<const GlobalModel> initial_model() {
  ModelLayout layout{{{"w", {2}}}};
  return make_global_model(0, layout, {1.0f, -1.0f});
}

JobParts parts_of(const JobConfig& config) {
  auto parts = make_job_parts(config);
  REQUIRE(parts.ok());
  return std::move(parts).value();
}

std::unique_ptr<JobRuntime> make_job(const JobConfig& config) {
  auto job = JobRuntime::create(parts_of(config), initial_model(), json::object(), "");
  REQUIRE(job.ok());
  return std::move(job).value();
}

struct Fleet {
  std::vector<scheduling::ClientProfile> profiles;
  std::vector<PoolClient> pool(size_t available) const {
    std::vector<PoolClient> out;
    for (size_t i = 0; i < profiles.size(); ++i) out.push_back({&profiles[i], i < available});
    return out;
  }
};

Fleet fleet_of(size_t n) {
  Fleet f;
  for (ClientId id = 1; id <= n; ++id) {
    scheduling::ClientProfile p;
    p.id = id;
    p.dataset_size = 100;
    f.profiles.push_back(p);
  }
  return f;
}

// An update of `samples` samples with mean loss 0.5 and mean squared loss 0.25.
void upload(Round& round, ClientId client, double at, float value, uint64_t samples) {
  testing::upload(round, client, at, value, testing::report_of(samples, 0.5, 0.25));
}

TEST_CASE("a round opens only with min_clients available, and invites K x overcommit") {
  auto job = make_job(config_of());
  Fleet fleet = fleet_of(6);
  auto none = job->open_round(fleet.pool(1), 1000);
  REQUIRE(none.ok());
  CHECK_FALSE(none->has_value());
  CHECK(job->last_round() == 0);  // no index consumed

  auto opened = job->open_round(fleet.pool(6), 1000);
  REQUIRE(opened.ok());
  REQUIRE(opened->has_value());
  Round& round = **opened;
  CHECK(round.index() == 1);
  CHECK(round.base_version() == 0);
  CHECK(round.tasks().size() == 3);  // ceil(2 x 1.5)
  CHECK(round.deadline() == doctest::Approx(1060));
  CHECK(round.available() == 6);
  CHECK(job->last_round() == 1);
  for (const auto& task : round.tasks()) CHECK(task.client <= 6);
}

TEST_CASE("only available clients are invited") {
  auto job = make_job(config_of());
  Fleet fleet = fleet_of(10);
  auto opened = job->open_round(fleet.pool(3), 1000);
  REQUIRE(opened.ok());
  REQUIRE(opened->has_value());
  for (const auto& task : (*opened)->tasks()) CHECK(task.client <= 3);
}

TEST_CASE("a filled round commits the next model: version = round index, FedAvg step") {
  auto job = make_job(config_of());
  Fleet fleet = fleet_of(4);
  auto opened = job->open_round(fleet.pool(4), 1000);
  REQUIRE(opened->has_value());
  Round& round = **opened;
  const ClientId a = round.tasks()[0].client, b = round.tasks()[1].client,
                 late = round.tasks()[2].client;
  round.hand_out(a, 1001);
  round.hand_out(late, 1000);
  upload(round, a, 1011, 1.0f, 10);
  upload(round, b, 1020, 4.0f, 30);
  CHECK(round.admission(late, 1021) == Admission::kFilled);
  REQUIRE(round.due(1020));

  Conclusion c = job->conclude(round, 1020);
  REQUIRE(c.state == RoundState::kCommitted);
  REQUIRE(c.model);
  CHECK(c.model->version == 1);
  // x + mean delta: (1 x 10 + 4 x 30) / 40 = 3.25
  CHECK(c.model->params[0] == doctest::Approx(1.0 + 3.25));
  CHECK(c.model->params[1] == doctest::Approx(-1.0 + 3.25));
  CHECK(c.model->checksum == blob_checksum(c.model->blob));
  CHECK(c.metrics["updates"] == 2);
  CHECK(c.metrics["invited"] == 3);
  CHECK(c.metrics["samples"] == 40);
  CHECK(c.metrics["train_loss"].get<double>() == doctest::Approx(0.5));
  CHECK(c.metrics["dropped"][std::to_string(late)] == "not needed");
  CHECK(c.metrics["model_version"] == 1);
  // Nobody missed a deadline; the invitee not needed gets the selection feedback: the mean
  // utility of the kept updates, and the 20 s its task had run (fetched at the open). b never
  // fetched its task in this test, but it was kept.
  REQUIRE(c.profile_changes.size() == 1);
  const ProfileChange& feedback = c.profile_changes[0];
  CHECK(feedback.kind == ProfileChange::Kind::kNotKept);
  CHECK(feedback.client == late);
  CHECK(feedback.not_kept.round == 1);
  const auto& kept = round.accepted_updates();
  CHECK(feedback.not_kept.mean_utility ==
        doctest::Approx((kept.at(a).utility + kept.at(b).utility) / 2));
  CHECK(feedback.not_kept.ran_s == doctest::Approx(20));
  CHECK(c.invited.size() == 3);
  CHECK(round.closed());
  CHECK(job->model()->version == 0);  // nothing is current before adopt()
  job->adopt(c);
  CHECK(job->model()->version == 1);
  CHECK(job->model()->params[0] == doctest::Approx(4.25));
}

TEST_CASE("an Oort round closes at the K-th update; the others are explored from its feedback") {
  auto job = make_job(config_of({{"selection", {{"policy", "oort"}}}}));
  Fleet fleet = fleet_of(3);
  fleet.profiles[0].dataset_size = 5;  // fewer samples than its task's 10
  auto opened = job->open_round(fleet.pool(3), 1000);
  REQUIRE(opened->has_value());
  Round& round = **opened;
  REQUIRE(round.tasks().size() == 3);
  for (ClientId id = 1; id <= 3; ++id) round.hand_out(id, 1002);
  // Distinct samples: min(10, 5) for client 1, with a mean squared loss of 0.25.
  auto change = testing::upload(round, 1, 1010, 1.0f, testing::report_of(10, 0.5, 0.25));
  CHECK(round.accepted_updates().at(1).utility == doctest::Approx(5 * 0.5));
  REQUIRE(apply_profile_change(change, fleet.profiles[0], {}).ok());
  CHECK(fleet.profiles[0].utility == doctest::Approx(5 * 0.5));
  upload(round, 2, 1030, 1.0f, 10);
  CHECK(round.due(1030));  // the second of K = 2 arrivals closes it
  CHECK(round.admission(3, 1031) == Admission::kFilled);
  Conclusion c = job->conclude(round, 1030);
  REQUIRE(c.state == RoundState::kCommitted);
  REQUIRE(c.profile_changes.size() == 1);
  const ProfileChange& feedback = c.profile_changes[0];
  CHECK(feedback.client == 3);
  CHECK(feedback.not_kept.mean_utility == doctest::Approx((2.5 + 5.0) / 2));
  CHECK(feedback.not_kept.ran_s == doctest::Approx(28));  // fetched at 1002, closed at 1030
  REQUIRE(apply_profile_change(feedback, fleet.profiles[2], {}).ok());
  CHECK(fleet.profiles[2].feedback_round == 1);
  CHECK(fleet.profiles[2].duration_floor_s == doctest::Approx(28));
}

TEST_CASE("too few updates at the deadline fail the round; invitees missed it") {
  auto job = make_job(config_of({{"min_updates", 2}}));
  Fleet fleet = fleet_of(3);
  auto opened = job->open_round(fleet.pool(3), 1000);
  REQUIRE(opened->has_value());
  Round& round = **opened;
  for (const auto& task : round.tasks()) round.hand_out(task.client, 1000);
  upload(round, round.tasks()[0].client, 1010, 1.0f, 10);
  CHECK_FALSE(round.due(1050));
  CHECK(round.due(1060));
  Conclusion c = job->conclude(round, 1060);
  CHECK(c.state == RoundState::kFailed);
  CHECK(c.failure.find("1 updates, 2 needed") != std::string::npos);
  CHECK_FALSE(c.model);
  // Each of the two others missed the deadline and gets the selection feedback: the kept
  // update's utility, and the 60 s the round lasted.
  CHECK(c.profile_changes.size() == 4);
  const double utility = round.accepted_updates().begin()->second.utility;
  for (const auto& change : c.profile_changes) {
    CHECK(change.client != round.tasks()[0].client);
    if (change.kind == ProfileChange::Kind::kNotKept) {
      CHECK(change.not_kept.mean_utility == doctest::Approx(utility));
      CHECK(change.not_kept.ran_s == doctest::Approx(60));
    } else {
      CHECK(change.kind == ProfileChange::Kind::kMissedDeadline);
    }
  }
  job->adopt(c);  // a failed round changes no model
  CHECK(job->model()->version == 0);
  // Its index is used: the next round is 2, trained from version 0.
  auto next = job->open_round(fleet.pool(3), 1100);
  REQUIRE(next->has_value());
  CHECK((*next)->index() == 2);
  CHECK((*next)->base_version() == 0);
}

TEST_CASE("a round stopped early blames nobody for a missed deadline") {
  auto job = make_job(config_of());
  Fleet fleet = fleet_of(3);
  auto opened = job->open_round(fleet.pool(3), 1000);
  REQUIRE(opened->has_value());
  for (const auto& task : (**opened).tasks()) (**opened).hand_out(task.client, 1000);
  upload(**opened, (**opened).tasks()[0].client, 1005, 1.0f, 10);
  Conclusion c = job->fail(**opened, 1010, "job cancelled");
  CHECK(c.state == RoundState::kFailed);
  CHECK(c.metrics["failure"] == "job cancelled");
  // No missed deadline, and no selection feedback: a stopped round teaches the policy nothing
  // about its invitees (FedScale gives feedback only for the stragglers of completed rounds).
  CHECK(c.profile_changes.empty());
  for (const auto& [client, why] : c.metrics["dropped"].items()) CHECK(why == "round stopped");
}

TEST_CASE("no selection feedback for invitees that never fetched, or when nothing was kept") {
  auto job = make_job(config_of({{"min_updates", 2}}));
  Fleet fleet = fleet_of(3);
  auto opened = job->open_round(fleet.pool(3), 1000);
  REQUIRE(opened->has_value());
  Round& round = **opened;
  const ClientId kept = round.tasks()[0].client, fetched = round.tasks()[1].client;
  round.hand_out(fetched, 1000);
  upload(round, kept, 1010, 1.0f, 10);
  Conclusion c = job->conclude(round, 1060);  // past the deadline, one update of two
  size_t feedback = 0;
  for (const auto& change : c.profile_changes) {
    if (change.kind != ProfileChange::Kind::kNotKept) continue;
    ++feedback;
    CHECK(change.client == fetched);  // the invitee that never fetched gets none
  }
  CHECK(feedback == 1);

  auto empty = job->open_round(fleet.pool(3), 1100);
  REQUIRE(empty->has_value());
  for (const auto& task : (**empty).tasks()) (**empty).hand_out(task.client, 1100);
  Conclusion none = job->conclude(**empty, 1160);  // nobody uploaded: nothing to learn from
  for (const auto& change : none.profile_changes) {
    CHECK(change.kind == ProfileChange::Kind::kMissedDeadline);
  }
}

TEST_CASE("a conclusion holds the sample-weighted federated evaluation of the accepted updates") {
  auto job = make_job(config_of({{"model", "blob"}, {"clients_per_round", 3}, {"min_clients", 3}}));
  Fleet fleet = fleet_of(4);
  auto opened = job->open_round(fleet.pool(4), 1000);
  REQUIRE(opened->has_value());
  Round& round = **opened;
  REQUIRE(round.tasks().size() >= 4);  // ceil(3 x 1.5), at most the 4 available
  const ClientId a = round.tasks()[0].client, b = round.tasks()[1].client,
                 silent = round.tasks()[2].client, refused = round.tasks()[3].client;
  const auto report = testing::report_of(10, 0.5, 0.25);
  testing::upload(round, a, 1010, 1.0f, report,
                  protocol::EvalReport{0, 10, 1.0, {{"accuracy", 0.5}}});
  testing::upload(round, b, 1011, 1.0f, report,
                  protocol::EvalReport{0, 30, 2.0, {{"accuracy", 0.9}, {"f1", 0.4}}});
  // An upload refused after its reservation counts for nothing; one without a report is fine.
  REQUIRE(round.reserve(refused, 1012).ok());
  round.release(refused);
  testing::upload(round, silent, 1013, 1.0f, report);

  Conclusion c = job->conclude(round, 1013);
  REQUIRE(c.state == RoundState::kCommitted);
  const json& e = c.metrics["federated_evaluation"];
  CHECK(e["model_version"] == 0);  // the round's base model
  CHECK(e["clients"] == 2);
  CHECK(e["samples"] == 40);
  CHECK(e["loss"].get<double>() == doctest::Approx(1.75));                // (10 + 60) / 40
  CHECK(e["metrics"]["accuracy"].get<double>() == doctest::Approx(0.8));  // (5 + 27) / 40
  CHECK(e["metrics"]["f1"].get<double>() == doctest::Approx(0.4));
  CHECK(recorded_accuracy(c.metrics, "federated") == doctest::Approx(0.8));

  // A round without any report records no federated evaluation.
  job->adopt(c);
  auto next = job->open_round(fleet.pool(4), 1100);
  REQUIRE(next->has_value());
  upload(**next, (**next).tasks()[0].client, 1110, 1.0f, 10);
  CHECK_FALSE(job->conclude(**next, 1160).metrics.contains("federated_evaluation"));
}

TEST_CASE("a non-finite aggregate fails the round instead of committing it") {
  auto job = make_job(config_of());
  Fleet fleet = fleet_of(3);
  auto opened = job->open_round(fleet.pool(3), 1000);
  REQUIRE(opened->has_value());
  Round& round = **opened;
  // Finite updates whose float sum overflows.
  upload(round, round.tasks()[0].client, 1010, 3e38f, 1);
  upload(round, round.tasks()[1].client, 1011, 3e38f, 1);
  Conclusion c = job->conclude(round, 1011);
  CHECK(c.state == RoundState::kFailed);
  CHECK(c.failure.find("non-finite") != std::string::npos);
  CHECK(job->model()->version == 0);
}

TEST_CASE("abandon undoes the optimizer step of a conclusion that could not be stored") {
  JobConfig config = config_of({{"server_optimizer", {{"name", "fedavgm"}, {"momentum", 0.9}}}});
  auto job = make_job(config);
  auto twin = make_job(config);
  Fleet fleet = fleet_of(2);
  for (auto* runtime : {job.get(), twin.get()}) {
    auto opened = runtime->open_round(fleet.pool(2), 1000);
    REQUIRE(opened->has_value());
    Round& round = **opened;
    upload(round, round.tasks()[0].client, 1001, 1.0f, 10);
    upload(round, round.tasks()[1].client, 1002, 1.0f, 10);
    Conclusion c = runtime->conclude(round, 1002);
    REQUIRE(c.state == RoundState::kCommitted);
    if (runtime == job.get()) {
      runtime->abandon(c);  // as if the store refused it
    } else {
      runtime->adopt(c);
    }
  }
  // The next committed step of `job` equals the first step of a fresh job: no momentum kept.
  auto fresh = make_job(config);
  std::vector<float> steps[2];
  int i = 0;
  for (auto* runtime : {job.get(), fresh.get()}) {
    auto opened = runtime->open_round(fleet.pool(2), 2000);
    REQUIRE(opened->has_value());
    Round& round = **opened;
    upload(round, round.tasks()[0].client, 2001, 1.0f, 10);
    upload(round, round.tasks()[1].client, 2002, 1.0f, 10);
    Conclusion c = runtime->conclude(round, 2002);
    REQUIRE(c.state == RoundState::kCommitted);
    steps[i++] = c.model->params;
  }
  CHECK(steps[0] == steps[1]);
}

TEST_CASE("DP rounds get a reproducible seed per round and account their privacy") {
  JobConfig config =
      config_of({{"selection", {{"policy", "random"}, {"overcommit", 1.0}}},
                 {"aggregation", {{"clip_norm", 1.0}, {"dp_noise_multiplier", 1.0}}}});
  auto a = make_job(config);
  auto b = make_job(config);
  CHECK(a->dp_seed(3) == config.seed * 1000003 + 3);
  CHECK(a->dp_seed(3) != a->dp_seed(4));
  // With a secret, the seeds are no function of the job config alone.
  auto secret =
      JobRuntime::create(parts_of(config), initial_model(), json::object(), "", 0, 0x5eed);
  auto other = JobRuntime::create(parts_of(config), initial_model(), json::object(), "", 0, 0x5eee);
  REQUIRE(secret.ok());
  REQUIRE(other.ok());
  CHECK((*secret)->dp_seed(3) != a->dp_seed(3));
  CHECK((*secret)->dp_seed(3) != (*other)->dp_seed(3));
  CHECK((*secret)->dp_seed(3) != (*secret)->dp_seed(4));
  Fleet fleet = fleet_of(4);
  std::vector<float> models[2];
  int i = 0;
  for (auto* job : {a.get(), b.get()}) {
    auto opened = job->open_round(fleet.pool(4), 1000);
    REQUIRE(opened->has_value());
    Round& round = **opened;
    upload(round, round.tasks()[0].client, 1001, 0.5f, 10);
    upload(round, round.tasks()[1].client, 1002, 0.5f, 10);
    Conclusion c = job->conclude(round, 1002);
    REQUIRE(c.state == RoundState::kCommitted);
    CHECK(c.metrics["privacy"]["q"].get<double>() == doctest::Approx(0.5));  // 2 of 4 sampled
    CHECK(c.metrics["privacy"]["epsilon"].get<double>() > 0);
    CHECK(job->privacy().rounds() == 0);  // spent only once adopted
    job->adopt(c);
    CHECK(job->privacy().rounds() == 1);
    models[i++] = c.model->params;
  }
  CHECK(models[0] == models[1]);  // same seed, same round: the same noise

  // Recovery replays the privacy recorded with committed rounds.
  auto restarted = make_job(config);
  REQUIRE(restarted->replay_privacy({{"privacy", {{"q", 0.5}, {"noise_multiplier", 1.0}}}}).ok());
  CHECK(restarted->privacy().rounds() == 1);
  CHECK(restarted->replay_privacy({{"privacy", {{"q", "x"}}}}).code() == Code::kInvalidArgument);
}

TEST_CASE("a runtime resumed from saved state chooses as the original does") {
  JobConfig config = config_of({{"selection", {{"policy", "oort"}}}});
  auto job = make_job(config);
  Fleet fleet = fleet_of(8);
  auto opened = job->open_round(fleet.pool(8), 1000);
  REQUIRE(opened->has_value());
  upload(**opened, (*opened)->tasks()[0].client, 1005, 1.0f, 10);
  upload(**opened, (*opened)->tasks()[1].client, 1006, 1.0f, 10);
  Conclusion c = job->conclude(**opened, 1006);
  REQUIRE(c.state == RoundState::kCommitted);
  job->adopt(c);
  auto resumed =
      JobRuntime::create(parts_of(config), c.model, c.policy_state, c.optimizer_state, 1);
  REQUIRE(resumed.ok());
  auto x = job->open_round(fleet.pool(8), 2000);
  auto y = (*resumed)->open_round(fleet.pool(8), 2000);
  REQUIRE(x->has_value());
  REQUIRE(y->has_value());
  CHECK((*x)->index() == (*y)->index());
  CHECK((*x)->invited() == (*y)->invited());
  CHECK((*y)->base_version() == 1);
}

}  // namespace
}  // namespace fedcase::rounds
