// Two coordinator processes as replicas on one PostgreSQL database (a private server,
// tests/support/postgres_server.h), with a real client fleet training through the first: the
// owner is frozen with SIGSTOP past its lease, the other replica takes the job over, and once
// the owner is let go again (SIGCONT) it commits nothing and steps down
// (server/core/ownership.h, docs/scaling.md "Replicas").

#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <memory>
#include <set>
#include <thread>

#include "client_sdk/fleet.h"
#include "storage/store.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/coordinator_process.h"
#include "tests/support/postgres_server.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

// Longer than the ownership pass's period needs on a loaded 2-core machine, where a replica's
// tick (a commit, a selection) can take a second or more.
constexpr double kLeaseS = 4;

// A replica `name`'s config in `dir` (its port file: dir/name.port).
std::string write_config(const TempDir& dir, const std::string& name, const std::string& url) {
  const std::string path = dir.file(name + ".json");
  json config = {{"port", 0},
                 {"port_file", dir.file(name + ".port")},
                 {"database", url},
                 {"replica_id", name},
                 {"lease_s", kLeaseS},
                 {"admin_token", kAdminToken},
                 {"enrollment_token", kEnrollmentToken},
                 {"eval_data_dir", FEDCASE_FMNIST_DIR},
                 {"eval_samples", 500},
                 {"long_poll_max_s", 2}};
  std::ofstream(path) << config.dump(2);
  return path;
}

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

// The value of the metric line that starts with `series` in a /metrics page, or -1.
double metric_value(const std::string& page, const std::string& series) {
  const size_t at = page.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + series.size() + 2));
}

}  // namespace

TEST_CASE("a frozen owner is replaced; let go again, it commits nothing and steps down") {
  PostgresServer& server = PostgresServer::shared();
  const std::string url = server.url(server.create_database());
  TempDir dir;
  CoordinatorProcess a(write_config(dir, "a", url), dir.file("a.log"));
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

  CoordinatorProcess b(write_config(dir, "b", url), dir.file("b.log"));
  const uint16_t b_port = wait_for_port(dir.file("b.port"));
  REQUIRE(b_port != 0);
  Caller admin_b(b_port, kAdminToken);
  CHECK(lease_of(db, 1).holder == "a");  // b waits while a renews

  REQUIRE(::kill(a.pid(), SIGSTOP) == 0);
  const auto frozen = std::chrono::steady_clock::now();
  REQUIRE(wait_until([&] { return lease_of(db, 1).holder == "b"; }, 20));
  const double takeover_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - frozen).count();
  MESSAGE("takeover " << takeover_s << " s after the owner froze (lease " << kLeaseS << " s)");
  CHECK(takeover_s < kLeaseS + 2);
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
  // The round a left open was failed by b, at b's epoch.
  bool failed_by_b = false;
  for (const auto& r : *rounds) {
    failed_by_b |=
        r.state == RoundState::kFailed && r.epoch == b_epoch &&
        r.metrics.value("failure", "") == "the job's owner changed while the round was open";
  }
  CHECK(failed_by_b);
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
  auto a = std::make_unique<CoordinatorProcess>(write_config(dir, "a", url), dir.file("a.log"));
  const uint16_t a_port = wait_for_port(dir.file("a.port"));
  REQUIRE(a_port != 0);
  Caller admin_a(a_port, kAdminToken);
  REQUIRE(admin_a.post("/v1/admin/jobs", training_job("failover")).status == 201);
  auto reader = storage::open_store(url);
  REQUIRE(reader.ok());
  storage::Store& db = **reader;
  REQUIRE(wait_until([&] { return lease_of(db, 1).holder == "a"; }, 10));

  CoordinatorProcess b(write_config(dir, "b", url), dir.file("b.log"));
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
          << reopened_s << " s (lease " << kLeaseS << " s)");
  CHECK(reopened_s < kLeaseS + 5);
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
