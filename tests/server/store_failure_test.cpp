// The coordinator when its store fails: a round whose commit the store refuses, a failed round
// the store cannot record, an update whose metadata it cannot write. The real coordinator over
// a real SQLite file, behind a FailingStore (tests/support/failing_store.h).

#include <doctest/doctest.h>

#include <string>

#include "server/api/api.h"
#include "server/core/coordinator.h"
#include "tests/server/api_calls.h"
#include "tests/server/coordinator_fixture.h"
#include "tests/support/failing_store.h"
#include "tests/support/stderr_capture.h"

namespace fedcase::server {
namespace {

using nlohmann::json;
using namespace fixture;
using testing::StoreFaults;
using testing::StoreMethod;
using testing::StderrCapture;

// A harness whose store fails what `faults` arms, with four clients and one job of `config`,
// its initial model, and a second connection to the database to read what was stored.
struct FaultyJob {
  explicit FaultyJob(const fedcase::testing::TempDir& dir, const json& config = job_config())
      : faults(std::make_shared<StoreFaults>()), h(dir, {}, [this](auto store) {
          return fedcase::testing::failing_store(std::move(store), faults);
        }) {
    for (int i = 0; i < 4; ++i) clients.push_back(h.add_client());
    auto created = h.coordinator->create_job(config);
    REQUIRE(created.ok());
    job = created->id;
    base = base_model(*h.coordinator, job, 0);
    reader = h.reader();
  }
  std::shared_ptr<StoreFaults> faults;
  Harness h;
  std::vector<ClientId> clients;
  JobId job = 0;
  ModelBlob base;
  std::unique_ptr<storage::Store> reader;
};

// Uploads `value` (with `samples`) from each of the first `count` invitees of round `round`;
// returns who uploaded.
std::vector<ClientId> upload(Harness& h, JobId job, RoundIndex round,
                             const std::vector<ClientId>& clients, size_t count,
                             const ModelBlob& base, float value, uint64_t samples) {
  std::vector<ClientId> uploaded;
  for (const auto& [id, task] : invitees(*h.coordinator, clients)) {
    if (uploaded.size() == count) break;
    REQUIRE(task.round == round);
    auto r = h.coordinator->submit_update(id, job, round, meta(samples), delta_blob(base, value));
    REQUIRE_MESSAGE(r.ok(), r.status().to_string());
    uploaded.push_back(id);
  }
  REQUIRE(uploaded.size() == count);
  return uploaded;
}

// The job's open round, opening one if the driver has not yet.
JobDetail::OpenRound open_round(Harness& h, JobId job) {
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  if (!detail->current_round) {
    h.coordinator->tick();
    detail = h.coordinator->job_detail(job);
    REQUIRE(detail.ok());
  }
  REQUIRE(detail->current_round);
  return *detail->current_round;
}

// Every parameter of `model` is the base's moved by `moved_by` (one in 997 checked).
void check_model(const ModelBlob& model, const ModelBlob& base, float moved_by) {
  REQUIRE(model.data.size() == base.data.size());
  size_t off = 0, first = 0;
  for (size_t i = 0; i < model.data.size(); i += 997) {
    if (model.data[i] == doctest::Approx(base.data[i] + moved_by).epsilon(1e-5)) continue;
    if (off++ == 0) first = i;
  }
  CHECK_MESSAGE(off == 0, off, " parameters off, the first ", first, ": ", model.data[first],
                " for ", base.data[first] + moved_by);
}

TEST_CASE("a commit the store refuses fails the round; the next round trains the same model") {
  fedcase::testing::TempDir dir;
  // FedAvgM keeps a momentum: a step the store refused must leave no trace in the next one.
  FaultyJob f(dir, job_config({{"server_optimizer", {{"name", "fedavgm"}, {"momentum", 0.9}}}}));
  Harness& h = f.h;
  const std::vector<ClientId>& clients = f.clients;
  const JobId job = f.job;
  const ModelBlob& base = f.base;
  storage::Store* reader = f.reader.get();

  h.coordinator->tick();
  auto tasks = invitees(*h.coordinator, clients);
  REQUIRE(tasks.size() == 3);
  auto it = tasks.begin();
  const ClientId a = (it++)->first, b = it->first;
  h.now = 1010;
  REQUIRE(h.coordinator->submit_update(a, job, 1, meta(10), delta_blob(base, 0.1f)).ok());
  REQUIRE(h.coordinator->submit_update(b, job, 1, meta(30), delta_blob(base, 0.5f)).ok());
  f.faults->fail(StoreMethod::kCommitRound, internal_error("disk full"));
  h.coordinator->tick();
  CHECK(f.faults->failures(StoreMethod::kCommitRound) == 1);

  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  REQUIRE(detail->rounds.size() >= 1);
  const storage::RoundRecord& failed = detail->rounds[0];
  CHECK(failed.state == RoundState::kFailed);
  const std::string failure = failed.metrics.value("failure", "");
  CHECK(failure.rfind("commit failed: ", 0) == 0);
  CHECK(failure.find("disk full") != std::string::npos);
  CHECK(detail->summary.model_version == 0);
  CHECK(detail->summary.state == JobState::kRunning);
  CHECK(reader->latest_model(job)->version == 0);
  CHECK(reader->get_model(job, 1).status().code() == Code::kNotFound);
  CHECK(reader->list_rounds(job)->at(0).state == RoundState::kFailed);
  CHECK(reader->list_updates(job, 1)->size() == 2);  // recorded before the commit

  // Round 2 opens from model 0 and commits: x = base + mean delta (a fresh momentum).
  const JobDetail::OpenRound next = open_round(h, job);
  CHECK(next.index == 2);
  for (const auto& [id, task] : invitees(*h.coordinator, clients)) {
    CHECK(task.model_version == 0);
  }
  h.now = 1020;
  upload(h, job, 2, clients, 2, base, 0.2f, 10);
  h.coordinator->tick();
  detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  REQUIRE(detail->rounds.size() >= 2);
  CHECK(detail->rounds[1].state == RoundState::kCommitted);
  CHECK(detail->summary.model_version == 2);
  auto stored = reader->get_model(job, 2);
  REQUIRE(stored.ok());
  CHECK(stored->checksum == detail->summary.model_checksum);
  auto model = decode_blob(stored->blob, stored->blob.size());
  REQUIRE(model.ok());
  check_model(*model, base, 0.2f);  // 0.2 + 0.9 x 0.4 had the refused step's momentum stayed
}

TEST_CASE("a commit whose outcome was lost is read back from the store: the lineage never forks") {
  fedcase::testing::TempDir dir;
  FaultyJob f(dir);
  Harness& h = f.h;
  storage::Store* reader = f.reader.get();
  h.coordinator->tick();
  h.now = 1010;
  upload(h, f.job, 1, f.clients, 2, f.base, 0.3f, 10);
  // The store commits round 1, and its answer is lost on the way back (the connection dropped
  // during COMMIT).
  f.faults->fail(StoreMethod::kCommitRound,
                 unavailable("the connection was lost while the commit was under way"), 1,
                 fedcase::testing::Fault::kAfter);
  h.coordinator->tick();
  CHECK(f.faults->failures(StoreMethod::kCommitRound) == 1);
  auto rounds = reader->list_rounds(f.job);
  REQUIRE(rounds.ok());
  REQUIRE(rounds->size() >= 1);
  CHECK(rounds->at(0).state == RoundState::kCommitted);
  REQUIRE(reader->latest_model(f.job)->version == 1);

  // The coordinator agrees with its store: model 1 is the job's, round 2 trains from it, and
  // its commit is model 2 built on model 1.
  h.coordinator->tick();
  auto detail = h.coordinator->job_detail(f.job);
  REQUIRE(detail.ok());
  CHECK(detail->summary.model_version == 1);
  CHECK(detail->summary.model_checksum == reader->latest_model(f.job)->checksum);
  const JobDetail::OpenRound next = open_round(h, f.job);
  CHECK(next.index == 2);
  for (const auto& [id, task] : invitees(*h.coordinator, f.clients)) {
    CHECK(task.model_version == 1);
  }
  h.now = 1020;
  upload(h, f.job, 2, f.clients, 2, base_model(*h.coordinator, f.job, 1), 0.1f, 10);
  h.coordinator->tick();
  auto stored = reader->get_model(f.job, 2);
  REQUIRE(stored.ok());
  auto model = decode_blob(stored->blob, stored->blob.size());
  REQUIRE(model.ok());
  check_model(*model, f.base, 0.4f);  // 0.3 then 0.1: no step was lost or repeated
}

TEST_CASE(
    "a failed round the store cannot record is logged; nothing is committed, the job goes on") {
  fedcase::testing::TempDir dir;
  FaultyJob f(dir);
  Harness& h = f.h;
  const std::vector<ClientId>& clients = f.clients;
  const JobId job = f.job;
  const ModelBlob& base = f.base;
  storage::Store* reader = f.reader.get();
  h.coordinator->tick();
  REQUIRE(open_round(h, job).index == 1);

  // Round 1 gets no update by its deadline (1060) and fails; the store refuses to record it.
  f.faults->fail(StoreMethod::kFailRound, internal_error("disk full"));
  h.now = 1061;
  invitees(*h.coordinator, clients);  // contacts: the clients are still available
  std::string log;
  {
    StderrCapture capture;
    h.coordinator->tick();
    log = capture.text();
  }
  CHECK(f.faults->failures(StoreMethod::kFailRound) == 1);
  CHECK(log.find("cannot record failed round") != std::string::npos);
  CHECK(log.find("disk full") != std::string::npos);
  // Nothing was committed: the store still holds round 1 open, and model 0 only.
  auto rounds = reader->list_rounds(job);
  REQUIRE(rounds.ok());
  REQUIRE(rounds->size() >= 1);
  CHECK(rounds->at(0).state == RoundState::kOpen);
  CHECK(reader->latest_model(job)->version == 0);
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  CHECK(detail->summary.state == JobState::kRunning);
  CHECK(detail->summary.model_version == 0);

  // The job goes on: round 2 opens from model 0 and commits.
  CHECK(open_round(h, job).index == 2);
  h.now = 1070;
  upload(h, job, 2, clients, 2, base, 0.1f, 10);
  h.coordinator->tick();
  detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  CHECK(detail->summary.model_version == 2);
  CHECK(reader->latest_model(job)->version == 2);

  // A restart fails the round the store still holds open, as after a crash.
  h.coordinator->stop_driver();
  h.reopen();
  rounds = reader->list_rounds(job);
  REQUIRE(rounds.ok());
  CHECK(rounds->at(0).state == RoundState::kFailed);
  CHECK(rounds->at(1).state == RoundState::kCommitted);
}

TEST_CASE("a refused commit whose failure cannot be recorded either leaves the job on its model") {
  fedcase::testing::TempDir dir;
  FaultyJob f(dir);
  Harness& h = f.h;
  const std::vector<ClientId>& clients = f.clients;
  const JobId job = f.job;
  const ModelBlob& base = f.base;
  storage::Store* reader = f.reader.get();
  h.coordinator->tick();
  h.now = 1010;
  upload(h, job, 1, clients, 2, base, 0.3f, 10);
  f.faults->fail(StoreMethod::kCommitRound, internal_error("disk full"));
  f.faults->fail(StoreMethod::kFailRound, internal_error("still full"));
  std::string log;
  {
    StderrCapture capture;
    h.coordinator->tick();
    log = capture.text();
  }
  CHECK(log.find("cannot record failed round") != std::string::npos);
  CHECK(log.find("commit failed") != std::string::npos);
  CHECK(reader->list_rounds(job)->at(0).state == RoundState::kOpen);
  CHECK(reader->latest_model(job)->version == 0);
  CHECK(h.coordinator->job_detail(job)->summary.model_version == 0);

  CHECK(open_round(h, job).index == 2);
  h.now = 1020;
  upload(h, job, 2, clients, 2, base, 0.1f, 10);
  h.coordinator->tick();
  auto stored = reader->latest_model(job);
  REQUIRE(stored.ok());
  CHECK(stored->version == 2);
  auto model = decode_blob(stored->blob, stored->blob.size());
  REQUIRE(model.ok());
  check_model(*model, base, 0.1f);
}

TEST_CASE("an update whose metadata the store refuses is refused and releases its place") {
  fedcase::testing::TempDir dir;
  // K = 2 of 3 invited
  FaultyJob f(dir);
  Harness& h = f.h;
  const std::vector<ClientId>& clients = f.clients;
  const JobId job = f.job;
  const ModelBlob& base = f.base;
  storage::Store* reader = f.reader.get();
  h.coordinator->tick();
  auto tasks = invitees(*h.coordinator, clients);
  REQUIRE(tasks.size() == 3);
  auto it = tasks.begin();
  const ClientId a = (it++)->first, b = (it++)->first, c = it->first;
  const json before = store_view(*reader, job);

  f.faults->fail(StoreMethod::kAdmitUpdate, internal_error("disk full"));
  h.now = 1010;
  auto refused = h.coordinator->submit_update(a, job, 1, meta(10), delta_blob(base, 5.0f));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kInternal);
  CHECK(refused.status().message().find("disk full") != std::string::npos);
  CHECK(store_view(*reader, job) == before);
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  REQUIRE(detail->current_round);
  CHECK(detail->current_round->updates == 0);
  auto status = h.coordinator->task_status(a, job, 1);
  REQUIRE(status.ok());
  CHECK(*status == rounds::Admission::kWanted);

  // Its place is free again: the same client, then a second, fill the round (K = 2).
  REQUIRE(h.coordinator->submit_update(a, job, 1, meta(10), delta_blob(base, 0.1f)).ok());
  auto second = h.coordinator->submit_update(b, job, 1, meta(30), delta_blob(base, 0.5f));
  REQUIRE(second.ok());
  CHECK(second->updates == 2);
  CHECK(h.coordinator->submit_update(c, job, 1, meta(5), delta_blob(base, 1)).status().code() ==
        Code::kConflict);
  h.coordinator->tick();
  CHECK(reader->list_updates(job, 1)->size() == 2);
  auto stored = reader->get_model(job, 1);
  REQUIRE(stored.ok());
  auto model = decode_blob(stored->blob, stored->blob.size());
  REQUIRE(model.ok());
  check_model(*model, base, (0.1f * 10 + 0.5f * 30) / 40);  // the refused 5.0 is in no fold
}

TEST_CASE("GET /healthz is 200 while the database answers and 503 once it does not") {
  fedcase::testing::TempDir dir;
  FaultyJob f(dir);
  Api api(*f.h.coordinator);
  Reply healthy = call(api, http::verb::get, "/healthz", "");  // no token needed
  CHECK(healthy.response.result() == http::status::ok);
  const json body = body_of(healthy);
  CHECK(body["status"] == "ok");
  const std::string replica = body["replica"];
  CHECK(replica.find("-" + std::to_string(getpid())) != std::string::npos);
  CHECK(healthy.response["X-Fedcase-Replica"] == replica);
  CHECK(api.route_label(Request{http::verb::get, "/healthz", 11}) == "/healthz");

  // The database stops answering: the next probe, a second later, finds it so; the answers
  // in between come from the last probe, without reaching the store.
  f.faults->fail(StoreMethod::kPing, unavailable("connection refused"), StoreFaults::kEveryCall);
  const size_t pings = f.faults->calls(StoreMethod::kPing);
  CHECK(call(api, http::verb::get, "/healthz", "").response.result() == http::status::ok);
  CHECK(f.faults->calls(StoreMethod::kPing) == pings);
  usleep(1100 * 1000);
  Reply down = call(api, http::verb::get, "/healthz", "");
  CHECK(down.response.result() == http::status::service_unavailable);
  CHECK(body_of(down)["status"] == "database unreachable");
  CHECK(down.response.body().find("refused") == std::string::npos);  // says nothing more
  CHECK(body_of(down)["replica"] == replica);
  CHECK(call(api, http::verb::post, "/healthz", "").response.result() ==
        http::status::method_not_allowed);

  f.faults->clear(StoreMethod::kPing);
  usleep(1100 * 1000);
  CHECK(call(api, http::verb::get, "/healthz", "").response.result() == http::status::ok);
}

TEST_CASE("a configured replica id names the replica") {
  fedcase::testing::TempDir dir;
  Harness h(dir, [](CoordinatorConfig& config) { config.replica_id = "replica-b"; });
  CHECK(h.coordinator->replica_id() == "replica-b");
}

}  // namespace
}  // namespace fedcase::server
