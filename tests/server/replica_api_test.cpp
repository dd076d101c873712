// A replica's HTTP front end when its database is slow or away: a real coordinator service on
// a private PostgreSQL server (tests/support/postgres_server.h), over real HTTP on 127.0.0.1.
// Requests with unknown tokens cannot hold its threads, and what the database says about
// itself (hosts, sockets, database names, passwords) never reaches a caller.

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "storage/store.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/postgres_server.h"
#include "tests/support/raw_connection.h"
#include "tests/support/stderr_capture.h"

namespace fedcase::server {
namespace {

using nlohmann::json;
using testing::Caller;
using testing::PostgresServer;

// A replica on a new database of the shared server.
std::unique_ptr<CoordinatorService> start_replica(const testing::TempDir& dir,
                                                  const std::string& url) {
  return testing::start_coordinator(dir, [&](CoordinatorConfig& c) {
    c.database = url;
    c.lease_s = 5;
    c.replica_id = "r1";
  });
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST_CASE("requests with unknown tokens cannot hold a replica's threads while its database hangs") {
  PostgresServer& pg = PostgresServer::shared();
  testing::TempDir dir;
  auto service = start_replica(dir, pg.url(pg.create_database()));
  const uint16_t port = service->port();
  Caller enroll(port, testing::kEnrollmentToken);
  testing::Reply registered = enroll.post("/v1/clients/register", {{"dataset_size", 100}});
  REQUIRE_MESSAGE(registered.status == 201, registered.raw);
  Caller client(port, registered.body["token"].get<std::string>());
  REQUIRE(client.post("/v1/clients/heartbeat", json::object()).status == 200);

  pg.freeze();
  // Uploads and polls with tokens this replica has never seen, more of them than it has
  // threads of any kind, from several addresses.
  std::vector<std::unique_ptr<testing::RawConnection>> unknown;
  for (int i = 0; i < 6; ++i) {
    unknown.push_back(std::make_unique<testing::RawConnection>(
        port, "127.0.0." + std::to_string(2 + i % 3)));
    const std::string token = "unknown-token-" + std::to_string(i) + "-0123456789abcdef";
    unknown.back()->send(i % 2 == 0
                             ? "POST /v1/jobs/1/rounds/1/update HTTP/1.1\r\nHost: x\r\n"
                               "Authorization: Bearer " + token +
                                   "\r\nContent-Type: application/octet-stream\r\n"
                                   "Content-Length: 1000\r\n\r\n"
                             : "GET /v1/task HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                                   token + "\r\n\r\n");
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  // A known client is served meanwhile.
  auto heartbeat = std::async(std::launch::async, [&] {
    const auto start = std::chrono::steady_clock::now();
    const int status = client.post("/v1/clients/heartbeat", json::object()).status;
    return std::make_pair(
        status, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  });
  const bool answered = heartbeat.wait_for(std::chrono::seconds(3)) == std::future_status::ready;
  pg.thaw();
  const auto [status, seconds] = heartbeat.get();
  CHECK_MESSAGE(answered, "the heartbeat waited for the database");
  CHECK(status == 200);
  CHECK(seconds < 1.0);
  // Each unknown token is answered, never with a 200.
  for (auto& c : unknown) {
    const std::string reply = c->read(4096);
    CHECK_FALSE(contains(reply, "HTTP/1.1 200"));
  }
  service->stop();
}

TEST_CASE("a caller learns that the database is unavailable, never what the database said") {
  PostgresServer& pg = PostgresServer::shared();
  const std::string database = pg.create_database();
  testing::TempDir dir;
  auto service = start_replica(dir, pg.url(database));
  const uint16_t port = service->port();
  Caller admin(port, testing::kAdminToken);
  testing::Reply created =
      admin.post("/v1/admin/jobs", {{"name", "j"}, {"model", "mlp"}, {"rounds", 3}});
  REQUIRE_MESSAGE(created.status == 201, created.raw);
  const std::string detail = "/v1/admin/jobs/" + std::to_string(created.body["job_id"].get<int>());
  REQUIRE(admin.get(detail).status == 200);

  pg.stop(/*immediate=*/false);
  testing::StderrCapture log;
  testing::Reply refused = admin.get(detail);
  const std::string logged = log.text();
  pg.start();
  CHECK(refused.status == 503);
  CHECK(refused.body["error"]["message"] == "the database is unavailable");
  CHECK_FALSE(contains(refused.raw, database));
  CHECK_FALSE(contains(refused.raw, "socket"));
  CHECK_FALSE(contains(refused.raw, "postgresql"));
  // The operator's log has what the database said, for the request it answered.
  CHECK_MESSAGE(contains(logged, "GET " + detail + ": unavailable: the database is unavailable ("),
                logged);
  service->stop();
}

TEST_CASE("a password in a PostgreSQL URL's query is hidden from every message") {
  // Nothing listens on port 1 of 127.0.0.1: refused at once.
  auto refused = storage::open_store(
      "postgresql://fedcase@127.0.0.1:1/db?password=hunter2&connect_timeout=2");
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.status().code() == Code::kUnavailable);
  CHECK_FALSE(contains(refused.status().to_string(), "hunter2"));
}

}  // namespace
}  // namespace fedcase::server
