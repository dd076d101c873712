// Bad input over real HTTP: every refusal has the right status and a JSON error, leaves the
// SQLite file unchanged, and the round still completes with the honest clients.

#include <doctest/doctest.h>

#include <boost/asio.hpp>
#include <cmath>
#include <limits>

#include "common/blob.h"
#include "ml/model.h"
#include "tests/support/bad_requests.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/store_snapshot.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

struct TestClient {
  std::string token;
  std::unique_ptr<Caller> caller;
  nlohmann::json task;
};

}  // namespace

TEST_CASE("bad input is refused with the right status and changes nothing") {
  TempDir dir;
  auto service = start_coordinator(dir, [](server::CoordinatorConfig& config) {
    config.max_json_bytes = 4096;
    config.max_upload_bytes = 2 << 20;
  });
  const uint16_t port = service->port();
  const std::string db = dir.file("fedcase.db");
  Caller admin(port, kAdminToken);
  Caller enroll(port, kEnrollmentToken);

  // Four clients, three invited (K = 3, no over-commitment): one is left out.
  std::vector<TestClient> clients(4);
  for (auto& c : clients) {
    Reply r = enroll.post("/v1/clients/register", {{"dataset_size", 200}});
    REQUIRE(r.status == 201);
    c.token = r.body["token"];
    c.caller = std::make_unique<Caller>(port, c.token);
  }
  Reply created = admin.post("/v1/admin/jobs", bad_input_job());
  REQUIRE(created.status == 201);

  std::vector<TestClient*> invited;
  TestClient* outsider = nullptr;
  for (auto& c : clients) {
    Reply t = c.caller->get("/v1/task?wait=3");
    if (t.status == 200) {
      c.task = t.body;
      invited.push_back(&c);
    } else {
      CHECK(t.status == 204);
      outsider = &c;
    }
  }
  REQUIRE(invited.size() == 3);
  REQUIRE(outsider != nullptr);
  const std::string upload_url = invited[0]->task["upload_url"];
  Reply model_reply = invited[0]->caller->get(invited[0]->task["model_url"]);
  REQUIRE(model_reply.status == 200);
  ModelBlob global = std::move(decode_blob(model_reply.raw, 1 << 24)).value();
  // A job's models reach only its participants (bad_requests() has the refusals); the admin
  // may download any; an MLP job has no module.
  CHECK(outsider->caller->get("/v1/jobs/1/module").status == 403);
  CHECK(invited[1]->caller->get("/v1/jobs/1/module").status == 404);
  CHECK(admin.get(invited[0]->task["model_url"]).status == 200);

  const std::string good_meta = good_update_meta();
  const std::string good =
      update_body(std::vector<float>(global.data.size(), 0.0f), 0, global.layout);

  const std::string status_url = "/v1/jobs/1/rounds/1/status";
  CHECK(invited[0]->caller->get(status_url).body == json{{"needed", true}, {"reason", "open"}});
  CHECK(outsider->caller->get(status_url).body["reason"] == "not invited");
  CHECK(invited[0]->caller->get("/v1/jobs/1/rounds/9/status").body["needed"] == false);
  CHECK(admin.get(status_url).status == 403);

  const std::string before = store_snapshot(db);
  const BadInputTarget target{port,
                              invited[0]->token,
                              outsider->token,
                              upload_url,
                              invited[0]->task["model_url"],
                              global,
                              4096,
                              2 << 20};
  for (const BadRequest& c : bad_requests(target)) {
    CAPTURE(c.what);
    check_answer(c, c.send());
    CHECK(store_snapshot(db) == before);
  }

  // The honest clients finish the round: the first upload counts, a repeat is a conflict.
  Reply accepted = upload(*invited[0]->caller, upload_url, good, good_meta);
  REQUIRE(accepted.status == 200);
  std::string after_one = store_snapshot(db);
  CHECK(invited[0]->caller->get(status_url).body["reason"] == "already uploaded");
  Reply twice = upload(*invited[0]->caller, upload_url, good, good_meta);
  CHECK(twice.status == 409);
  CHECK(error_code(twice) == "conflict");
  CHECK(store_snapshot(db) == after_one);
  for (size_t i = 1; i < invited.size(); ++i) {
    CHECK(upload(*invited[i]->caller, upload_url, good, good_meta).status == 200);
  }
  check_round_committed(admin);
  // A zero delta leaves the model where it was, but under a new version.
  Reply next = admin.get("/v1/jobs/1/models/1");
  REQUIRE(next.status == 200);
  CHECK(decode_blob(next.raw, 1 << 24)->data == global.data);

  // Uploads to the closed round are refused and change nothing.
  CHECK(invited[1]->caller->get(status_url).body["needed"] == false);
  std::string committed = store_snapshot(db);
  Reply late = upload(*outsider->caller, upload_url, good, good_meta);
  CHECK(late.status == 409);
  CHECK(store_snapshot(db) == committed);
}

TEST_CASE("callers over the request rate get 429 with Retry-After") {
  TempDir dir;
  auto service = start_coordinator(
      dir, [](server::CoordinatorConfig& config) { config.requests_per_second = 2; });
  Caller admin(service->port(), kAdminToken);
  int limited = 0;
  std::string retry_after;
  for (int i = 0; i < 20; ++i) {
    Reply r = admin.get("/v1/admin/jobs");
    if (r.status == 429) {
      ++limited;
      retry_after = r.response.header("retry-after");
      CHECK(error_code(r) == "resource_exhausted");
    }
  }
  CHECK(limited >= 10);
  CHECK(!retry_after.empty());
  CHECK(std::stoi(retry_after) >= 1);
}

TEST_CASE("connections over the limit get 503 and the open ones keep working") {
  TempDir dir;
  auto service =
      start_coordinator(dir, [](server::CoordinatorConfig& config) { config.max_connections = 1; });
  Caller first(service->port(), kAdminToken);
  Caller second(service->port(), kAdminToken);
  REQUIRE(first.get("/v1/admin/jobs").status == 200);  // keeps its connection open
  Reply refused = second.get("/v1/admin/jobs");
  CHECK(refused.status == 503);
  CHECK(error_code(refused) == "unavailable");
  CHECK(first.get("/v1/admin/jobs").status == 200);
}

TEST_CASE("job control follows the job's state machine") {
  TempDir dir;
  auto service = start_coordinator(dir);
  Caller admin(service->port(), kAdminToken);
  REQUIRE(admin.post("/v1/admin/jobs", {{"name", "ctl"}, {"model", "mlp"}}).status == 201);
  CHECK(admin.post("/v1/admin/jobs/1/resume", json::object()).status == 409);
  Reply paused = admin.post("/v1/admin/jobs/1/pause", json::object());
  CHECK(paused.status == 200);
  CHECK(paused.body["state"] == "paused");
  CHECK(admin.post("/v1/admin/jobs/1/pause", json::object()).status == 409);
  CHECK(admin.post("/v1/admin/jobs/1/resume", json::object()).body["state"] == "running");
  CHECK(admin.post("/v1/admin/jobs/1/cancel", json::object()).body["state"] == "cancelled");
  CHECK(admin.post("/v1/admin/jobs/1/resume", json::object()).status == 409);
  Reply list = admin.get("/v1/admin/jobs");
  REQUIRE(list.status == 200);
  CHECK(list.body["jobs"][0]["state"] == "cancelled");
  CHECK(admin.call("DELETE", "/v1/admin/jobs").status == 405);
  CHECK(admin.get("/v1/nothing-here").status == 404);
}

TEST_CASE("deeply nested JSON is refused with 400, never fatal") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  Caller enroll(port, kEnrollmentToken);
  Reply registered = enroll.post("/v1/clients/register", {{"dataset_size", 10}});
  REQUIRE(registered.status == 201);
  Caller client(port, registered.body["token"].get<std::string>());
  const std::string before = store_snapshot(dir.file("fedcase.db"));
  for (const BadRequest& c : deep_json_requests(port, registered.body["token"])) {
    CAPTURE(c.what);
    check_answer(c, c.send());
    CHECK(store_snapshot(dir.file("fedcase.db")) == before);
  }
  // 64 levels are fine.
  Reply shallow = client.call("POST", "/v1/clients/heartbeat", "{\"a\":" + nested_json(63) + "}",
                              {{"Content-Type", "application/json"}});
  CHECK(shallow.status == 200);
}

TEST_CASE("a transfer coding other than chunked gets 400 and the connection closes") {
  TempDir dir;
  auto service = start_coordinator(dir);
  for (const char* coding : {"gzip", "gzip, chunked", "chunked, gzip"}) {
    CAPTURE(coding);
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket socket(io);
    socket.connect({boost::asio::ip::make_address("127.0.0.1"), service->port()});
    const std::string request = std::string("POST /v1/clients/register HTTP/1.1\r\n") +
                                "Host: 127.0.0.1\r\nAuthorization: Bearer " + kEnrollmentToken +
                                "\r\nTransfer-Encoding: " + coding + "\r\n\r\n2\r\n{}\r\n0\r\n\r\n";
    boost::asio::write(socket, boost::asio::buffer(request));
    std::string answer;
    boost::system::error_code ec;
    char buffer[4096];
    while (!ec) {
      size_t n = socket.read_some(boost::asio::buffer(buffer), ec);
      answer.append(buffer, n);
    }
    CHECK(answer.rfind("HTTP/1.1 400", 0) == 0);
    CHECK(answer.find("Transfer-Encoding other than chunked") != std::string::npos);
    CHECK(ec == boost::asio::error::eof);  // the coordinator closed the connection
  }
}
