#include "rounds/job_runtime.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <set>

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
  CHECK(c.model->params()[0] == doctest::Approx(1.0 + 3.25));
  CHECK(c.model->params()[1] == doctest::Approx(-1.0 + 3.25));
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
  CHECK(job->model()->params()[0] == doctest::Approx(4.25));
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
  Conclusion c = job->fail(**opened, 1010, "job cancelled", /*goes_on=*/false);
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
    steps[i++] = c.model->params();
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
    models[i++] = c.model->params();
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

// ---- asynchronous jobs (FedBuff buffers) ----

JobConfig async_config(json async = json::object(), json patch = json::object()) {
  json j = {{"mode", "async"}, {"async", async}};
  j.merge_patch(patch);
  return config_of(j);
}

// Hands out tasks for every free slot of `buffer` over `pool` at `now`; the clients invited.
std::vector<ClientId> refill(JobRuntime& job, Round& buffer, const std::vector<PoolClient>& pool,
                             double now) {
  std::set<ClientId> excluded;
  for (const auto& task : buffer.tasks()) excluded.insert(task.client);
  auto slots = job.plan_slots(buffer.index(), job.free_slots(buffer), excluded, pool, now);
  REQUIRE(slots.ok());
  std::vector<ClientId> invited;
  for (Round::Assignment& a : *slots) {
    invited.push_back(a.task.client);
    buffer.assign(a.task, a.terms);
  }
  return invited;
}

// Folds `client`'s update of `value` in each parameter with its staleness discount.
void upload_async(JobRuntime& job, Round& buffer, ClientId client, double at, float value,
                  uint64_t samples) {
  auto aggregate = buffer.reserve(client, at);
  REQUIRE_MESSAGE(aggregate.ok(), aggregate.status().to_string());
  const float delta[2] = {value, value};
  REQUIRE((*aggregate)->add(delta, 2, double(samples), job.discount(buffer, client)).ok());
  buffer.accept(client, testing::report_of(samples, 0.5, 0.25), at);
}

TEST_CASE("staleness weights and the async section") {
  AsyncConfig polynomial;  // FedBuff's (1 + tau)^-0.5
  CHECK(staleness_weight(polynomial, 0) == 1.0);
  CHECK(staleness_weight(polynomial, 3) == doctest::Approx(0.5));
  CHECK(staleness_weight(polynomial, 8) == doctest::Approx(1.0 / 3));
  polynomial.staleness_exponent = 1;
  CHECK(staleness_weight(polynomial, 1) == doctest::Approx(0.5));
  AsyncConfig constant;
  constant.staleness = "constant";
  CHECK(staleness_weight(constant, 7) == 1.0);

  const JobConfig defaults = async_config();
  CHECK(defaults.asynchronous());
  CHECK(defaults.async.concurrency == 8);  // 4 x K
  CHECK(defaults.async.max_staleness == 10);
  auto refused = [](json j) {
    j["name"] = "t";
    auto c = parse_job_config(j);
    REQUIRE_FALSE(c.ok());
    return c.status().message();
  };
  CHECK(refused({{"mode", "batch"}}).find("job.mode") != std::string::npos);
  CHECK(refused({{"async", {{"concurrency", 4}}}}).find("goes with") != std::string::npos);
  CHECK(refused({{"mode", "async"}, {"async", {{"staleness", "linear"}}}}).find("staleness") !=
        std::string::npos);
  CHECK(refused({{"mode", "async"}, {"async", {{"concurrency", 0}}}}).find("concurrency") !=
        std::string::npos);
  CHECK(refused({{"mode", "async"}, {"aggregation", {{"rule", "median"}}}}).find("fedavg") !=
        std::string::npos);
}

TEST_CASE("a buffer fills its slots, flushes every K updates by staleness, and carries tasks") {
  // K = 2, three clients training at once, s(tau) = 1 / (1 + tau).
  auto job = make_job(async_config({{"concurrency", 3}, {"staleness_exponent", 1.0}}));
  Fleet fleet = fleet_of(6);
  auto opened = job->open_round(fleet.pool(6), 1000);
  REQUIRE(opened.ok());
  REQUIRE(opened->has_value());
  Round& first = **opened;
  CHECK(first.buffered());
  CHECK(first.index() == 1);
  CHECK(first.tasks().empty());  // the caller fills the slots
  CHECK(job->free_slots(first) == 3);
  const std::vector<ClientId> a = refill(*job, first, fleet.pool(6), 1000);
  REQUIRE(a.size() == 3);
  CHECK(job->free_slots(first) == 0);
  CHECK(first.selection_changes().size() == 3);
  CHECK(first.terms_for(a[0])->round == 1);
  CHECK(first.terms_for(a[0])->base_version == 0);
  CHECK(first.next_deadline() == doctest::Approx(1060));

  upload_async(*job, first, a[0], 1010, 1.0f, 10);
  CHECK_FALSE(first.due(1010));
  CHECK(job->free_slots(first) == 1);  // a slot freed; the client may not train twice a buffer
  const std::vector<ClientId> b = refill(*job, first, fleet.pool(6), 1011);
  REQUIRE(b.size() == 1);
  CHECK(b[0] != a[0]);
  upload_async(*job, first, a[1], 1012, 1.0f, 30);
  CHECK(first.due(1012));
  Conclusion c1 = job->conclude(first, 1012);
  REQUIRE(c1.state == RoundState::kCommitted);
  // Both fresh: the sample-weighted mean of 1 and 1 moves [1, -1] to [2, 0].
  CHECK(c1.model->params() == std::vector<float>{2.0f, 0.0f});
  CHECK(c1.metrics["staleness"] == json{{"0", 2}});
  CHECK(c1.metrics["in_flight"] == 2);  // a[2] and b[0] carry over
  CHECK(c1.metrics["invited"] == 4);
  job->adopt(c1);

  auto next = job->open_round(fleet.pool(6), 1013);
  REQUIRE(next.ok());
  REQUIRE(next->has_value());
  Round& second = **next;
  CHECK(second.index() == 2);
  CHECK(second.base_version() == 1);
  CHECK(second.tasks().size() == 2);
  CHECK(second.staleness(a[2]) == 1);  // trains from version 0, joins version 1
  CHECK(second.holds_task_of(a[2], 1));
  CHECK(second.check_task_round(a[2], 1).ok());
  CHECK(second.check_task_round(a[2], 2).code() == Code::kConflict);
  CHECK(job->discount(second, a[2]) == doctest::Approx(0.5));
  const std::vector<ClientId> fresh = refill(*job, second, fleet.pool(6), 1013);
  REQUIRE(fresh.size() == 1);
  CHECK(second.terms_for(fresh[0])->base_version == 1);
  // A stale update counts half: (10 x 0.5 x 2 + 30 x 1 x 4) / 40 = 3.25.
  upload_async(*job, second, a[2], 1020, 2.0f, 10);
  upload_async(*job, second, fresh[0], 1021, 4.0f, 30);
  Conclusion c2 = job->conclude(second, 1021);
  REQUIRE(c2.state == RoundState::kCommitted);
  CHECK(c2.model->params()[0] == doctest::Approx(2 + 3.25));
  CHECK(c2.model->params()[1] == doctest::Approx(0 + 3.25));
  CHECK(c2.metrics["staleness"] == json{{"0", 1}, {"1", 1}});
  CHECK(c2.metrics["mean_staleness"] == 0.5);
  CHECK(second.accepted_updates().at(a[2]).staleness == 1);
}

TEST_CASE("a task further behind than max_staleness is dropped and its update refused") {
  auto job = make_job(async_config({{"concurrency", 3}, {"max_staleness", 0}}));
  Fleet fleet = fleet_of(6);
  auto opened = job->open_round(fleet.pool(6), 1000);
  const std::vector<ClientId> a = refill(*job, **opened, fleet.pool(6), 1000);
  upload_async(*job, **opened, a[0], 1001, 1.0f, 10);
  upload_async(*job, **opened, a[1], 1002, 1.0f, 10);
  Conclusion c = job->conclude(**opened, 1002);
  REQUIRE(c.state == RoundState::kCommitted);
  job->adopt(c);
  auto next = job->open_round(fleet.pool(6), 1003);
  REQUIRE(next->has_value());
  Round& buffer = **next;
  CHECK(buffer.task_for(a[2]) == nullptr);
  CHECK(buffer.dropped().at(a[2]) == "too stale");
  CHECK(buffer.admission(a[2], 1004) == Admission::kTooStale);
  const Status refused = buffer.check_admission(a[2], 1004);
  CHECK(refused.code() == Code::kConflict);
  CHECK(refused.message().find("max_staleness") != std::string::npos);
  CHECK(job->free_slots(buffer) == 3);
}

TEST_CASE("a task past its deadline frees its slot and counts as a missed deadline") {
  auto job = make_job(async_config({{"concurrency", 2}}));
  Fleet fleet = fleet_of(4);
  auto opened = job->open_round(fleet.pool(4), 1000);
  Round& buffer = **opened;
  const std::vector<ClientId> a = refill(*job, buffer, fleet.pool(4), 1000);
  REQUIRE(a.size() == 2);
  CHECK(job->expire(buffer, 1059).empty());
  const std::vector<ProfileChange> missed = job->expire(buffer, 1060);
  REQUIRE(missed.size() == 2);
  CHECK(missed[0].kind == ProfileChange::Kind::kMissedDeadline);
  CHECK(job->free_slots(buffer) == 2);
  CHECK(buffer.admission(a[0], 1061) == Admission::kPastDeadline);
  CHECK_FALSE(buffer.next_deadline().has_value());
  // The dropped tasks' time is charged until their deadline.
  CHECK(buffer.client_seconds(1100) == doctest::Approx(120));
}

TEST_CASE("a flush with a non-finite result fails, keeps the model and carries its tasks") {
  auto job = make_job(async_config({{"concurrency", 3}}));
  Fleet fleet = fleet_of(6);
  auto opened = job->open_round(fleet.pool(6), 1000);
  Round& buffer = **opened;
  const std::vector<ClientId> a = refill(*job, buffer, fleet.pool(6), 1000);
  upload_async(*job, buffer, a[0], 1001, 3e38f, 10);
  upload_async(*job, buffer, a[1], 1002, 3e38f, 30);
  Conclusion c = job->conclude(buffer, 1002);
  CHECK(c.state == RoundState::kFailed);
  CHECK(c.failure.find("non-finite") != std::string::npos);
  job->adopt(c);  // nothing to adopt
  CHECK(job->model()->version == 0);
  auto next = job->open_round(fleet.pool(6), 1003);
  REQUIRE(next->has_value());
  CHECK((*next)->index() == 2);
  CHECK((*next)->base_version() == 0);
  CHECK((*next)->task_for(a[2]) != nullptr);  // still training, still wanted
  CHECK((*next)->staleness(a[2]) == 0);
}

TEST_CASE("the server optimizer steps the parameters; buffers become the clients' mean") {
  // A parameter, a running variance and a batch count; FedAdam would act on all three alike.
  const ModelLayout layout{{{"w", {1}, TensorKind::kParameter},
                            {"bn.running_var", {1}, TensorKind::kFloatBuffer},
                            {"bn.num_batches_tracked", {}, TensorKind::kIntegerBuffer}}};
  auto adam = aggregation::make_server_optimizer({{"name", "fedadam"}, {"lr", 0.1}});
  REQUIRE(adam.ok());
  std::vector<float> model = {1.0f, 2.0f, 10.0f};
  const UpdateLayout whole = update_layout({}, layout);
  REQUIRE(step_model(**adam, whole, {}, model, {0.5f, 0.25f, 2.6f}).ok());
  CHECK(model[0] > 1.0f);
  CHECK(model[1] == 2.25f);  // the clients' weighted mean running variance
  CHECK(model[2] == 13.0f);  // 12.6 batches: a count stays whole
  // The optimizer's state has the parameters' size only.
  auto fresh = aggregation::make_server_optimizer({{"name", "fedadam"}, {"lr", 0.1}});
  std::vector<float> weights = {1.0f};
  REQUIRE((*fresh)->step(weights, {0.5f}).ok());
  CHECK(weights[0] == doctest::Approx(model[0]));
  CHECK(step_model(**adam, whole, {}, model, {0.5f}).code() == Code::kInvalidArgument);
  // Buffers the devices keep (here the module "bn") keep the model's values.
  REQUIRE(step_model(**adam, whole, {"bn"}, model, {0.5f, 0.25f, 2.6f}).ok());
  CHECK(model[1] == 2.25f);
  CHECK(model[2] == 13.0f);
}

TEST_CASE("a job that trains part of a model steps those tensors and leaves the others") {
  const ModelLayout layout{{{"backbone.weight", {2}},
                            {"head.weight", {2}},
                            {"head.bias", {1}},
                            {"bn.running_mean", {1}, TensorKind::kFloatBuffer}}};
  const UpdateLayout head = update_layout({"head"}, layout);
  CHECK_FALSE(head.whole);
  REQUIRE(head.layout.tensors.size() == 2);
  CHECK(head.layout.tensors[0].name == "head.weight");
  CHECK(head.slices[0].offset == 2);
  CHECK(head.slices[1].offset == 4);
  CHECK(update_layout({"head.bias", "bn"}, layout).layout.element_count() == 2);
  CHECK(update_layout({}, layout).whole);
  auto plain = aggregation::make_server_optimizer({{"name", "fedavg"}});
  std::vector<float> model = {1, 2, 3, 4, 5, 6};
  REQUIRE(step_model(**plain, head, {}, model, {0.5f, -1, 2}).ok());
  CHECK(model == std::vector<float>{1, 2, 3.5f, 3, 7, 6});
  // Buffers the update carries move to the clients' mean; the rest stays.
  const UpdateLayout with_bn = update_layout({"head.bias", "bn"}, layout);
  REQUIRE(step_model(**plain, with_bn, {}, model, {1, 0.5f}).ok());
  CHECK(model == std::vector<float>{1, 2, 3.5f, 3, 8, 6.5f});
}

}  // namespace
}  // namespace fedcase::rounds
