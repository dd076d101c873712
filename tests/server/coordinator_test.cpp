// The coordinator without sockets: a real SQLite store in a temp dir, a real test-set
// evaluator, a clock the test moves, and the round driver ticked by hand.

#include "server/core/coordinator.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "common/blob.h"
#include "ml/model.h"
#include "server/api/views.h"
#include "tests/server/coordinator_fixture.h"

namespace fedcase::server {
namespace {

using nlohmann::json;
using namespace fixture;

TEST_CASE("a round from open to commit, with the model the store keeps") {
  testing::TempDir dir;
  Harness h(dir);
  std::vector<ClientId> clients;
  for (int i = 0; i < 4; ++i) clients.push_back(h.add_client());
  auto created = h.coordinator->create_job(job_config());
  REQUIRE(created.ok());
  const JobId job = created->id;
  const ModelBlob base = base_model(*h.coordinator, job, 0);

  h.coordinator->tick();
  auto tasks = invitees(*h.coordinator, clients);
  REQUIRE(tasks.size() == 3);  // ceil(2 x 1.5)
  const TaskOffer& offer = tasks.begin()->second;
  CHECK(offer.round == 1);
  CHECK(offer.model_version == 0);
  CHECK(offer.deadline == doctest::Approx(1060));

  auto it = tasks.begin();
  const ClientId a = (it++)->first, b = (it++)->first, c = it->first;
  h.now = 1010;
  REQUIRE(h.coordinator->submit_update(a, job, 1, meta(10), delta_blob(base, 0.1f)).ok());
  auto second = h.coordinator->submit_update(b, job, 1, meta(30), delta_blob(base, 0.5f));
  REQUIRE(second.ok());
  CHECK(second->updates == 2);
  auto status = h.coordinator->task_status(c, job, 1);
  REQUIRE(status.ok());
  CHECK(*status == rounds::Admission::kFilled);
  CHECK(h.coordinator->submit_update(c, job, 1, meta(5), delta_blob(base, 1)).status().code() ==
        Code::kConflict);

  h.coordinator->tick();
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  REQUIRE(detail->rounds.size() >= 1);
  const storage::RoundRecord& r1 = detail->rounds[0];
  CHECK(r1.state == RoundState::kCommitted);
  CHECK(r1.metrics["updates"] == 2);
  CHECK(r1.metrics["dropped"][std::to_string(c)] == "not needed");
  CHECK(detail->summary.model_version == 1);

  auto reader = h.reader();
  auto stored = reader->get_model(job, 1);
  REQUIRE(stored.ok());
  CHECK(stored->checksum == detail->summary.model_checksum);
  auto next = decode_blob(stored->blob, stored->blob.size());
  REQUIRE(next.ok());
  const float mean = (0.1f * 10 + 0.5f * 30) / 40;  // FedAvg by samples, server lr 1
  for (size_t i = 0; i < next->data.size(); i += 997) {
    CHECK(next->data[i] == doctest::Approx(base.data[i] + mean).epsilon(1e-5));
  }
  auto updates = reader->list_updates(job, 1);
  REQUIRE(updates.ok());
  CHECK(updates->size() == 2);
}

TEST_CASE("restart: open rounds fail, jobs resume from the last commit, tokens still work") {
  testing::TempDir dir;
  Harness h(dir);
  std::vector<ClientId> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(h.add_client());
  auto created = h.coordinator->create_job(job_config());
  REQUIRE(created.ok());
  const JobId job = created->id;
  const ModelBlob base = base_model(*h.coordinator, job, 0);
  h.coordinator->tick();
  size_t accepted = 0;
  for (const auto& [id, task] : invitees(*h.coordinator, clients)) {
    accepted += h.coordinator->submit_update(id, job, 1, meta(10), delta_blob(base, 0.2f)).ok();
  }
  CHECK(accepted == 2);   // the third is not needed
  h.coordinator->tick();  // commits round 1
  h.now = 1100;
  for (ClientId id : clients) REQUIRE(h.coordinator->heartbeat(id, json::object()).ok());
  h.coordinator->tick();  // opens round 2
  auto before = h.coordinator->job_detail(job);
  REQUIRE(before.ok());
  REQUIRE(before->current_round);
  CHECK(before->current_round->index == 2);
  const std::string checksum = before->summary.model_checksum;

  h.now = 1200;
  h.reopen();
  auto after = h.coordinator->job_detail(job);
  REQUIRE(after.ok());
  CHECK(after->summary.model_version == 1);
  CHECK(after->summary.model_checksum == checksum);
  CHECK_FALSE(after->current_round);
  REQUIRE(after->rounds.size() == 2);
  CHECK(after->rounds[1].state == RoundState::kFailed);
  CHECK(after->rounds[1].metrics["failure"] == "coordinator restarted while the round was open");
  for (const auto& [id, token] : h.tokens) {
    Caller caller = h.coordinator->identify(token);
    CHECK(caller.role == Role::kClient);
    CHECK(caller.client == id);
  }
  // The job goes on from version 1 with round 3.
  for (ClientId id : clients) REQUIRE(h.coordinator->heartbeat(id, json::object()).ok());
  h.coordinator->tick();
  auto tasks = invitees(*h.coordinator, clients);
  REQUIRE_FALSE(tasks.empty());
  CHECK(tasks.begin()->second.round == 3);
  CHECK(tasks.begin()->second.model_version == 1);
}

TEST_CASE(
    "a graceful stop commits a round with enough updates, fails one without or of a cancelled "
    "job") {
  testing::TempDir dir;
  Harness h(dir);
  std::vector<ClientId> clients;
  for (int i = 0; i < 6; ++i) clients.push_back(h.add_client());
  // Job 1 commits with one update (min_updates 1); job 2 needs two and gets one.
  auto enough = h.coordinator->create_job(job_config({{"clients_per_round", 1}}));
  auto short_of = h.coordinator->create_job(job_config(
      {{"clients_per_round", 2}, {"min_updates", 2}, {"selection", {{"overcommit", 1}}}}));
  // Job 3 would commit, but is cancelled before the stop.
  auto cancelled = h.coordinator->create_job(job_config({{"clients_per_round", 1}}));
  REQUIRE(enough.ok());
  REQUIRE(short_of.ok());
  REQUIRE(cancelled.ok());
  h.coordinator->tick();
  std::map<JobId, ClientId> first_invitee;
  for (ClientId id : clients) {
    auto task = h.coordinator->next_task(id);
    REQUIRE(task.ok());
    if (*task && !first_invitee.count((*task)->job)) first_invitee[(*task)->job] = id;
  }
  REQUIRE(first_invitee.size() == 3);
  for (const auto& [job, client] : first_invitee) {
    const ModelBlob base = base_model(*h.coordinator, job, 0);
    REQUIRE(h.coordinator->submit_update(client, job, 1, meta(10), delta_blob(base, 0.1f)).ok());
  }

  REQUIRE(h.coordinator->control_job(cancelled->id, "cancel").ok());
  h.coordinator->conclude_rounds();
  auto committed = h.coordinator->job_detail(enough->id);
  auto failed = h.coordinator->job_detail(short_of->id);
  REQUIRE(committed.ok());
  REQUIRE(failed.ok());
  CHECK_FALSE(committed->current_round);
  CHECK_FALSE(failed->current_round);
  CHECK(committed->rounds[0].state == RoundState::kCommitted);
  CHECK(committed->summary.model_version == 1);
  CHECK(failed->rounds[0].state == RoundState::kFailed);
  CHECK(failed->rounds[0].metrics["failure"] == "coordinator stopped");
  auto stopped = h.coordinator->job_detail(cancelled->id);
  REQUIRE(stopped.ok());
  CHECK(stopped->rounds[0].state == RoundState::kFailed);
  CHECK(stopped->rounds[0].metrics["failure"] == "job cancelled");
  CHECK(stopped->summary.model_version == 0);
  // Nobody is blamed for a deadline the stop cut short.
  for (const auto& [client, why] : failed->rounds[0].metrics["dropped"].items()) {
    CHECK(why != "missed deadline");
  }
}

TEST_CASE("refused updates leave the store and the round unchanged") {
  testing::TempDir dir;
  Harness h(dir);
  std::vector<ClientId> clients;
  for (int i = 0; i < 5; ++i) clients.push_back(h.add_client());
  auto created = h.coordinator->create_job(job_config({{"max_update_norm", 1000}}));
  REQUIRE(created.ok());
  const JobId job = created->id;
  const ModelBlob base = base_model(*h.coordinator, job, 0);
  h.coordinator->tick();
  auto tasks = invitees(*h.coordinator, clients);
  REQUIRE(tasks.size() == 3);
  const ClientId invited = tasks.begin()->first;
  ClientId outsider = 0;
  for (ClientId id : clients) {
    if (!tasks.count(id)) outsider = id;
  }
  // An update's samples are its FedAvg weight: at most its task's whole batches.
  const scheduling::ClientTask& task = tasks.begin()->second.task;
  const uint64_t allowed = std::max<uint64_t>(task.samples, task.local_steps * task.batch_size);
  auto reader = h.reader();
  const json before = store_view(*reader, job);

  ModelBlob nan = base;
  nan.data.assign(base.layout.element_count(), 0);
  nan.data[3] = std::numeric_limits<float>::quiet_NaN();
  ModelBlob wrong_version = base;
  wrong_version.model_version = 7;
  ModelBlob wrong_shape{0, {{{"w", {3}}}}, {1, 2, 3}};
  struct Case {
    const char* what;
    JobId job;
    RoundIndex round;
    ClientId client;
    json meta;
    std::string blob;
    Code code;
  };
  const Case cases[] = {
      {"unknown job", job + 9, 1, invited, meta(1), delta_blob(base, 0), Code::kNotFound},
      {"closed round", job, 2, invited, meta(1), delta_blob(base, 0), Code::kConflict},
      {"not invited", job, 1, outsider, meta(1), delta_blob(base, 0), Code::kPermissionDenied},
      {"bad metadata", job, 1, invited, json{{"samples", 0}}, delta_blob(base, 0),
       Code::kInvalidArgument},
      {"not a blob", job, 1, invited, meta(1), "garbage", Code::kInvalidArgument},
      {"2^63 samples", job, 1, invited, json{{"samples", 9223372036854775808ull}},
       delta_blob(base, 0), Code::kInvalidArgument},
      {"more samples than its task allows", job, 1, invited, meta(allowed + 1),
       delta_blob(base, 0), Code::kInvalidArgument},
      {"NaN", job, 1, invited, meta(1), encode_blob(nan), Code::kUnprocessable},
      {"wrong version", job, 1, invited, meta(1), encode_blob(wrong_version), Code::kUnprocessable},
      {"wrong shape", job, 1, invited, meta(1), encode_blob(wrong_shape), Code::kUnprocessable},
      {"norm", job, 1, invited, meta(1), delta_blob(base, 100), Code::kUnprocessable},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    auto r = h.coordinator->submit_update(c.client, c.job, c.round, c.meta, c.blob);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == c.code);
    CHECK(store_view(*reader, job) == before);
  }
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  REQUIRE(detail->current_round);
  CHECK(detail->current_round->updates == 0);
  // The invitee whose uploads were refused may still upload a good one, of all its samples.
  REQUIRE(
      h.coordinator->submit_update(invited, job, 1, meta(allowed), delta_blob(base, 0.1f)).ok());
  CHECK(h.coordinator->submit_update(invited, job, 1, meta(10), delta_blob(base, 0.1f))
            .status()
            .code() == Code::kConflict);
}

TEST_CASE("a job that reaches its target finishes with that model; the round after it fails") {
  testing::TempDir dir;
  Harness h(dir);
  std::vector<ClientId> clients;
  for (int i = 0; i < 3; ++i) clients.push_back(h.add_client());
  // Any model beats 1% accuracy: the first evaluation reaches the target.
  auto created = h.coordinator->create_job(
      job_config({{"target_accuracy", 0.01}, {"selection", {{"overcommit", 1.0}}}}));
  REQUIRE(created.ok());
  const JobId job = created->id;
  const ModelBlob base = base_model(*h.coordinator, job, 0);
  h.coordinator->tick();
  for (const auto& [id, task] : invitees(*h.coordinator, clients)) {
    REQUIRE(h.coordinator->submit_update(id, job, 1, meta(10), delta_blob(base, 0.0f)).ok());
  }
  // Commit round 1, and open round 2 before the evaluation of model 1 is known.
  h.coordinator->tick();
  h.coordinator->tick();
  auto open = h.coordinator->job_detail(job);
  REQUIRE(open.ok());
  const ModelBlob v1 = base_model(*h.coordinator, job, 1);
  if (open->current_round) {
    for (const auto& [id, task] : invitees(*h.coordinator, clients)) {
      auto r = h.coordinator->submit_update(id, job, 2, meta(10), delta_blob(v1, 0.0f));
      CHECK((r.ok() || r.status().code() == Code::kConflict));
    }
  }
  // Round 2 is filled (or not open yet), but may not commit until model 1 is evaluated.
  bool finished = false;
  for (int i = 0; i < 200 && !finished; ++i) {
    h.coordinator->tick();
    auto jobs = h.coordinator->list_jobs();
    finished = jobs.at(0).state == JobState::kFinished;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  REQUIRE(finished);
  h.coordinator->tick();  // fails the round opened meanwhile
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  CHECK(detail->summary.model_version == 1);
  size_t committed = 0;
  for (const auto& r : detail->rounds) {
    if (r.state == RoundState::kCommitted) ++committed;
    if (r.index >= 2) {
      CHECK(r.state == RoundState::kFailed);
      CHECK(r.metrics["failure"] == "job reached its target");
    }
  }
  CHECK(committed == 1);
  CHECK_FALSE(detail->current_round);
}

TEST_CASE("cancel, pause and resume follow the job lifecycle") {
  testing::TempDir dir;
  Harness h(dir);
  auto created = h.coordinator->create_job(job_config());
  REQUIRE(created.ok());
  const JobId job = created->id;
  CHECK(h.coordinator->control_job(job, "resume").status().code() == Code::kConflict);
  CHECK(h.coordinator->control_job(job, "explode").status().code() == Code::kNotFound);
  CHECK(h.coordinator->control_job(job + 1, "pause").status().code() == Code::kNotFound);
  auto paused = h.coordinator->control_job(job, "pause");
  REQUIRE(paused.ok());
  CHECK(*paused == JobState::kPaused);
  REQUIRE(h.coordinator->control_job(job, "resume").ok());
  REQUIRE(h.coordinator->control_job(job, "cancel").ok());
  CHECK(h.coordinator->control_job(job, "resume").status().message() ==
        "cannot resume a job that is cancelled");
  auto reader = h.reader();
  auto stored = reader->get_job(job);
  REQUIRE(stored.ok());
  CHECK(stored->state == JobState::kCancelled);
}

}  // namespace
}  // namespace fedcase::server

namespace fedcase::server {
namespace {

// Stores a job whose model is one tensor of `parameters` floats, as a job created earlier
// would be: the coordinator resumes it when it opens the database.
JobId store_large_job(const testing::TempDir& dir, const std::string& name, size_t parameters) {
  auto store = storage::open_sqlite_store(dir.file("fedcase.db"));
  REQUIRE(store.ok());
  ModelBlob model{0, {{{"w", {parameters}}}}, std::vector<float>(parameters, 0.5f)};
  const std::string blob = encode_blob(model);
  const json config = job_config({{"name", name},
                                  {"clients_per_round", 1},
                                  {"min_clients", 1},
                                  {"selection", {{"overcommit", 1.0}}},
                                  {"training", {{"deadline", {{"seconds", 600}}}}}});
  auto id = (*store)->create_job({0, name, config, JobState::kRunning, json::object(), 1},
                                 {0, 0, blob, blob_checksum(blob), "", 1}, "");
  REQUIRE(id.ok());
  return *id;
}

TEST_CASE(
    "heartbeats and polls are answered within 50 ms while a round commits and a 40 MB "
    "update folds") {
  testing::TempDir dir;
  constexpr size_t kParameters = 10'000'000;  // 40 MB of float32
  const JobId job_a = store_large_job(dir, "a", kParameters);
  const JobId job_b = store_large_job(dir, "b", kParameters);
  Harness h(dir);
  std::vector<ClientId> clients;
  for (int i = 0; i < 6; ++i) clients.push_back(h.add_client());
  h.coordinator->tick();  // opens a round of each job, one invitee each
  std::map<JobId, ClientId> invitee;
  for (const auto& [client, offer] : invitees(*h.coordinator, clients)) invitee[offer.job] = client;
  REQUIRE(invitee.size() == 2);
  std::vector<ClientId> others;
  for (ClientId id : clients) {
    if (id != invitee[job_a] && id != invitee[job_b]) others.push_back(id);
  }
  ModelBlob base{0, {{{"w", {kParameters}}}}, {}};
  const std::string update_a = delta_blob(base, 0.01f), update_b = delta_blob(base, 0.02f);
  // Round b fills: the next tick concludes it (optimizer step, a 40 MB blob, a SQLite commit).
  REQUIRE(h.coordinator->submit_update(invitee[job_b], job_b, 1, meta(10), update_b).ok());

  std::atomic<int> busy{2};
  double commit_s = 0, fold_s = 0;
  auto timed = [&](double& seconds, auto work) {
    return std::thread([&, work] {
      const auto start = std::chrono::steady_clock::now();
      work();
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      --busy;
    });
  };
  std::thread committer = timed(commit_s, [&] { h.coordinator->tick(); });
  std::thread folder = timed(fold_s, [&] {
    CHECK(h.coordinator->submit_update(invitee[job_a], job_a, 1, meta(10), update_a).ok());
  });
  double slowest = 0;
  size_t calls = 0, failed = 0;
  while (busy > 0) {
    for (ClientId id : others) {
      const auto start = std::chrono::steady_clock::now();
      failed += !h.coordinator->heartbeat(id, json::object()).ok();
      failed += !h.coordinator->next_task(id).ok();
      slowest = std::max(
          slowest, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      ++calls;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
  committer.join();
  folder.join();
  MESSAGE("commit " << commit_s * 1e3 << " ms, fold " << fold_s * 1e3 << " ms, " << calls
                    << " heartbeat+poll pairs, slowest " << slowest * 1e3 << " ms");
  CHECK(failed == 0);
  CHECK(calls > 10);
  CHECK(slowest < 0.050);
  auto detail = h.coordinator->job_detail(job_b);
  REQUIRE(detail.ok());
  CHECK(detail->summary.model_version == 1);
  // Job a's update was folded meanwhile (its round may even have committed in the same tick).
  CHECK(h.reader()->list_updates(job_a, 1)->size() == 1);
}

}  // namespace
}  // namespace fedcase::server

namespace fedcase::server {
namespace {

TEST_CASE("finite updates whose sum overflows fail the round; no model holds Inf") {
  testing::TempDir dir;
  Harness h(dir);
  std::vector<ClientId> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(h.add_client());
  // No max_update_norm: only the finite-values check guards the updates.
  auto created = h.coordinator->create_job(job_config({{"selection", {{"overcommit", 1.0}}}}));
  REQUIRE(created.ok());
  const JobId job = created->id;
  const ModelBlob base = base_model(*h.coordinator, job, 0);
  h.coordinator->tick();
  for (const auto& [id, task] : invitees(*h.coordinator, clients)) {
    REQUIRE(h.coordinator->submit_update(id, job, 1, meta(10), delta_blob(base, 3e38f)).ok());
  }
  h.coordinator->tick();
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  REQUIRE(!detail->rounds.empty());
  CHECK(detail->rounds[0].state == RoundState::kFailed);
  CHECK(detail->rounds[0].metrics["failure"].get<std::string>().find("non-finite") !=
        std::string::npos);
  CHECK(detail->summary.model_version == 0);
  auto reader = h.reader();
  auto latest = reader->latest_model(job);
  REQUIRE(latest.ok());
  CHECK(latest->version == 0);
}

TEST_CASE("a model committed just before a crash is evaluated after the restart") {
  testing::TempDir dir;
  JobId job = 0;
  {
    // A committed round 1 whose evaluation never ran, as a crash right after the commit
    // leaves it.
    auto store = storage::open_sqlite_store(dir.file("fedcase.db"));
    REQUIRE(store.ok());
    auto built = ml::Model::create("mlp", 3);
    REQUIRE(built.ok());
    const std::string blob = encode_blob({0, built->layout(), built->parameters()});
    const std::string next = encode_blob({1, built->layout(), built->parameters()});
    auto id = (*store)->create_job({0, "crashed", job_config(), JobState::kRunning, {}, 1},
                                   {0, 0, blob, blob_checksum(blob), "", 1}, "");
    REQUIRE(id.ok());
    job = *id;
    storage::RoundRecord r{job, 1, RoundState::kOpen, 0, {}, 10, 70, 0, json::object()};
    REQUIRE((*store)->open_round(r).ok());
    r.closed_at = 20;
    r.metrics = {{"updates", 2}};
    REQUIRE((*store)
                ->commit_round(r, {job, 1, next, blob_checksum(next), "", 20}, json::object())
                .ok());
  }
  Harness h(dir);
  bool evaluated = false;
  for (int i = 0; i < 200 && !evaluated; ++i) {
    auto detail = h.coordinator->job_detail(job);
    REQUIRE(detail.ok());
    evaluated = detail->rounds.at(0).metrics.contains("test_accuracy");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(evaluated);
}

}  // namespace
}  // namespace fedcase::server

namespace fedcase::server {
namespace {

TEST_CASE("contacts reach the store in batches from the driver, never on a heartbeat") {
  testing::TempDir dir;
  Harness h(dir);
  const ClientId id = h.add_client();
  auto reader = h.reader();
  auto last_seen = [&] {
    auto c = reader->get_client(id);
    REQUIRE(c.ok());
    return c->last_seen;
  };
  const double registered = last_seen();
  h.now = 1010;
  REQUIRE(h.coordinator->heartbeat(id, json::object()).ok());
  CHECK(last_seen() == registered);  // in memory only
  h.coordinator->tick();             // not yet due: saved at most every 30 s
  CHECK(last_seen() == registered);
  h.now = 1040;
  REQUIRE(h.coordinator->heartbeat(id, json::object()).ok());
  CHECK(last_seen() == registered);
  h.coordinator->tick();
  CHECK(last_seen() == 1040);
}

TEST_CASE("a DP job's privacy spent survives a restart") {
  testing::TempDir dir;
  Harness h(dir);
  std::vector<ClientId> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(h.add_client());
  auto created = h.coordinator->create_job(
      job_config({{"selection", {{"overcommit", 1.0}}},
                  {"aggregation", {{"clip_norm", 1.0}, {"dp_noise_multiplier", 1.0}}}}));
  REQUIRE(created.ok());
  const JobId job = created->id;
  const ModelBlob base = base_model(*h.coordinator, job, 0);
  h.coordinator->tick();
  for (const auto& [id, task] : invitees(*h.coordinator, clients)) {
    REQUIRE(h.coordinator->submit_update(id, job, 1, meta(10), delta_blob(base, 0.001f)).ok());
  }
  h.coordinator->tick();
  auto before = h.coordinator->job_detail(job);
  REQUIRE(before.ok());
  REQUIRE(before->privacy.is_object());
  CHECK(before->privacy["rounds"] == 1);
  h.reopen();
  auto after = h.coordinator->job_detail(job);
  REQUIRE(after.ok());
  REQUIRE(after->privacy.is_object());
  CHECK(after->privacy["rounds"] == 1);
  CHECK(after->privacy["epsilon"] == before->privacy["epsilon"]);
}

TEST_CASE("a job no client can serve makes no overload and holds no other job back") {
  testing::TempDir dir;
  Harness h(dir);
  for (int i = 0; i < 3; ++i) h.add_client();
  auto tenant =
      h.coordinator->create_tenant({{"name", "team"}, {"limits", {{"max_running_jobs", 1}}}});
  REQUIRE(tenant.ok());
  const TenantId team = tenant->record.id;
  double retry = 0;
  // Two jobs whose labels no client has: they wait for clients, want none, hold nobody back.
  const json nobody = {{"client_labels", {{"region", "mars"}}}};
  REQUIRE(h.coordinator->create_job(job_config(nobody)).ok());
  auto stranded = h.coordinator->create_job(job_config(nobody), team, retry);
  REQUIRE(stranded.ok());
  // At its running-job cap, but the fleet is not overloaded: a one-client job is admitted.
  auto small = h.coordinator->create_job(
      job_config({{"clients_per_round", 1}, {"selection", {{"overcommit", 1.0}}}}), team, retry);
  REQUIRE_MESSAGE(small.ok(), small.status().to_string());
  h.coordinator->tick();
  auto opened = h.coordinator->job_detail(small->id);
  REQUIRE(opened.ok());
  CHECK(opened->current_round.has_value());
  auto waiting = h.coordinator->job_detail(stranded->id);
  REQUIRE(waiting.ok());
  CHECK_FALSE(waiting->current_round.has_value());
  // The tenant's scope sees its own jobs only.
  CHECK(h.coordinator->list_jobs(team).size() == 2);
  CHECK(h.coordinator->job_detail(1, team).status().code() == Code::kNotFound);
}

TEST_CASE("a job's own duration priors do not lower its tenant's charge") {
  testing::TempDir dir;
  Harness h(dir);
  for (int i = 0; i < 4; ++i) h.add_client();  // nothing measured yet: priors stand in
  auto cheap = h.coordinator->create_tenant({{"name", "cheap"}});
  auto pricey = h.coordinator->create_tenant({{"name", "pricey"}});
  REQUIRE(cheap.ok());
  REQUIRE(pricey.ok());
  const json two = {{"clients_per_round", 2}, {"selection", {{"overcommit", 1.0}}}};
  json slow = job_config(two);
  slow["training"]["priors"] = {{"compute_ms_per_sample", 1e6}};
  double retry = 0;
  REQUIRE(h.coordinator->create_job(job_config(two), cheap->record.id, retry).ok());
  REQUIRE(h.coordinator->create_job(slow, pricey->record.id, retry).ok());
  h.coordinator->tick();  // both rounds open, each charged at its open
  const json view = tenants_json(h.coordinator->tenants());
  std::map<std::string, double> counter;
  for (const json& t : view["tenants"]) {
    counter[t["name"].get<std::string>()] = t["counter"].get<double>();
  }
  // The cheap job is charged its two tasks; the job claiming slow devices is charged what
  // its claim says its tasks take, in the fleet's own tasks, not two tasks of its own price.
  CHECK(counter["cheap"] == doctest::Approx(2));
  CHECK(counter["pricey"] > 100 * counter["cheap"]);
}
}  // namespace
}  // namespace fedcase::server
