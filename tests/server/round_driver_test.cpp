// The round driver over the life cycle (server/core/rounds/round_driver.h), driven by hand on
// an in-memory store (storage/memory_store.h) with a replication whose observations the test
// sets (the fixed points of server/core/rounds/replication.h): every mode's path through the
// phases, the store's writes at each step, and what a lost answer or a step-down does. No
// HTTP, no torch, no disk: each case runs in milliseconds.

#include "server/core/rounds/round_driver.h"

#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/blob.h"
#include "storage/memory_store.h"
#include "tests/rounds/uploads.h"
#include "tests/support/failing_store.h"

namespace fedcase::server {
namespace {

using nlohmann::json;
using rounds::Phase;

// A replication whose readings the test sets; its writes go to the store, as a replica's do.
class ScriptedReplication final : public RoundReplication {
 public:
  ScriptedReplication(storage::Store& store, bool shared) : store_(store), shared_(shared) {}

  bool shared() const override { return shared_; }
  const std::string& replica() const override { return name_; }
  void wake() override {}
  Status open(storage::RoundRecord record, const rounds::Round& round) override {
    calls.push_back("open " + std::to_string(round.index()));
    if (shared_) {
      record.target = round.target();
      record.plan = rounds::round_plan_json(round);
    }
    return store_.open_round(record);
  }
  Status replan(JobId, RoundIndex round, const json&, storage::Epoch) override {
    calls.push_back("replan " + std::to_string(round));
    return ok_status();
  }
  Result<bool> admit(storage::UpdateRecord update) override {
    update.replica = shared_ ? name_ : std::string();
    return store_.admit_update(update);
  }
  Status withdraw(JobId job, RoundIndex round, ClientId client) override {
    return store_.withdraw_update(job, round, client, shared_ ? name_ : std::string());
  }
  Result<bool> delivered_elsewhere(JobId, RoundIndex, ClientId) override { return false; }
  Status close(JobId job, RoundIndex round, storage::Epoch epoch) override {
    calls.push_back("close " + std::to_string(round));
    return shared_ ? store_.close_admission(job, round, epoch) : ok_status();
  }
  Contributions contributions(JobId, RoundIndex, std::optional<double> closed_at, double) override {
    Contributions c = seen;
    c.partials_in = c.partials_in || !shared_;
    if (!closed_at) c.partials_in = c.waited_out = false;
    return c;
  }
  Result<Gathered> gather(JobId, RoundIndex round) override {
    calls.push_back("gather " + std::to_string(round));
    return Gathered{};
  }
  Status put_partial(storage::PartialRecord partial) override {
    calls.push_back("put_partial " + std::to_string(partial.round) + " " +
                    std::to_string(partial.updates));
    return partial_answer;
  }
  Status publish_stage(JobId, RoundIndex, const char*,
                       const std::map<ClientId, std::string>&) override {
    return ok_status();
  }
  Status relay(JobId, RoundIndex, const char*, ClientId, const std::string&) override {
    return ok_status();
  }
  Result<std::map<ClientId, std::string>> relayed(JobId, RoundIndex, const char*) override {
    return std::map<ClientId, std::string>();
  }
  Result<std::map<ClientId, std::string>> published(JobId, RoundIndex, const char*) override {
    return std::map<ClientId, std::string>();
  }
  Result<Followed> followed(JobId, double) override { return Followed{owner_round, 0}; }
  uint64_t wakes() const override { return 0; }
  std::optional<double> next_reading(double) const override { return std::nullopt; }

  // What the test makes the store say.
  Contributions seen;
  std::optional<storage::RoundRecord> owner_round;
  Status partial_answer;
  std::vector<std::string> calls;

 private:
  storage::Store& store_;
  const bool shared_;
  const std::string name_ = "r1";
};

// An evaluator for jobs scored by their clients: it is never asked.
class NoEvaluator final : public ModelEvaluator {
 public:
  void submit(const EvaluatedModel&, std::vector<float>, Done done) override {
    done(internal_error("not evaluated here"));
  }
};

json job_config(json patch = json::object()) {
  json j = {{"name", "unit"},
            {"model", "blob"},
            {"loss", "mse"},
            {"rounds", 5},
            {"clients_per_round", 2},
            {"evaluation", {{"target", "federated"}}},
            {"selection", {{"policy", "random"}, {"overcommit", 1.0}}},
            {"training", {{"deadline", {{"mode", "fixed"}, {"seconds", 60}}}}}};
  j.merge_patch(patch);
  return j;
}

// A driver, its job table and registries on an in-memory store; `wrap` may wrap the store.
struct Rig {
  explicit Rig(bool shared = false, const std::function<std::unique_ptr<storage::Store>(
                                        std::unique_ptr<storage::Store>)>& wrap = {})
      : store(make_store(wrap)),
        clients(*store, scheduling::ProfileParams{}),
        tenants(*store),
        jobs(*store),
        secure(metrics, [] {}),
        replication(*store, shared),
        driver(jobs, clients, tenants, *store, replication, evaluator, notifier, secure, metrics,
               [this] { return now; }) {}

  static std::unique_ptr<storage::Store> make_store(
      const std::function<std::unique_ptr<storage::Store>(std::unique_ptr<storage::Store>)>& wrap) {
    auto opened = storage::open_memory_store();
    REQUIRE(opened.ok());
    return wrap ? wrap(std::move(opened).value()) : std::move(opened).value();
  }

  // A job of `config` with a two-parameter model, driven here when `owned`.
  JobEntry& add_job(const json& config = job_config(), bool owned = true) {
    auto parts = rounds::build_job(config);
    REQUIRE_MESSAGE(parts.ok(), parts.status().to_string());
    auto model = rounds::make_global_model(0, {{{"w", {2}}}}, {0.5f, -0.5f});
    storage::JobRecord record{0, "unit", config, JobState::kRunning, json::object(), now, 0};
    auto id = store->create_job(record, {0, 0, model->blob, model->checksum, "", now}, "");
    REQUIRE(id.ok());
    record.id = *id;
    auto job = make_job(record, std::move(parts).value(), model, nullptr, "", 0, {},
                        CoordinatorConfig{});
    REQUIRE(job.ok());
    job->status.owned = owned;
    JobEntry& entry = *job->entry;
    jobs.install(std::move(job).value());
    return entry;
  }

  std::vector<ClientId> add_clients(size_t n) {
    std::vector<ClientId> out;
    for (size_t i = 0; i < n; ++i) {
      protocol::Registration r;
      r.dataset_size = 100;
      auto registered = clients.register_client(r, now);
      REQUIRE(registered.ok());
      out.push_back(registered->id);
    }
    return out;
  }

  Phase phase(const JobEntry& job) {
    return jobs.read(job, [](const JobStatus& s) { return s.phase; });
  }
  RoundIndex round(const JobEntry& job) {
    return jobs.read(job, [](const JobStatus& s) { return s.round ? s.round->index() : 0; });
  }
  std::vector<ClientId> invitees(const JobEntry& job) {
    return jobs.read(job, [](const JobStatus& s) {
      std::vector<ClientId> out;
      if (s.round) {
        for (const auto& task : s.round->tasks()) out.push_back(task.client);
      }
      return out;
    });
  }
  // An update of `value` from `client`, admitted through the replication, folded and counted,
  // as the coordinator's upload does.
  void upload(JobEntry& job, ClientId client, float value) {
    const RoundIndex index = round(job);
    REQUIRE(replication.admit({job.id, index, client, {{"samples", 10}}, now}).ok());
    jobs.update(job, [&](JobStatus& s) {
      rounds::testing::upload(*s.round, client, now, value, rounds::testing::report_of(10, 1, 1));
    });
  }
  storage::RoundRecord stored(JobId job, RoundIndex index) {
    auto rounds = store->list_rounds(job);
    REQUIRE(rounds.ok());
    for (const auto& r : *rounds) {
      if (r.index == index) return r;
    }
    FAIL("no round " << index);
    return {};
  }

  double now = 1000;
  Metrics metrics;
  std::unique_ptr<storage::Store> store;
  ClientRegistry clients;
  TenantRegistry tenants;
  JobTable jobs;
  TaskNotifier notifier;
  SecureRounds secure;
  ScriptedReplication replication;
  NoEvaluator evaluator;
  RoundDriver driver;
};

TEST_CASE(
    "a single coordinator's round goes open, closing, gathering, concluding, idle in one tick") {
  Rig rig;
  rig.add_clients(2);
  JobEntry& job = rig.add_job();
  rig.driver.tick();
  CHECK(rig.phase(job) == Phase::kOpen);
  CHECK(rig.round(job) == 1);
  for (ClientId c : rig.invitees(job)) rig.upload(job, c, 0.25f);
  rig.driver.tick();  // due: closed, gathered at once, committed
  CHECK(rig.phase(job) == Phase::kIdle);
  CHECK(rig.stored(job.id, 1).state == RoundState::kCommitted);
  CHECK(rig.store->latest_model(job.id)->version == 1);
  CHECK(rig.replication.calls == std::vector<std::string>{"open 1", "close 1"});
  rig.driver.tick();  // the next round opens in the next tick
  CHECK(rig.round(job) == 2);
}

TEST_CASE("a shared round closes when the replicas filled it and concludes once partials are in") {
  Rig rig(/*shared=*/true);
  rig.add_clients(2);
  JobEntry& job = rig.add_job();
  rig.driver.tick();
  REQUIRE(rig.phase(job) == Phase::kOpen);
  rig.upload(job, rig.invitees(job)[0], 0.5f);  // one here; the other went to another replica
  rig.replication.seen.admitted = 2;
  rig.driver.tick();
  CHECK(rig.phase(job) == Phase::kGathering);
  CHECK_FALSE(rig.stored(job.id, 1).admitting);
  rig.driver.tick();  // the other replica's partial is not in
  CHECK(rig.phase(job) == Phase::kGathering);
  rig.replication.seen.waited_out = true;  // lease_s passed: its update is lost
  rig.driver.tick();
  CHECK(rig.phase(job) == Phase::kIdle);
  CHECK(rig.stored(job.id, 1).state == RoundState::kCommitted);
  CHECK(rig.stored(job.id, 1).metrics["updates"] == 1);
  CHECK(std::count(rig.replication.calls.begin(), rig.replication.calls.end(), "gather 1") == 1);
}

TEST_CASE("a commit whose answer was lost is read back, and adopted when it landed") {
  auto faults = std::make_shared<testing::StoreFaults>();
  Rig rig(false, [&](std::unique_ptr<storage::Store> s) {
    return testing::failing_store(std::move(s), faults);
  });
  rig.add_clients(2);
  JobEntry& job = rig.add_job();
  rig.driver.tick();
  for (ClientId c : rig.invitees(job)) rig.upload(job, c, 0.25f);
  faults->fail(testing::StoreMethod::kCommitRound, unavailable("the connection was lost"), 1,
               testing::Fault::kAfter);
  faults->fail(testing::StoreMethod::kListRounds, unavailable("the database is away"), 1);
  rig.driver.tick();  // the commit lands, its answer is lost, the first read-back fails
  CHECK(rig.phase(job) == Phase::kResolving);
  CHECK(rig.jobs.read(job, [](const JobStatus& s) { return s.model->version; }) == 0);
  rig.driver.tick();  // read back: committed at this coordinator's epoch
  CHECK(rig.phase(job) == Phase::kIdle);
  CHECK(rig.jobs.read(job, [](const JobStatus& s) { return s.model->version; }) == 1);
  CHECK(job.runtime->model()->checksum == rig.store->latest_model(job.id)->checksum);
}

TEST_CASE("a commit that did not land is written again, never decided twice") {
  auto faults = std::make_shared<testing::StoreFaults>();
  Rig rig(false, [&](std::unique_ptr<storage::Store> s) {
    return testing::failing_store(std::move(s), faults);
  });
  rig.add_clients(2);
  JobEntry& job =
      rig.add_job(job_config({{"server_optimizer", {{"name", "fedavgm"}, {"momentum", 0.9}}}}));
  rig.driver.tick();
  for (ClientId c : rig.invitees(job)) rig.upload(job, c, 0.25f);
  faults->fail(testing::StoreMethod::kCommitRound, unavailable("the database is away"), 1);
  rig.driver.tick();  // not committed; read back: still open; written again: committed
  CHECK(rig.phase(job) == Phase::kIdle);
  CHECK(faults->calls(testing::StoreMethod::kCommitRound) == 2);
  auto model = rig.store->latest_model(job.id);
  REQUIRE(model.ok());
  CHECK(model->version == 1);
  auto blob = decode_blob(model->blob, model->blob.size());
  REQUIRE(blob.ok());
  // One FedAvgM step of 0.25 from (0.5, -0.5): a second step would have moved it further.
  CHECK(blob->data[0] == doctest::Approx(0.75f));
  CHECK(blob->data[1] == doctest::Approx(-0.25f));
}

TEST_CASE("a replica that stepped down forgets its round once no upload is in flight") {
  Rig rig(/*shared=*/true);
  rig.add_clients(2);
  JobEntry& job = rig.add_job();
  rig.driver.tick();
  REQUIRE(rig.phase(job) == Phase::kOpen);
  const ClientId uploader = rig.invitees(job)[0];
  std::shared_ptr<rounds::RoundAggregate> in_flight;
  rig.jobs.update(job, [&](JobStatus& s) {
    in_flight = *s.round->reserve(uploader, rig.now);
    s.step_down();
  });
  rig.driver.tick();
  CHECK(rig.phase(job) == Phase::kOpen);  // an upload is being folded into it
  rig.jobs.update(job, [&](JobStatus& s) { s.round->release(uploader); });
  rig.driver.tick();
  CHECK(rig.phase(job) == Phase::kIdle);
  CHECK(rig.round(job) == 0);
  CHECK(rig.stored(job.id, 1).state == RoundState::kOpen);  // the new owner concludes it
}

TEST_CASE("an owner fenced as it closes admission keeps its round until the upload in flight ends") {
  auto faults = std::make_shared<testing::StoreFaults>();
  Rig rig(/*shared=*/true, [&](std::unique_ptr<storage::Store> s) {
    return testing::failing_store(std::move(s), faults);
  });
  rig.add_clients(2);
  JobEntry& job = rig.add_job();
  rig.driver.tick();
  REQUIRE(rig.phase(job) == Phase::kOpen);
  const ClientId uploader = rig.invitees(job)[0];
  // A cancelled job closes admission at once, upload or not; the store refuses the epoch.
  REQUIRE(rig.jobs.transition(job, [](JobState) { return JobState::kCancelled; }).ok());
  bool reserved = false;
  rig.jobs.update(job, [&](JobStatus& s) {
    s.epoch = 1;  // the lease this replica holds
    reserved = s.round->reserve(uploader, rig.now).ok();
  });
  REQUIRE(reserved);
  faults->fail(testing::StoreMethod::kCloseAdmission, conflict("lease epoch 1 is stale"), 1);
  rig.driver.tick();
  CHECK_FALSE(rig.jobs.read(job, [](const JobStatus& s) { return s.owned; }));
  CHECK(rig.round(job) == 1);  // the upload still folds into it
  rig.jobs.update(job, [&](JobStatus& s) { s.round->release(uploader); });
  rig.driver.tick();
  CHECK(rig.phase(job) == Phase::kIdle);
  CHECK(rig.round(job) == 0);
}

TEST_CASE("a follower copies the owner's round, writes its partial at the close, and lets go") {
  Rig owner_side(/*shared=*/true);
  owner_side.add_clients(2);
  JobEntry& owned = owner_side.add_job();
  owner_side.driver.tick();
  const storage::RoundRecord opened = owner_side.stored(owned.id, 1);

  Rig rig(/*shared=*/true);
  rig.add_clients(2);
  JobEntry& job = rig.add_job(job_config(), /*owned=*/false);
  REQUIRE(rig.store->open_round(opened).ok());  // the replicas' one store holds the round
  rig.replication.owner_round = opened;
  rig.driver.tick();
  REQUIRE(rig.phase(job) == Phase::kFollowing);
  CHECK(rig.invitees(job) == owner_side.invitees(owned));
  rig.upload(job, rig.invitees(job)[0], 0.5f);
  rig.replication.owner_round->admitting = false;  // the owner closed admission
  rig.driver.tick();
  CHECK(rig.phase(job) == Phase::kIdle);
  CHECK(rig.replication.calls.back() == "put_partial 1 1");
  // The next round of the owner is followed in turn.
  rig.replication.owner_round->index = 2;
  rig.replication.owner_round->admitting = true;
  rig.driver.tick();
  CHECK(rig.phase(job) == Phase::kFollowing);
  CHECK(rig.round(job) == 2);
  rig.replication.owner_round->state = RoundState::kCommitted;  // concluded without our partial
  rig.driver.tick();
  CHECK(rig.phase(job) == Phase::kIdle);
}

TEST_CASE("a follower whose store answers later writes its partial again") {
  Rig rig(/*shared=*/true);
  rig.add_clients(2);
  JobEntry& job = rig.add_job(job_config(), /*owned=*/false);
  Rig owner_side(/*shared=*/true);
  owner_side.add_clients(2);
  JobEntry& owned = owner_side.add_job();
  owner_side.driver.tick();
  rig.replication.owner_round = owner_side.stored(owned.id, 1);
  REQUIRE(rig.store->open_round(*rig.replication.owner_round).ok());
  rig.driver.tick();
  rig.upload(job, rig.invitees(job)[0], 0.5f);
  rig.replication.owner_round->admitting = false;
  rig.replication.partial_answer = unavailable("the database is away");
  rig.driver.tick();
  CHECK(rig.phase(job) == Phase::kHandingOver);
  rig.replication.partial_answer = ok_status();
  rig.driver.tick();
  CHECK(rig.phase(job) == Phase::kIdle);
}

TEST_CASE("a cancelled job's round stops at once and fails; a paused one runs to its end") {
  Rig rig;
  rig.add_clients(4);
  JobEntry& cancelled = rig.add_job();
  JobEntry& paused = rig.add_job();
  rig.driver.tick();
  REQUIRE(rig.phase(cancelled) == Phase::kOpen);
  REQUIRE(rig.phase(paused) == Phase::kOpen);
  REQUIRE(rig.jobs.transition(cancelled, [](JobState) { return JobState::kCancelled; }).ok());
  REQUIRE(rig.jobs.transition(paused, [](JobState) { return JobState::kPaused; }).ok());
  rig.driver.tick();
  CHECK(rig.phase(cancelled) == Phase::kIdle);
  CHECK(rig.stored(cancelled.id, 1).state == RoundState::kFailed);
  CHECK(rig.stored(cancelled.id, 1).metrics["failure"] == "job cancelled");
  CHECK(rig.phase(paused) == Phase::kOpen);
  for (ClientId c : rig.invitees(paused)) rig.upload(paused, c, 0.25f);
  rig.driver.tick();
  CHECK(rig.stored(paused.id, 1).state == RoundState::kCommitted);
  rig.driver.tick();
  CHECK(rig.phase(paused) == Phase::kIdle);  // paused: no round opens
}

TEST_CASE(
    "an asynchronous job's buffer refills, commits at K, and reopens at once with its tasks") {
  Rig rig;
  rig.add_clients(4);
  JobEntry& job = rig.add_job(
      job_config({{"mode", "async"}, {"clients_per_round", 2}, {"async", {{"concurrency", 3}}}}));
  rig.driver.tick();
  REQUIRE(rig.phase(job) == Phase::kOpen);
  std::vector<ClientId> tasks = rig.invitees(job);
  REQUIRE(tasks.size() == 3);
  rig.upload(job, tasks[0], 0.25f);
  rig.upload(job, tasks[1], 0.25f);
  rig.driver.tick();  // K = 2 in: committed, and the next buffer open with the third task
  CHECK(rig.stored(job.id, 1).state == RoundState::kCommitted);
  CHECK(rig.phase(job) == Phase::kOpen);
  CHECK(rig.round(job) == 2);
  std::vector<ClientId> next = rig.invitees(job);
  CHECK(std::count(next.begin(), next.end(), tasks[2]) == 1);
}

TEST_CASE("a shutdown commits a complete round and fails one that may not commit") {
  Rig rig;
  rig.add_clients(4);
  JobEntry& complete = rig.add_job(job_config({{"min_updates", 1}}));
  JobEntry& empty = rig.add_job();
  rig.driver.tick();
  rig.upload(complete, rig.invitees(complete)[0], 0.25f);
  rig.driver.conclude_all();
  CHECK(rig.stored(complete.id, 1).state == RoundState::kCommitted);
  CHECK(rig.stored(empty.id, 1).state == RoundState::kFailed);
  CHECK(rig.stored(empty.id, 1).metrics["failure"] == "coordinator stopped");
}

}  // namespace
}  // namespace fedcase::server
