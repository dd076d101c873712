// SIGKILL the coordinator process after a committed round and start it again on the same
// database: the job continues from the same model and the clients reconnect by themselves. On
// an SQLite file, and on a PostgreSQL database (a private server, tests/support/
// postgres_server.h).

#include <doctest/doctest.h>

#include <fstream>

#include "client_sdk/fleet.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/coordinator_process.h"
#include "tests/support/postgres_server.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

void write_config(const std::string& path, const TempDir& dir, const std::string& database,
                  uint16_t port) {
  json config = {{"port", port},
                 {"port_file", dir.file("port")},
                 {"database", database},
                 {"admin_token", kAdminToken},
                 {"enrollment_token", kEnrollmentToken},
                 {"eval_data_dir", FEDCASE_FMNIST_DIR},
                 {"eval_samples", 500},
                 {"long_poll_max_s", 2},
                 {"pace", kTestPace}};
  std::ofstream(path) << config.dump(2);
  std::remove(dir.file("port").c_str());
}

// The whole scenario, on the store `database` names (a URL).
void resumes_after_sigkill(const std::string& database) {
  TempDir dir;
  const std::string config_path = dir.file("coordinator.json");
  const std::string log_path = dir.file("coordinator.log");
  write_config(config_path, dir, database, 0);
  auto first = std::make_unique<CoordinatorProcess>(config_path, log_path);
  const uint16_t port = wait_for_port(dir.file("port"));
  REQUIRE(port != 0);

  Caller admin(port, kAdminToken);
  json job_config = {
      {"name", "restart"},
      {"model", "mlp"},
      {"rounds", 6},
      {"clients_per_round", 3},
      {"selection", {{"overcommit", 1.0}}},
      {"training", {{"lr", 0.05}, {"deadline", {{"mode", "fixed"}, {"seconds", 60}}}}}};
  Reply created = admin.post("/v1/admin/jobs", job_config);
  REQUIRE(created.status == 201);

  ml::Dataset slice = ml::head(fmnist_train(), 1500);
  auto fleet = client::Fleet::start(test_fleet(port, 3, slice));
  REQUIRE(fleet.ok());

  json before;
  REQUIRE(wait_until(
      [&] {
        before = admin.get("/v1/admin/jobs/1").body;
        return !committed_rounds(before).empty();
      },
      120));
  first->kill_now();
  const json last_before = committed_rounds(before).back();
  const uint64_t version = last_before["metrics"]["model_version"];
  const std::string checksum = last_before["metrics"]["checksum"];

  // Same database, same port: the clients keep retrying the address they know.
  write_config(config_path, dir, database, port);
  CoordinatorProcess second(config_path, log_path);
  REQUIRE(wait_for_port(dir.file("port")) == port);
  Caller admin2(port, kAdminToken);

  Reply model = admin2.get("/v1/jobs/1/models/" + std::to_string(version));
  REQUIRE(model.status == 200);
  CHECK(model.response.header("etag") == "\"" + checksum + "\"");

  json after;
  REQUIRE_MESSAGE(wait_until(
                      [&] {
                        after = admin2.get("/v1/admin/jobs/1").body;
                        return committed_rounds(after).size() >=
                               committed_rounds(before).size() + 2;
                      },
                      180),
                  after.dump());
  (*fleet)->stop();

  // Every round committed before the kill is intact, with the same checksums.
  auto rounds = committed_rounds(after);
  for (const auto& r : committed_rounds(before)) {
    auto it = std::find_if(rounds.begin(), rounds.end(),
                           [&](const json& x) { return x["round"] == r["round"]; });
    REQUIRE(it != rounds.end());
    CHECK((*it)["metrics"]["checksum"] == r["metrics"]["checksum"]);
  }
  // A committed round started from the model that was latest at the kill (which the first
  // coordinator may have advanced once more between our look and the kill).
  bool continued = false;
  for (const auto& r : rounds) {
    if (r["round"].get<uint64_t>() > version && r["base_version"].get<uint64_t>() >= version) {
      continued = true;
    }
  }
  CHECK(continued);
  // A round the kill left open is failed, never half-committed; only the newest may be open.
  const json& all = after["rounds"];
  for (size_t i = 0; i + 1 < all.size(); ++i) CHECK(all[i]["state"] != "open");
  for (const auto& r : all) {
    if (r["state"] == "failed") {
      CHECK(r["metrics"]["failure"].get<std::string>().find("restarted") != std::string::npos);
    }
  }
  // The clients reconnected with their tokens: nobody registered twice.
  CHECK(admin2.get("/v1/admin/clients").body["clients"].size() == 3);
  CHECK((*fleet)->updates_accepted() >= 3 * rounds.size() - 3);
}

}  // namespace

TEST_CASE("a SIGKILLed coordinator resumes the job from its last committed model") {
  TempDir dir;
  resumes_after_sigkill("sqlite:" + dir.file("fedcase.db"));
}

TEST_CASE("a SIGKILLed coordinator on PostgreSQL resumes the job from its last committed model") {
  PostgresServer& server = PostgresServer::shared();
  resumes_after_sigkill(server.url(server.create_database()));
}

TEST_CASE("GET /healthz follows the coordinator's PostgreSQL server: 503 while it is down") {
  PostgresServer& server = PostgresServer::shared();
  TempDir dir;
  const std::string config_path = dir.file("coordinator.json");
  write_config(config_path, dir, server.url(server.create_database()), 0);
  CoordinatorProcess coordinator(config_path, dir.file("coordinator.log"));
  const uint16_t port = wait_for_port(dir.file("port"));
  REQUIRE(port != 0);
  Caller anyone(port, "");  // a load balancer's check carries no token
  auto health = [&] { return anyone.get("/healthz"); };
  Reply up = health();
  CHECK(up.status == 200);
  CHECK(up.body["status"] == "ok");
  CHECK(!up.body["replica"].get<std::string>().empty());

  server.stop(/*immediate=*/false);
  CHECK(wait_until([&] { return health().status == 503; }, 15));
  CHECK(health().body["status"] == "database unreachable");
  server.start();
  CHECK(wait_until([&] { return health().status == 200; }, 15));
}
