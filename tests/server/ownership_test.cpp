// Replicas on one PostgreSQL database (a private server, tests/support/postgres_server.h): two
// real coordinators in this process, each with its own store, driven by hand. A job is driven
// by the replica holding its lease; an owner that stops renewing is replaced, and once
// replaced it commits nothing and steps down (server/core/ownership.h); then it serves the new
// owner's shared round, whose owner merges its partial (server/core/shared_rounds.h).

#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "protocol/base64.h"
#include "secagg/client.h"
#include "secagg/round_crypto.h"
#include "server/core/coordinator.h"
#include "tests/server/coordinator_fixture.h"
#include "tests/support/failing_store.h"
#include "tests/support/postgres_server.h"

namespace fedcase::server {
namespace {

using nlohmann::json;
using namespace fixture;

constexpr double kLeaseS = 3;

// A replica named `name` on the database `url`, on the clock `clock`; `wrap` may wrap its store
// (e.g. in a testing::failing_store).
std::unique_ptr<Coordinator> replica(const std::string& url, const std::string& name, Clock clock,
                                     const StoreWrapper& wrap = {}) {
  CoordinatorConfig config =
      parse_coordinator_config({{"database", url},
                                {"admin_token", "admin-token-0123456789"},
                                {"enrollment_token", "enroll-token-0123456789"},
                                {"replica_id", name},
                                {"lease_s", kLeaseS}});
  auto store = storage::open_store(url);
  REQUIRE(store.ok());
  std::unique_ptr<storage::Store> opened_store = std::move(store).value();
  if (wrap) opened_store = wrap(std::move(opened_store));
  auto opened = Coordinator::open(config, std::move(opened_store),
                                  std::make_unique<TestSetEvaluator>(small_test_set(), 200, 1),
                                  std::move(clock));
  REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
  return std::move(opened).value();
}

storage::LeaseRecord lease_of(storage::Store& store, JobId job) {
  auto leases = store.list_leases();
  REQUIRE(leases.ok());
  for (const auto& lease : *leases) {
    if (lease.job == job) return lease;
  }
  FAIL("no lease for job " << job);
  return {};
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A secure job of three clients a round on `replica`, and its three clients, each registered
// with a signing key.
struct SecureJob {
  JobId id = 0;
  std::vector<ClientId> clients;
  std::map<ClientId, secagg::KeyPair> signing;
};
SecureJob create_secure_job(Coordinator& replica) {
  SecureJob out;
  for (int i = 0; i < 3; ++i) {
    auto key = secagg::generate_signing_key();
    REQUIRE(key.ok());
    const json registration = {
        {"dataset_size", 100},
        {"signing_public_key",
         protocol::encode_base64(std::string(secagg::as_view(key->public_key)))}};
    auto registered = replica.register_client(registration);
    REQUIRE(registered.ok());
    out.clients.push_back(registered->id);
    out.signing[registered->id] = *key;
  }
  auto created =
      replica.create_job(job_config({{"clients_per_round", 3},
                                     {"min_updates", 2},
                                     {"selection", {{"overcommit", 1.0}}},
                                     {"secure_aggregation", {{"threshold", 2}, {"clip", 5}}}}));
  REQUIRE_MESSAGE(created.ok(), created.status().to_string());
  out.id = created->id;
  return out;
}

TEST_CASE("a replaced owner commits nothing and steps down; the new owner goes on") {
  testing::PostgresServer& server = testing::PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  auto reader = storage::open_store(url);
  REQUIRE(reader.ok());
  storage::Store& db = **reader;

  // Replica a, whose clock the test holds still while it is "paused".
  std::atomic<double> a_now{wall_clock()};
  auto a = replica(url, "a", [&a_now] { return a_now.load(); });
  std::vector<ClientId> clients;
  std::map<ClientId, std::string> tokens;
  for (int i = 0; i < 2; ++i) {
    auto r = a->register_client({{"dataset_size", 100}});
    REQUIRE(r.ok());
    clients.push_back(r->id);
  }
  auto created = a->create_job(job_config({{"selection", {{"overcommit", 1.0}}}}));
  REQUIRE(created.ok());
  const JobId job = created->id;
  CHECK(lease_of(db, job).epoch == storage::kUnleased);  // nobody drives it before a lease

  // a acquires the job and opens round 1 at epoch 1.
  a->tick();
  storage::LeaseRecord lease = lease_of(db, job);
  CHECK(lease.holder == "a");
  CHECK(lease.epoch == 1);
  auto rounds = db.list_rounds(job);
  REQUIRE(rounds.ok());
  REQUIRE(rounds->size() == 1);
  CHECK(rounds->at(0).state == RoundState::kOpen);
  CHECK(rounds->at(0).epoch == 1);
  const std::map<ClientId, TaskOffer> tasks = invitees(*a, clients);
  REQUIRE(tasks.size() == 2);
  const ModelBlob base = base_model(*a, job, 0);

  // b starts beside it: it knows the job and the clients, and drives nothing while a's lease
  // runs.
  auto b = replica(url, "b", wall_clock);
  b->tick();
  CHECK(lease_of(db, job).holder == "a");
  CHECK(b->list_jobs().size() == 1);
  CHECK(db.list_rounds(job)->size() == 1);

  // a is paused past its lease (no pass, no renewal): b takes the job over at epoch 2, fails
  // a's round and opens round 2.
  usleep(static_cast<useconds_t>((kLeaseS + 0.5) * 1e6));
  b->tick();
  lease = lease_of(db, job);
  CHECK(lease.holder == "b");
  CHECK(lease.epoch == 2);
  rounds = db.list_rounds(job);
  REQUIRE(rounds->size() == 2);
  CHECK(rounds->at(0).state == RoundState::kFailed);
  CHECK(rounds->at(0).epoch == 2);
  CHECK(rounds->at(0).metrics["failure"] == "the job's owner changed while the round was open");
  CHECK(rounds->at(1).state == RoundState::kOpen);
  CHECK(rounds->at(1).epoch == 2);
  CHECK(contains(b->metrics().render(), "fedcase_lease_changes_total{change=\"acquired\"} 1"));

  // a resumes where it stopped, before its next pass: its round is shared, so its invitees'
  // uploads are admitted through the store, which refuses them (b failed the round): nothing
  // of a's round lands, and it commits nothing.
  for (const auto& [client, task] : tasks) {
    auto accepted = a->submit_update(client, job, task.round, meta(10), delta_blob(base, 0.5f));
    CHECK(accepted.status().code() == Code::kConflict);
  }
  CHECK(db.list_updates(job, 1)->empty());
  a_now = a_now.load() + 0.01;
  a->tick();
  CHECK(db.get_model(job, 1).status().code() == Code::kNotFound);
  CHECK(db.latest_model(job)->version == 0);
  rounds = db.list_rounds(job);
  CHECK(rounds->at(0).state == RoundState::kFailed);  // still b's failure, not a's commit
  CHECK(rounds->at(0).metrics["failure"] == "the job's owner changed while the round was open");
  // a's next pass finds its renewal refused: it steps down, and does not acquire the job back.
  a_now = a_now.load() + kLeaseS;
  a->tick();
  const std::string a_metrics = a->metrics().render();
  CHECK(contains(a_metrics, "fedcase_lease_changes_total{change=\"lost\"} 1"));
  CHECK(contains(a_metrics, "fedcase_jobs_owned 0"));
  CHECK(lease_of(db, job).holder == "b");
  CHECK(lease_of(db, job).epoch == 2);
  // a now serves b's open round 2 as every other replica does: the same tasks as b's.
  a_now = a_now.load() + 1;
  a->tick();
  auto a_round = a->job_detail(job)->current_round;
  REQUIRE(a_round);
  CHECK(a_round->index == 2);

  // b's round 2 commits version 2 from its invitees' updates, one admitted by b and one by a,
  // whose partial b merges.
  const std::map<ClientId, TaskOffer> b_tasks = invitees(*b, clients);
  REQUIRE(b_tasks.size() == 2);
  const std::map<ClientId, TaskOffer> a_tasks = invitees(*a, clients);
  REQUIRE(a_tasks.size() == 2);
  Coordinator* via[] = {b.get(), a.get()};
  size_t i = 0;
  for (const auto& [client, task] : b_tasks) {
    CHECK(task.round == 2);
    CHECK(a_tasks.at(client).round == 2);
    CHECK(a_tasks.at(client).task.batch_size == task.task.batch_size);
    CHECK(a_tasks.at(client).deadline == task.deadline);
    REQUIRE(via[i++]->submit_update(client, job, 2, meta(10), delta_blob(base, 0.25f)).ok());
  }
  // Neither replica hands a client its task again once one of them admitted its update.
  for (const auto& [client, task] : b_tasks) {
    for (Coordinator* replica : via) {
      auto again = replica->next_task(client);
      REQUIRE(again.ok());
      CHECK_FALSE(again->has_value());
    }
  }
  // The second upload of a client is refused whichever replica it reaches.
  CHECK(a->submit_update(b_tasks.begin()->first, job, 2, meta(10), delta_blob(base, 0.25f))
            .status()
            .code() == Code::kConflict);
  b->tick();  // K recorded: b closes admission
  a_now = a_now.load() + 1;
  a->tick();  // a writes its partial
  b->tick();  // b merges it and commits
  auto committed = db.get_model(job, 2);
  REQUIRE(committed.ok());
  CHECK(db.list_rounds(job)->at(1).state == RoundState::kCommitted);
  CHECK(db.list_rounds(job)->at(1).epoch == 2);
  CHECK(db.list_rounds(job)->at(1).metrics["updates"] == 2);
  CHECK(db.list_rounds(job)->at(1).metrics["partials"]["merged"]["a"] == 1);

  // a job created through b is seen by a, which holds fewer jobs and so acquires it.
  auto second = b->create_job(job_config({{"name", "second"}}));
  REQUIRE(second.ok());
  a_now = a_now.load() + kLeaseS;
  a->tick();
  CHECK(a->list_jobs().size() == 2);
  CHECK(lease_of(db, second->id).holder == "a");
  // a sees the version b committed of the first job.
  CHECK(a->job_detail(job)->summary.model_version == 2);

  // A graceful stop gives the leases up at once.
  a->conclude_rounds();
  CHECK_FALSE(lease_of(db, second->id).held());
  b->conclude_rounds();
  CHECK_FALSE(lease_of(db, job).held());
}

// Ticks every replica of `replicas` (each once a pass is due) until `done` holds, at most
// `seconds`; whether it did.
bool tick_until(const std::vector<Coordinator*>& replicas, const std::function<bool()>& done,
                double seconds = 12) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < until) {
    for (Coordinator* r : replicas) r->tick();
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// The job's round `index` as the store holds it.
storage::RoundRecord stored_round(storage::Store& store, JobId job, RoundIndex index) {
  auto rounds = store.list_rounds(job);
  REQUIRE(rounds.ok());
  for (const auto& r : *rounds) {
    if (r.index == index) return r;
  }
  FAIL("job " << job << " has no round " << index);
  return {};
}

TEST_CASE("pausing and resuming a job through any replica loses no update another admitted") {
  testing::PostgresServer& server = testing::PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  auto reader = storage::open_store(url);
  REQUIRE(reader.ok());
  storage::Store& db = **reader;
  auto a = replica(url, "a", wall_clock);
  std::vector<ClientId> clients;
  for (int i = 0; i < 4; ++i) {
    auto r = a->register_client({{"dataset_size", 100}});
    REQUIRE(r.ok());
    clients.push_back(r->id);
  }
  auto created = a->create_job(job_config({{"clients_per_round", 4},
                                           {"selection", {{"overcommit", 1.0}}},
                                           {"training", {{"deadline", {{"seconds", 600}}}}}}));
  REQUIRE(created.ok());
  const JobId job = created->id;
  a->tick();  // a acquires the job and opens round 1, shared
  REQUIRE(lease_of(db, job).holder == "a");
  auto b = replica(url, "b", wall_clock);
  REQUIRE(tick_until({b.get()}, [&] { return invitees(*b, clients).size() == 4; }));
  const ModelBlob base = base_model(*a, job, 0);

  // Two updates admitted by b, the other replica.
  for (size_t i = 0; i < 2; ++i) {
    auto accepted = b->submit_update(clients[i], job, 1, meta(10), delta_blob(base, 0.5f));
    REQUIRE_MESSAGE(accepted.ok(), accepted.status().to_string());
  }
  // The operator pauses the job through b and resumes it through a, with passes between.
  REQUIRE(b->control_job(job, "pause").ok());
  std::this_thread::sleep_for(std::chrono::seconds(1));
  a->tick();
  b->tick();
  REQUIRE(a->control_job(job, "resume").ok());
  std::this_thread::sleep_for(std::chrono::seconds(1));
  a->tick();
  b->tick();
  // The other two through a: the round is filled and commits with all four.
  for (size_t i = 2; i < 4; ++i) {
    auto accepted = a->submit_update(clients[i], job, 1, meta(10), delta_blob(base, 0.5f));
    REQUIRE_MESSAGE(accepted.ok(), accepted.status().to_string());
  }
  REQUIRE(tick_until({a.get(), b.get()},
                     [&] { return stored_round(db, job, 1).state != RoundState::kOpen; }));
  const storage::RoundRecord round = stored_round(db, job, 1);
  CHECK(round.state == RoundState::kCommitted);
  CHECK(round.metrics["updates"] == 4);
  CHECK(db.list_updates(job, 1)->size() == 4);
  for (Coordinator* r : {a.get(), b.get()}) {
    CHECK_FALSE(contains(r->metrics().render(), "\nfedcase_partial_updates_lost_total "));
  }
}

TEST_CASE("a secure stage request about a plain job's round is answered at once by every replica") {
  testing::PostgresServer& server = testing::PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  auto a = replica(url, "a", wall_clock);
  std::vector<ClientId> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(a->register_client({{"dataset_size", 100}})->id);
  auto created = a->create_job(job_config({{"selection", {{"overcommit", 1.0}}}}));
  REQUIRE(created.ok());
  a->tick();
  auto b = replica(url, "b", wall_clock);
  REQUIRE(tick_until({b.get()}, [&] { return invitees(*b, clients).size() == 2; }));
  for (Coordinator* r : {a.get(), b.get()}) {
    for (RoundIndex round : {RoundIndex(1), RoundIndex(2)}) {
      const auto start = std::chrono::steady_clock::now();
      auto stages = r->secure_round(created->id, round);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      CHECK(stages.status().code() == Code::kConflict);
      CHECK_MESSAGE(seconds < 0.5, "a request thread waited ", seconds, " s");
    }
  }
}

TEST_CASE("a replica asked about a round it has not followed yet says retry at once, then serves") {
  testing::PostgresServer& server = testing::PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  auto a = replica(url, "a", wall_clock);
  std::vector<ClientId> clients;
  for (int i = 0; i < 2; ++i) clients.push_back(a->register_client({{"dataset_size", 100}})->id);
  auto created = a->create_job(job_config({{"selection", {{"overcommit", 1.0}}},
                                           {"training", {{"deadline", {{"seconds", 600}}}}}}));
  REQUIRE(created.ok());
  const JobId job = created->id;
  a->tick();  // a owns the job and opens round 1
  const std::map<ClientId, TaskOffer> tasks = invitees(*a, clients);
  REQUIRE(tasks.size() == 2);
  const ModelBlob base = base_model(*a, job, 0);

  // b knows the job, not yet its round: every request about the round is told to retry, at
  // once (no request thread waits for the store).
  auto b = replica(url, "b", wall_clock);
  REQUIRE(b->list_jobs().size() == 1);
  const ClientId client = clients[0];
  auto timed = [](auto call) {
    const auto start = std::chrono::steady_clock::now();
    const Code code = call();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK_MESSAGE(seconds < 0.5, "a request thread waited ", seconds, " s");
    return code;
  };
  CHECK(timed([&] { return b->task_status(client, job, 1).status().code(); }) ==
        Code::kUnavailable);
  CHECK(timed([&] { return b->model(job, 0, std::nullopt, client).status().code(); }) ==
        Code::kUnavailable);
  CHECK(timed([&] {
          return b->submit_update(client, job, 1, meta(10), delta_blob(base, 0.5f))
              .status()
              .code();
        }) == Code::kUnavailable);
  CHECK(stored_round(*storage::open_store(url).value(), job, 1).admitted == 0);

  // Once b read the store, it serves the round: the same requests succeed.
  REQUIRE(tick_until({b.get()}, [&] {
    auto status = b->task_status(client, job, 1);
    return status.ok() && *status == rounds::Admission::kWanted;
  }));
  CHECK(b->model(job, 0, std::nullopt, client).ok());
  auto accepted = b->submit_update(client, job, 1, meta(10), delta_blob(base, 0.5f));
  CHECK_MESSAGE(accepted.ok(), accepted.status().to_string());
  // A round it read that admits nothing any more is answered as closed, not "retry".
  REQUIRE(a->control_job(job, "cancel").ok());
  REQUIRE(tick_until({a.get(), b.get()}, [&] {
    auto status = b->task_status(clients[1], job, 1);
    return status.ok() && *status == rounds::Admission::kClosed;
  }));
  CHECK(b->submit_update(clients[1], job, 1, meta(10), delta_blob(base, 0.5f)).status().code() ==
        Code::kConflict);
}

TEST_CASE("the owner serves a secure stage's messages only once the store holds them") {
  testing::PostgresServer& server = testing::PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  auto reader = storage::open_store(url);
  REQUIRE(reader.ok());
  auto faults = std::make_shared<testing::StoreFaults>();
  auto a = replica(url, "a", wall_clock, [&](std::unique_ptr<storage::Store> store) {
    return testing::failing_store(std::move(store), faults);
  });
  const SecureJob secure_job = create_secure_job(*a);
  const std::vector<ClientId>& clients = secure_job.clients;
  const std::map<ClientId, secagg::KeyPair>& signing = secure_job.signing;
  const JobId job = secure_job.id;
  a->tick();
  REQUIRE(invitees(*a, clients).size() == 3);
  auto stages = a->secure_round(job, 1);
  REQUIRE_MESSAGE(stages.ok(), stages.status().to_string());
  std::vector<std::unique_ptr<secagg::SecAggClient>> secure;
  for (ClientId c : clients) {
    secure.push_back(std::make_unique<secagg::SecAggClient>(job, 1, c, signing.at(c).private_key));
    auto keys = secure.back()->advertise_keys();
    REQUIRE(keys.ok());
    REQUIRE((*stages)->receive_keys(c, *keys).ok());
  }
  // The key stage closes (every invitee answered); its messages reach the store 2 s later.
  faults->delay(testing::StoreMethod::kPutStageMessages, 2.0);
  std::thread closing([&] { a->tick(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  // Meanwhile no client may have its key reply from the owner: its next request may reach a
  // replica that can only read the store.
  CHECK((*reader)->list_stage_messages(job, 1, "keys_reply")->empty());
  auto early = (*stages)->keys_reply(clients[0]);
  CHECK((!early.ok() || !early->has_value()));
  closing.join();
  CHECK((*reader)->list_stage_messages(job, 1, "keys_reply")->size() == 3);
  auto reply = (*a->secure_round(job, 1))->keys_reply(clients[0]);
  REQUIRE(reply.ok());
  CHECK(reply->has_value());
}

TEST_CASE("a public key of one round is refused in the next by the replica that took the job over") {
  testing::PostgresServer& server = testing::PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  auto reader = storage::open_store(url);
  REQUIRE(reader.ok());
  std::atomic<double> a_now{wall_clock()};
  auto a = replica(url, "a", [&a_now] { return a_now.load(); });
  const SecureJob secure_job = create_secure_job(*a);
  const std::vector<ClientId>& clients = secure_job.clients;
  const std::map<ClientId, secagg::KeyPair>& signing = secure_job.signing;
  const JobId job = secure_job.id;
  a->tick();
  REQUIRE(invitees(*a, clients).size() == 3);
  auto first = a->secure_round(job, 1);
  REQUIRE_MESSAGE(first.ok(), first.status().to_string());
  std::map<ClientId, protocol::SecAggAdvertiseKeys> advertised;
  for (ClientId c : clients) {
    secagg::SecAggClient client(job, 1, c, signing.at(c).private_key);
    auto keys = client.advertise_keys();
    REQUIRE(keys.ok());
    REQUIRE((*first)->receive_keys(c, *keys).ok());
    advertised[c] = *keys;
  }
  a->tick();  // every invitee answered: the key stage closes, its keys are stored
  CHECK((*reader)->list_used_keys(job)->size() == 6);

  // a stops driving the job past its lease; b takes it over and opens round 2.
  auto b = replica(url, "b", wall_clock);
  usleep(static_cast<useconds_t>((kLeaseS + 0.5) * 1e6));
  b->tick();
  REQUIRE(lease_of(**reader, job).holder == "b");
  auto second = b->secure_round(job, 2);
  REQUIRE_MESSAGE(second.ok(), second.status().to_string());
  // A client advertises its round-1 keys again, signed for round 2: refused.
  const ClientId c = clients[0];
  protocol::SecAggAdvertiseKeys replayed = advertised[c];
  replayed.round = 2;
  auto signature = secagg::sign(
      signing.at(c).private_key,
      secagg::advertised_keys_message(job, 2, c, replayed.cipher_public_key,
                                      replayed.mask_public_key));
  REQUIRE(signature.ok());
  replayed.signature = *signature;
  Status refused = (*second)->receive_keys(c, replayed);
  CHECK(refused.code() == Code::kPermissionDenied);
  CHECK(refused.message().find("replays a public key of an earlier round") != std::string::npos);
  // Fresh keys are taken.
  secagg::SecAggClient fresh(job, 2, c, signing.at(c).private_key);
  CHECK((*second)->receive_keys(c, *fresh.advertise_keys()).ok());
}

}  // namespace
}  // namespace fedcase::server
