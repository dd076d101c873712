// Coordinator processes as replicas on one PostgreSQL database (a private server,
// tests/support/postgres_server.h) with real client fleets (docs/scaling.md "Replicas"):
//  - the owner is frozen with SIGSTOP past its lease, the other replica takes the job over, and
//    once the owner is let go again (SIGCONT) it commits nothing and steps down
//    (server/core/ownership.h);
//  - the owner is killed and the fleet fails over to the other replica;
//  - three replicas train one job together, each client talking to a different replica: the
//    non-owners serve the owner's round, admit their clients' updates through the store and
//    write partials, which the owner merges (server/core/shared_rounds.h); for a FedAvg job a
//    partial is one model, for a median job it gathers every update at the owner, for a job
//    with secure aggregation it is the sum of the replica's masked inputs, and the stage
//    messages pass between the clients and the owner through the store;
//  - a replica holding admitted updates dies before writing its partial: the owner commits
//    without them lease_s after the close.

#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "client_sdk/fleet.h"
#include "storage/store.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/coordinator_process.h"
#include "tests/support/postgres_server.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A job of three clients a round, long enough to outlast the test.
json training_job(const std::string& name) {
  return {{"name", name},
          {"model", "mlp"},
          {"rounds", 50},
          {"clients_per_round", 3},
          {"selection", {{"overcommit", 1.0}}},
          {"training", {{"lr", 0.05}, {"deadline", {{"mode", "fixed"}, {"seconds", 60}}}}}};
}

storage::LeaseRecord lease_of(storage::Store& store, JobId job) {
  auto leases = store.list_leases();
  REQUIRE(leases.ok());
  for (const auto& lease : *leases) {
    if (lease.job == job) return lease;
  }
  return {};
}

// Replica `name` on the database `url` (its config, port file and log in `dir`), started, and
// the port it listens on.
struct Replica {
  Replica(const TempDir& dir, const std::string& name, const std::string& url)
      : process(write_replica_config(dir, name, url), dir.file(name + ".log")),
        port(wait_for_port(dir.file(name + ".port"))) {
    REQUIRE(port != 0);
  }
  CoordinatorProcess process;
  const uint16_t port;
};

// A job whose rounds every replica serves: `k` updates a round, each invitee's task within
// `deadline_s`.
json shared_job(const std::string& name, size_t k, double deadline_s) {
  json job = training_job(name);
  job["clients_per_round"] = k;
  job["training"]["deadline"]["seconds"] = deadline_s;
  return job;
}

// Committed rounds of `job` in `db`, in index order.
std::vector<storage::RoundRecord> committed_rounds(storage::Store& db, JobId job) {
  auto rounds = db.list_rounds(job);
  REQUIRE(rounds.ok());
  std::vector<storage::RoundRecord> out;
  for (auto& r : *rounds) {
    if (r.state == RoundState::kCommitted) out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

TEST_CASE(
    "a client registered through one replica is known to another within a second, which "
    "reads that row alone") {
  PostgresServer& server = PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  TempDir dir;
  const json many_registrations = {{"requests_per_second", 1e4}};  // one enrollment token
  CoordinatorProcess a(write_replica_config(dir, "a", url, many_registrations), dir.file("a.log"));
  CoordinatorProcess b(write_replica_config(dir, "b", url), dir.file("b.log"));
  const uint16_t a_port = wait_for_port(dir.file("a.port"), dir.file("a.log"));
  const uint16_t b_port = wait_for_port(dir.file("b.port"), dir.file("b.log"));
  REQUIRE(a_port != 0);
  REQUIRE(b_port != 0);
  Caller enroll(a_port, kEnrollmentToken);
  Caller admin_b(b_port, kAdminToken);
  auto known_to_b = [&] { return admin_b.get("/v1/admin/clients").body.value("total", 0); };
  constexpr int kFleet = 300;
  for (int i = 0; i < kFleet; ++i) {
    REQUIRE(enroll.post("/v1/clients/register", {{"dataset_size", 100}}).status == 201);
  }
  REQUIRE(wait_until([&] { return known_to_b() == kFleet; }, 30));

  // Nothing changes: B reads no client row, however many there are.
  auto rows_read = [&] {
    return metric_value(admin_b.get("/metrics").raw, "fedcase_client_rows_read_total");
  };
  const double idle_from = rows_read();
  std::this_thread::sleep_for(std::chrono::seconds(6));  // past B's 5 s reading
  CHECK(rows_read() == idle_from);

  // One registration through A: its wake-up makes B read what changed at once, one row.
  const auto registered = std::chrono::steady_clock::now();
  REQUIRE(enroll.post("/v1/clients/register", {{"dataset_size", 100}}).status == 201);
  REQUIRE(wait_until([&] { return known_to_b() == kFleet + 1; }, 10));
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - registered).count();
  MESSAGE("replica B knew of the new client after " << took << " s");
  CHECK(took < 1.5);  // the bound: 0.5 s between readings, and the driver's tick
  CHECK(rows_read() == idle_from + 1);
}

TEST_CASE("a frozen owner is replaced; let go again, it commits nothing and steps down") {
  PostgresServer& server = PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  TempDir dir;
  CoordinatorProcess a(write_replica_config(dir, "a", url), dir.file("a.log"));
  const uint16_t a_port = wait_for_port(dir.file("a.port"));
  REQUIRE(a_port != 0);
  Caller admin_a(a_port, kAdminToken);
  REQUIRE(admin_a.post("/v1/admin/jobs", training_job("fenced")).status == 201);
  ml::Dataset slice = ml::head(fmnist_train(), 1500);
  auto fleet = client::Fleet::start(test_fleet(a_port, 3, slice));
  REQUIRE(fleet.ok());

  auto reader = storage::open_store(url);
  REQUIRE(reader.ok());
  storage::Store& db = **reader;
  auto committed = [&] {
    auto rounds = db.list_rounds(1);
    REQUIRE(rounds.ok());
    size_t n = 0;
    for (const auto& r : *rounds) n += r.state == RoundState::kCommitted;
    return n;
  };
  REQUIRE(wait_until([&] { return committed() >= 2; }, 120));
  CHECK(lease_of(db, 1).holder == "a");
  const storage::Epoch a_epoch = lease_of(db, 1).epoch;

  CoordinatorProcess b(write_replica_config(dir, "b", url), dir.file("b.log"));
  const uint16_t b_port = wait_for_port(dir.file("b.port"));
  REQUIRE(b_port != 0);
  Caller admin_b(b_port, kAdminToken);
  CHECK(lease_of(db, 1).holder == "a");  // b waits while a renews

  REQUIRE(::kill(a.pid(), SIGSTOP) == 0);
  const auto frozen = std::chrono::steady_clock::now();
  // Whether a left a round open (it may be frozen between a commit and the next opening):
  // read once what a wrote before it stopped has landed.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto at_freeze = db.list_rounds(1);
  REQUIRE(at_freeze.ok());
  const bool left_open = !at_freeze->empty() && at_freeze->back().state == RoundState::kOpen;
  const bool taken_over = wait_until([&] { return lease_of(db, 1).holder == "b"; }, 20);
  REQUIRE_MESSAGE(taken_over, "b's log:\n" << read_file(dir.file("b.log")));
  const double takeover_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen).count();
  MESSAGE("takeover " << takeover_s << " s after the owner froze (lease " << kTestLeaseS << " s)");
  CHECK(takeover_s < kTestLeaseS + 2);
  const storage::Epoch b_epoch = lease_of(db, 1).epoch;
  CHECK(b_epoch > a_epoch);

  REQUIRE(::kill(a.pid(), SIGCONT) == 0);
  // a's next pass finds its renewal refused (or its next write fenced) and it steps down. (It
  // may acquire the job again later, at a newer epoch, if b's lease ever lapses.)
  auto lease_changes = [&] {
    const std::string page = admin_a.get("/metrics").raw;
    return std::max(metric_value(page, "fedcase_lease_changes_total{change=\"lost\"}"),
                    metric_value(page, "fedcase_lease_changes_total{change=\"stepped_down\"}"));
  };
  const bool stepped_down = wait_until([&] { return lease_changes() >= 1; }, 20);
  REQUIRE_MESSAGE(stepped_down, "a's metrics:\n"
                                    << admin_a.get("/metrics").raw << "\na's log:\n"
                                    << read_file(dir.file("a.log")));
  std::this_thread::sleep_for(std::chrono::seconds(2));
  CHECK(lease_of(db, 1).epoch >= b_epoch);

  // Nothing of a's landed after b's acquisition: every round written at a's epoch comes before
  // the first one b wrote, and the versions only grow.
  auto rounds = db.list_rounds(1);
  REQUIRE(rounds.ok());
  RoundIndex first_of_b = 0;
  for (const auto& r : *rounds) {
    if (r.epoch == b_epoch && first_of_b == 0) first_of_b = r.index;
  }
  REQUIRE(first_of_b > 0);
  uint64_t last_version = 0;
  for (const auto& r : *rounds) {
    if (r.epoch == a_epoch) CHECK(r.index < first_of_b);
    if (r.state != RoundState::kCommitted) continue;
    CHECK(r.index > last_version);
    last_version = r.index;
    CHECK(db.get_model(1, r.index).ok());
  }
  // The round a left open, if any, was failed by b, at b's epoch.
  bool failed_by_b = false;
  for (const auto& r : *rounds) {
    failed_by_b |=
        r.state == RoundState::kFailed && r.epoch == b_epoch &&
        r.metrics.value("failure", "") == "the job's owner changed while the round was open";
  }
  std::string states;
  for (const auto& r : *rounds) {
    states += std::to_string(r.index) + ": " + std::string(state_name(r.state)) + " at epoch " +
              std::to_string(r.epoch) + " " + r.metrics.value("failure", "") + "\n";
  }
  CHECK_MESSAGE(failed_by_b == left_open, "b's epoch " << b_epoch << ", rounds:\n" << states);
  // Both replicas list the job at the same committed version.
  REQUIRE(wait_until(
      [&] {
        return admin_a.get("/v1/admin/jobs/1").body["model_version"] ==
               admin_b.get("/v1/admin/jobs/1").body["model_version"];
      },
      10));
  (*fleet)->stop();
}

TEST_CASE("the owner killed, the other replica drives the job and the fleet fails over to it") {
  PostgresServer& server = PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  TempDir dir;
  auto a =
      std::make_unique<CoordinatorProcess>(write_replica_config(dir, "a", url), dir.file("a.log"));
  const uint16_t a_port = wait_for_port(dir.file("a.port"));
  REQUIRE(a_port != 0);
  Caller admin_a(a_port, kAdminToken);
  REQUIRE(admin_a.post("/v1/admin/jobs", training_job("failover")).status == 201);
  auto reader = storage::open_store(url);
  REQUIRE(reader.ok());
  storage::Store& db = **reader;
  REQUIRE(wait_until([&] { return lease_of(db, 1).holder == "a"; }, 10));

  CoordinatorProcess b(write_replica_config(dir, "b", url), dir.file("b.log"));
  const uint16_t b_port = wait_for_port(dir.file("b.port"));
  REQUIRE(b_port != 0);
  ml::Dataset slice = ml::head(fmnist_train(), 1500);
  client::FleetConfig fleet_config = test_fleet(a_port, 3, slice);
  fleet_config.replicas = {client::plain_connection("127.0.0.1", b_port)};
  auto fleet = client::Fleet::start(fleet_config);
  REQUIRE(fleet.ok());
  auto committed_at = [&](storage::Epoch epoch) {
    auto rounds = db.list_rounds(1);
    REQUIRE(rounds.ok());
    size_t n = 0;
    for (const auto& r : *rounds) {
      n += r.state == RoundState::kCommitted && (epoch == 0 || r.epoch == epoch);
    }
    return n;
  };
  REQUIRE(wait_until([&] { return committed_at(0) >= 2; }, 120));
  const storage::Epoch a_epoch = lease_of(db, 1).epoch;

  a->kill_now();
  const auto killed = std::chrono::steady_clock::now();
  // b acquires the job, fails a's open round and opens the next one.
  REQUIRE(wait_until(
      [&] {
        auto rounds = db.list_rounds(1);
        REQUIRE(rounds.ok());
        for (const auto& r : *rounds) {
          if (r.epoch > a_epoch && r.state != RoundState::kFailed) return true;
        }
        return false;
      },
      30));
  const double reopened_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  MESSAGE("kill -9 of the owner -> next round open on the other replica: "
          << reopened_s << " s (lease " << kTestLeaseS << " s)");
  CHECK(reopened_s < kTestLeaseS + 5);
  const storage::Epoch b_epoch = lease_of(db, 1).epoch;
  CHECK(lease_of(db, 1).holder == "b");
  // The clients, which knew a first, find b by themselves and the job trains on through it.
  REQUIRE(wait_until([&] { return committed_at(b_epoch) >= 2; }, 120));
  CHECK((*fleet)->failovers() > 0);

  // Versions only grow, each committed round has its model, no client updated a round twice.
  auto rounds = db.list_rounds(1);
  REQUIRE(rounds.ok());
  uint64_t last_version = 0;
  for (const auto& r : *rounds) {
    auto updates = db.list_updates(1, r.index);
    REQUIRE(updates.ok());
    std::set<ClientId> clients;
    for (const auto& u : *updates) CHECK(clients.insert(u.client).second);
    if (r.state != RoundState::kCommitted) continue;
    CHECK(r.index > last_version);
    last_version = r.index;
    CHECK(db.get_model(1, r.index).ok());
  }
  (*fleet)->stop();
}

namespace {

// Three replicas, two clients on each, every client knowing only its own replica, train a job
// of `rule` (with secure aggregation when `secure`) with K = 6 until three rounds merged
// partials from both non-owners. A merged partial is one model for fedavg (its sum), one
// masked vector of the model's length for a secure job (its masked inputs' sum), and one model
// per update for the rules that need every update (its updates, gathered at the owner).
void train_on_three_replicas(const std::string& rule, bool secure = false) {
  PostgresServer& server = PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  TempDir dir;
  constexpr size_t kPerReplica = 2;
  constexpr size_t kK = 3 * kPerReplica;
  Replica a(dir, "a", url);
  const uint16_t a_port = a.port;
  Caller admin_a(a_port, kAdminToken);
  json job = shared_job("shared", kK, 60);
  job["aggregation"] = {{"rule", rule}};
  if (secure) job["secure_aggregation"] = {{"dropout", 0.0}, {"corrupt", 0.0}, {"clip", 20}};
  REQUIRE(admin_a.post("/v1/admin/jobs", job).status == 201);
  auto reader = storage::open_store(url);
  REQUIRE(reader.ok());
  storage::Store& db = **reader;
  REQUIRE(wait_until([&] { return lease_of(db, 1).holder == "a"; }, 10));
  Replica b(dir, "b", url);
  Replica c(dir, "c", url);
  const uint16_t b_port = b.port, c_port = c.port;
  // Each fleet knows one replica only: no client can reach the owner unless it is the owner's.
  const uint16_t ports[] = {a_port, b_port, c_port};
  const ml::Dataset slice = ml::head(fmnist_train(), 1000);
  std::vector<std::unique_ptr<client::Fleet>> fleets;
  for (size_t i = 0; i < 3; ++i) {
    client::FleetConfig config = test_fleet(ports[i], kPerReplica, slice);
    config.seed = 1 + i;
    config.require_secure_aggregation = secure;
    auto fleet = client::Fleet::start(config);
    REQUIRE(fleet.ok());
    fleets.push_back(std::move(fleet).value());
  }
  // Rounds commit with updates admitted on all three replicas.
  auto merged_from_both = [&](const storage::RoundRecord& r) {
    const json merged = r.metrics.value("partials", json::object()).value("merged", json::object());
    return merged.contains("b") && merged.contains("c");
  };
  const bool trained = wait_until(
      [&] {
        size_t full = 0;
        for (const auto& r : committed_rounds(db, 1)) full += merged_from_both(r);
        return full >= 3;
      },
      300);
  REQUIRE_MESSAGE(trained, "a's log:\n"
                               << read_file(dir.file("a.log")) << "\nb's log:\n"
                               << read_file(dir.file("b.log")));
  CHECK(lease_of(db, 1).holder == "a");

  const std::vector<storage::RoundRecord> committed = committed_rounds(db, 1);
  auto first_model = db.get_model(1, committed.front().index);
  REQUIRE(first_model.ok());
  const double model_bytes = double(first_model->blob.size());
  uint64_t last_version = 0;
  size_t merged_rounds = 0;
  for (const auto& r : committed) {
    CAPTURE(r.index);
    CHECK(r.index > last_version);  // versions only grow
    last_version = r.index;
    CHECK(r.target == kK);
    CHECK_FALSE(r.plan.empty());
    auto updates = db.list_updates(1, r.index);
    REQUIRE(updates.ok());
    CHECK(updates->size() <= kK);  // never over K
    std::set<ClientId> clients;
    std::map<std::string, uint64_t> by_replica;
    for (const auto& u : *updates) {
      CHECK(clients.insert(u.client).second);  // no client admitted twice in a round
      by_replica[u.replica] += 1;
    }
    // The owner counted every admitted update: its own and those of the merged partials.
    const json partials = r.metrics.value("partials", json::object());
    uint64_t merged = 0;
    const json merged_by = partials.value("merged", json::object());
    for (const auto& [replica, count] : merged_by.items()) {
      CHECK(count.get<uint64_t>() == by_replica[replica]);
      merged += count.get<uint64_t>();
    }
    CHECK(r.metrics["updates"].get<uint64_t>() == by_replica["a"] + merged);
    CHECK(partials.value("lost", json::object()).empty());
    // What the owner read: a model per partial (fedavg; for a secure job a masked vector of
    // 4-byte words, as long as the model's 4-byte floats) or per update (median), within 1%.
    const double models = rule == "fedavg" ? double(merged_by.size()) : double(merged);
    CHECK(std::abs(partials.value("bytes", 0.0) - models * model_bytes) <=
          0.01 * models * model_bytes);
    if (secure) {
      const json summary = r.metrics.value("secure_aggregation", json::object());
      CHECK(summary.value("stage", "") == "done");
      CHECK(summary["clients"]["masked_input"] == updates->size());
      CHECK(summary.value("bits", 64) <= 32);
    }
    merged_rounds += merged_from_both(r);
  }
  MESSAGE(committed.size() << " rounds committed, " << merged_rounds
                           << " of them with partials merged from both non-owners");
  CHECK(merged_rounds >= 3);
  const std::string page = admin_a.get("/metrics").raw;
  const double partials_merged = metric_value(page, "fedcase_partials_total{direction=\"merged\"}");
  const double bytes_merged =
      metric_value(page, "fedcase_partial_bytes_total{direction=\"merged\"}");
  MESSAGE("the owner merged " << partials_merged << " partials, "
                              << static_cast<uint64_t>(bytes_merged) << " bytes");
  CHECK(partials_merged >= 6);
  CHECK(bytes_merged > 0);
  Caller admin_b(b_port, kAdminToken);
  CHECK(metric_value(admin_b.get("/metrics").raw,
                     "fedcase_partials_total{direction=\"written\"}") >= 3);

  // Every replica serves the same committed model, byte for byte.
  for (auto& fleet : fleets) fleet->stop();
  Caller admin_c(c_port, kAdminToken);
  Caller* admins[] = {&admin_a, &admin_b, &admin_c};
  const uint64_t version = committed.back().index;
  REQUIRE(wait_until(
      [&] {
        for (Caller* admin : admins) {
          if (admin->get("/v1/admin/jobs/1").body["model_version"] !=
              committed_rounds(db, 1).back().index) {
            return false;
          }
        }
        return true;
      },
      20));
  auto stored = db.get_model(1, version);
  REQUIRE(stored.ok());
  for (Caller* admin : admins) {
    const Reply model = admin->get("/v1/jobs/1/models/" + std::to_string(version));
    CHECK(model.status == 200);
    CHECK(model.raw == stored->blob);
  }
}

}  // namespace

TEST_CASE("three replicas train one job together, each client on a different replica") {
  train_on_three_replicas("fedavg");
}

TEST_CASE("three replicas fold the masked inputs of a secure job, each into its own partial") {
  train_on_three_replicas("fedavg", /*secure=*/true);
}

TEST_CASE("three replicas gather every update of a median job at its owner") {
  train_on_three_replicas("median");
}

TEST_CASE("a replica dies holding admitted updates: the owner commits without them") {
  PostgresServer& server = PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  TempDir dir;
  Replica a(dir, "a", url);
  const uint16_t a_port = a.port;
  Caller admin_a(a_port, kAdminToken);
  // K = 4 with 3 clients: no round fills, each closes at its deadline, so b's updates are
  // admitted while the round still admits, and b can be killed before any close.
  json job = shared_job("lossy", 4, 20);
  job["min_clients"] = 3;
  job["min_updates"] = 2;
  REQUIRE(admin_a.post("/v1/admin/jobs", job).status == 201);
  auto reader = storage::open_store(url);
  REQUIRE(reader.ok());
  storage::Store& db = **reader;
  REQUIRE(wait_until([&] { return lease_of(db, 1).holder == "a"; }, 10));
  Replica b(dir, "b", url);
  const uint16_t b_port = b.port;
  const ml::Dataset slice = ml::head(fmnist_train(), 1000);
  auto a_fleet = client::Fleet::start(test_fleet(a_port, 2, slice));
  REQUIRE(a_fleet.ok());
  // b's client fails over to a once b is gone, and trains on there.
  client::FleetConfig b_config = test_fleet(b_port, 1, slice);
  b_config.seed = 7;
  b_config.replicas = {client::plain_connection("127.0.0.1", a_port)};
  auto b_fleet = client::Fleet::start(b_config);
  REQUIRE(b_fleet.ok());

  // An open round in which b recorded an update: b is killed there, before the close.
  RoundIndex lossy = 0;
  REQUIRE(wait_until(
      [&] {
        auto rounds = db.list_rounds(1);
        REQUIRE(rounds.ok());
        if (rounds->empty() || rounds->back().state != RoundState::kOpen) return false;
        auto admission = db.round_admission(1, rounds->back().index);
        if (!admission.ok() || !admission->open) return false;
        auto held = admission->replicas.find("b");
        if (held == admission->replicas.end() || held->second == 0) return false;
        lossy = rounds->back().index;
        return true;
      },
      240));
  b.process.kill_now();
  const auto killed = std::chrono::steady_clock::now();
  auto admission = db.round_admission(1, lossy);
  REQUIRE(admission.ok());
  const uint64_t b_updates = admission->replicas["b"];
  MESSAGE("b killed holding " << b_updates << " admitted updates of round " << lossy);
  // The round closes at its deadline; the owner waits lease_s for b's partial, then commits
  // with a's own updates (min_updates 2), counting b's as lost.
  REQUIRE(wait_until(
      [&] {
        auto rounds = db.list_rounds(1);
        REQUIRE(rounds.ok());
        for (const auto& r : *rounds) {
          if (r.index == lossy) return r.state != RoundState::kOpen;
        }
        return false;
      },
      60));
  MESSAGE(
      "round " << lossy << " concluded "
               << std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count()
               << " s after b was killed (deadline 20 s, lease " << kTestLeaseS << " s)");
  auto rounds = db.list_rounds(1);
  REQUIRE(rounds.ok());
  const storage::RoundRecord* round = nullptr;
  for (const auto& r : *rounds) {
    if (r.index == lossy) round = &r;
  }
  REQUIRE(round != nullptr);
  CAPTURE(round->metrics.dump());
  const json partials = round->metrics.value("partials", json::object());
  CHECK(partials.value("lost", json::object()).value("b", 0) == b_updates);
  CHECK_FALSE(partials.value("merged", json::object()).contains("b"));
  auto updates = db.list_updates(1, lossy);
  REQUIRE(updates.ok());
  uint64_t own = 0;
  for (const auto& u : *updates) own += u.replica == "a";
  MESSAGE("round " << lossy << " "
                   << std::string(round->state == RoundState::kCommitted ? "committed" : "failed")
                   << " with the owner's " << own << " updates, " << b_updates << " lost");
  if (own >= 2) {
    // Enough of its own: committed without b's, and the model is there.
    CHECK(round->state == RoundState::kCommitted);
    CHECK(round->metrics["updates"].get<uint64_t>() == own);
    CHECK(db.get_model(1, lossy).ok());
  } else {
    CHECK(round->state == RoundState::kFailed);
  }
  const std::string page = admin_a.get("/metrics").raw;
  CHECK(metric_value(page, "fedcase_partial_updates_lost_total") >= double(b_updates));
  // The job goes on: a later round opens and commits on a's clients.
  REQUIRE(wait_until(
      [&] {
        for (const auto& r : committed_rounds(db, 1)) {
          if (r.index > lossy) return true;
        }
        return false;
      },
      120));
  (*a_fleet)->stop();
  (*b_fleet)->stop();
}
