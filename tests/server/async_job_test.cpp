// Asynchronous jobs on the coordinator: a buffer's slots refill as updates arrive, every K
// updates commit a version, tasks in flight carry over and upload to the buffer that is open
// when they finish (with their staleness), and a restart drops the uncommitted buffer. In
// process, over a real SQLite store, with a clock the test moves and the driver ticked by hand.

#include <doctest/doctest.h>

#include "tests/server/coordinator_fixture.h"

namespace fedcase::server {
namespace {

using nlohmann::json;
using namespace fixture;

json async_job() {
  return job_config({{"mode", "async"},
                     {"rounds", 20},
                     {"async", {{"concurrency", 3}, {"staleness_exponent", 1.0}}}});
}

// The clients holding a task now, with their offers.
std::map<ClientId, TaskOffer> tasks_of(Harness& h, const std::vector<ClientId>& clients) {
  return invitees(*h.coordinator, clients);
}

Result<UpdateAccepted> upload(Harness& h, ClientId client, const TaskOffer& offer, float value) {
  const ModelBlob base = base_model(*h.coordinator, offer.job, offer.model_version);
  return h.coordinator->submit_update(client, offer.job, offer.round, meta(10),
                                      delta_blob(base, value));
}

TEST_CASE("an asynchronous job refills its slots, commits every K updates, and carries tasks") {
  testing::TempDir dir;
  Harness h(dir);
  std::vector<ClientId> clients;
  for (int i = 0; i < 5; ++i) clients.push_back(h.add_client());
  auto created = h.coordinator->create_job(async_job());
  REQUIRE_MESSAGE(created.ok(), created.status().to_string());
  const JobId job = created->id;
  h.coordinator->tick();
  auto first = tasks_of(h, clients);
  REQUIRE(first.size() == 3);  // concurrency
  for (const auto& [id, offer] : first) {
    CHECK(offer.round == 1);
    CHECK(offer.model_version == 0);
  }
  auto it = first.begin();
  const auto [a, offer_a] = *it++;
  const auto [b, offer_b] = *it++;
  const auto [c, offer_c] = *it;

  h.now = h.now + 5;
  REQUIRE(upload(h, a, offer_a, 0.1f).ok());
  CHECK(h.coordinator->task_status(a, job, 1).value() == rounds::Admission::kAlreadyUploaded);
  h.coordinator->tick();  // a slot freed: a fourth client gets a task; `a` waits for the flush
  auto second = tasks_of(h, clients);
  CHECK(second.size() == 3);
  CHECK_FALSE(second.count(a));

  h.now = h.now + 5;
  REQUIRE(upload(h, b, offer_b, 0.3f).ok());
  h.coordinator->tick();  // K = 2: version 1 commits, buffer 2 opens with the tasks in flight
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  CHECK(detail->summary.model_version == 1);
  REQUIRE(detail->rounds.size() == 2);
  const storage::RoundRecord& flushed = detail->rounds[0];
  CHECK(flushed.state == RoundState::kCommitted);
  CHECK(flushed.metrics["updates"] == 2);
  CHECK(flushed.metrics["staleness"] == json{{"0", 2}});
  CHECK(flushed.metrics["in_flight"] == 2);
  CHECK(detail->rounds[1].state == RoundState::kOpen);
  CHECK(detail->rounds[1].base_version == 1);

  // `c` trained from version 0 and still uploads to its task's round, 1: its update joins
  // buffer 2, one version stale, at half weight.
  CHECK(h.coordinator->task_status(c, job, 1).value() == rounds::Admission::kWanted);
  CHECK(h.coordinator->model(job, 0, std::nullopt, c).ok());  // its task's version
  h.now = h.now + 5;
  auto carried = upload(h, c, offer_c, 0.2f);
  REQUIRE_MESSAGE(carried.ok(), carried.status().to_string());
  CHECK(carried->round == 2);
  // An update of the wrong version is refused as such.
  auto third = tasks_of(h, clients);
  for (const auto& [id, offer] : third) {
    if (offer.model_version != 1) continue;
    const ModelBlob base = base_model(*h.coordinator, job, 0);
    auto wrong = h.coordinator->submit_update(id, job, offer.round, meta(10), delta_blob(base, 1));
    CHECK(wrong.status().code() == Code::kUnprocessable);
    break;
  }
  auto stored = h.reader()->list_updates(job, 2);
  REQUIRE(stored.ok());
  CHECK(stored->size() == 1);

  // A restart fails the open buffer: its update is dropped, the committed version stays, and
  // the job starts a fresh buffer.
  const std::string checksum = h.coordinator->job_detail(job)->summary.model_checksum;
  h.reopen();
  auto after = h.coordinator->job_detail(job);
  REQUIRE(after.ok());
  CHECK(after->summary.model_version == 1);
  CHECK(after->summary.model_checksum == checksum);
  CHECK(after->rounds[1].state == RoundState::kFailed);
  CHECK(after->rounds[1].metrics["failure"] == "coordinator restarted while the round was open");
  for (ClientId id : clients) REQUIRE(h.coordinator->heartbeat(id, json::object()).ok());
  h.coordinator->tick();
  auto fresh = tasks_of(h, clients);
  CHECK(fresh.size() == 3);
  for (const auto& [id, offer] : fresh) {
    CHECK(offer.round == 3);
    CHECK(offer.model_version == 1);
  }
  // The old task is gone: its upload reaches no open round.
  CHECK(upload(h, c, offer_c, 0.2f).status().code() == Code::kConflict);
}

TEST_CASE("a paused asynchronous job hands out no new task; resumed, it refills") {
  testing::TempDir dir;
  Harness h(dir);
  std::vector<ClientId> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(h.add_client());
  const JobId job = h.coordinator->create_job(async_job())->id;
  h.coordinator->tick();
  auto tasks = tasks_of(h, clients);
  REQUIRE(tasks.size() == 3);
  REQUIRE(h.coordinator->control_job(job, "pause").ok());
  const auto& [a, offer] = *tasks.begin();
  REQUIRE(upload(h, a, offer, 0.1f).ok());  // work in flight still counts
  h.coordinator->tick();
  CHECK(tasks_of(h, clients).size() == 2);  // the freed slot stays free
  REQUIRE(h.coordinator->control_job(job, "resume").ok());
  h.coordinator->tick();
  CHECK(tasks_of(h, clients).size() == 3);
}

TEST_CASE("a secure asynchronous job: ready updates form cohorts; a failed one's members retrain") {
  testing::TempDir dir;
  Harness h(dir);
  std::vector<ClientId> clients;
  for (int i = 0; i < 6; ++i) clients.push_back(h.add_client());
  json config = async_job();
  config["clients_per_round"] = 3;
  config["async"]["concurrency"] = 4;
  config["secure_aggregation"] = {{"threshold", 2}, {"clip", 5}, {"stage_seconds", 5}};
  auto created = h.coordinator->create_job(config);
  REQUIRE_MESSAGE(created.ok(), created.status().to_string());
  const JobId job = created->id;
  h.coordinator->tick();
  auto training = tasks_of(h, clients);
  REQUIRE(training.size() == 4);  // concurrency
  for (const auto& [id, offer] : training) {
    CHECK(offer.ready);  // train, then report ready: no stage URLs yet
    CHECK_FALSE(offer.staleness_factor);
  }
  // A plain upload is refused; three reports make a cohort (K = 3), the fourth waits.
  auto it = training.begin();
  const ModelBlob base = base_model(*h.coordinator, job, 0);
  CHECK(h.coordinator->submit_update(it->first, job, 1, meta(10), delta_blob(base, 0.1f))
            .status()
            .code() == Code::kConflict);
  std::vector<ClientId> ready;
  for (int i = 0; i < 3; ++i, ++it) {
    h.now = h.now + 1;
    auto reported = h.coordinator->report_ready(it->first, job, 1, meta(10));
    REQUIRE_MESSAGE(reported.ok(), reported.status().to_string());
    CHECK(reported->updates == size_t(i + 1));
    ready.push_back(it->first);
  }
  CHECK(h.coordinator->report_ready(ready[0], job, 1, meta(10)).status().code() ==
        Code::kConflict);  // once
  // In a fleet large enough to be steered, a client waiting for its cohort is told to check in
  // within half a key stage; an idle one, later.
  for (int i = 0; i < 60; ++i) h.add_client();
  auto check_in = h.coordinator->check_in_later(ready[0], 30);
  REQUIRE(check_in.ok());
  CHECK(check_in->before_s <= 2.5);
  CHECK(h.coordinator->check_in_later(clients.back(), 30)->before_s > 2.5);
  const ClientId later = it->first;
  h.coordinator->tick();  // the cohort opens
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  CHECK(detail->rounds.back().state == RoundState::kOpen);
  auto cohort = tasks_of(h, ready);
  REQUIRE(cohort.size() == 3);
  for (const auto& [id, offer] : cohort) {
    CHECK(offer.round == 1);
    REQUIRE(offer.staleness_factor);
    CHECK(*offer.staleness_factor == 1.0);  // trained from the buffer's version
  }
  // While the cohort runs, a report waits for the next one.
  REQUIRE(h.coordinator->report_ready(later, job, 1, meta(10)).ok());
  CHECK(tasks_of(h, {later}).empty());

  // Nobody advertises keys: the key stage closes below the threshold and the cohort fails.
  // Its members carry over to the next buffer to train again (an update is never masked in
  // two cohorts); the later report stays ready there.
  h.now = h.now + 6;
  for (int i = 0; i < 4; ++i) h.coordinator->tick();
  detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  REQUIRE(detail->rounds.size() >= 2);
  CHECK(detail->rounds[0].state == RoundState::kFailed);
  CHECK(detail->rounds[0].metrics["failure"].get<std::string>().find("secure aggregation") !=
        std::string::npos);
  CHECK(detail->summary.model_version == 0);
  auto again = tasks_of(h, ready);
  CHECK(again.size() == 3);
  for (const auto& [id, offer] : again) {
    CHECK(offer.round == 1);  // their tasks, carried
    CHECK(offer.ready);
  }
  CHECK(tasks_of(h, {later}).empty());  // ready, waiting for the next cohort
  REQUIRE(h.coordinator->report_ready(ready[0], job, 1, meta(10)).ok());
}

}  // namespace
}  // namespace fedcase::server
