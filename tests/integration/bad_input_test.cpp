// Bad input over real HTTP: every refusal has the right status and a JSON error, leaves the
// SQLite file unchanged, and the round still completes with the honest clients.

#include <doctest/doctest.h>

#include <boost/asio.hpp>
#include <cmath>
#include <limits>

#include "common/blob.h"
#include "ml/model.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/store_snapshot.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

struct TestClient {
  ClientId id = 0;
  std::unique_ptr<Caller> caller;
  json task;
};

// `depth` nested JSON arrays: [[[...]]].
std::string nested_json(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

std::string error_code(const Reply& r) {
  return r.body.is_object() && r.body.contains("error") ? r.body["error"]["code"].get<std::string>()
                                                        : std::string("<no JSON error>");
}

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
  Caller anonymous(port, "");
  Caller enroll(port, kEnrollmentToken);

  // Four clients, three invited (K = 3, no over-commitment): one is left out.
  std::vector<TestClient> clients(4);
  for (auto& c : clients) {
    Reply r = enroll.post("/v1/clients/register", {{"dataset_size", 200}});
    REQUIRE(r.status == 201);
    c.id = r.body["client_id"];
    c.caller = std::make_unique<Caller>(port, r.body["token"].get<std::string>());
  }
  json job_config = {{"name", "bad-input"},
                     {"model", "mlp"},
                     {"rounds", 1},
                     {"clients_per_round", 3},
                     {"selection", {{"overcommit", 1.0}}},
                     {"training", {{"deadline", {{"mode", "fixed"}, {"seconds", 300}}}}},
                     {"max_update_norm", 1000}};
  Reply created = admin.post("/v1/admin/jobs", job_config);
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
  // A job's models reach only its participants: a client without a task of the job, or one
  // asking for a version other than its task's, is refused; the admin may download any.
  CHECK(outsider->caller->get(invited[0]->task["model_url"]).status == 403);
  CHECK(invited[1]->caller->get("/v1/jobs/1/models/7").status == 403);
  CHECK(outsider->caller->get("/v1/jobs/1/module").status == 403);
  CHECK(invited[1]->caller->get("/v1/jobs/1/module").status == 404);  // an MLP job has none
  CHECK(admin.get(invited[0]->task["model_url"]).status == 200);

  auto update_body = [&](std::vector<float> values, uint64_t version, ModelLayout layout) {
    return encode_blob(ModelBlob{version, std::move(layout), std::move(values)});
  };
  const std::string good_meta = json{{"samples", 200}, {"loss_sum", 100.0}}.dump();
  auto upload = [&](TestClient& c, const std::string& body, const std::string& meta) {
    return c.caller->call("POST", upload_url, body,
                          {{"Content-Type", "application/octet-stream"}, {"X-Fedcase-Meta", meta}});
  };
  std::vector<float> zeros(global.data.size(), 0.0f);
  const std::string good = update_body(zeros, 0, global.layout);

  const std::string status_url = "/v1/jobs/1/rounds/1/status";
  CHECK(invited[0]->caller->get(status_url).body == json{{"needed", true}, {"reason", "open"}});
  CHECK(outsider->caller->get(status_url).body["reason"] == "not invited");
  CHECK(invited[0]->caller->get("/v1/jobs/1/rounds/9/status").body["needed"] == false);
  CHECK(admin.get(status_url).status == 403);

  const std::string before = store_snapshot(db);
  struct Case {
    const char* what;
    std::function<Reply()> send;
    int status;
    const char* code;
  };
  std::vector<float> nan_values = zeros, inf_values = zeros, huge_values = zeros;
  nan_values[7] = std::numeric_limits<float>::quiet_NaN();
  inf_values[3] = -std::numeric_limits<float>::infinity();
  huge_values[0] = 5000;
  ModelLayout wrong_layout = global.layout;
  wrong_layout.tensors.back().shape = {5, 2};
  std::vector<float> wrong_values(global.data.size(), 0.0f);
  ModelLayout bad_name_layout = global.layout;
  bad_name_layout.tensors.front().name =
      "\xff\xfe"
      "conv";
  const std::vector<Case> cases = {
      {"no token", [&] { return anonymous.get("/v1/task"); }, 401, "unauthenticated"},
      {"unknown token",
       [&] {
         Caller stranger(port, "not-a-real-token-at-all");
         return stranger.get("/v1/task");
       },
       401, "unauthenticated"},
      {"client on admin API", [&] { return invited[0]->caller->get("/v1/admin/jobs"); }, 403,
       "permission_denied"},
      {"enrollment key polls tasks", [&] { return enroll.get("/v1/task"); }, 403,
       "permission_denied"},
      {"admin uploads",
       [&] {
         return admin.call("POST", upload_url, good, {{"X-Fedcase-Meta", good_meta}});
       },
       403, "permission_denied"},
      {"job body over the limit",
       [&] {
         return admin.post("/v1/admin/jobs", {{"name", std::string(5000, 'x')}});
       },
       413, "too_large"},
      {"upload over the limit",
       [&] { return upload(*invited[0], std::string(3 << 20, 'x'), good_meta); }, 413, "too_large"},
      {"malformed job JSON",
       [&] { return admin.call("POST", "/v1/admin/jobs", "{\"name\": ", {}); }, 400,
       "invalid_argument"},
      {"malformed registration JSON",
       [&] { return enroll.call("POST", "/v1/clients/register", "[1,2", {}); }, 400,
       "invalid_argument"},
      {"invalid job config",
       [&] {
         return admin.post("/v1/admin/jobs", {{"name", "x"}, {"clients_per_round", -1}});
       },
       400, "invalid_argument"},
      {"malformed metadata", [&] { return upload(*invited[0], good, "{samples"); }, 400,
       "invalid_argument"},
      {"metadata without samples", [&] { return upload(*invited[0], good, "{}"); }, 400,
       "invalid_argument"},
      {"corrupt blob",
       [&] { return upload(*invited[0], good.substr(0, good.size() - 9), good_meta); }, 400,
       "invalid_argument"},
      {"wrong shape",
       [&] { return upload(*invited[0], update_body(wrong_values, 0, wrong_layout), good_meta); },
       422, "unprocessable"},
      {"NaN",
       [&] { return upload(*invited[0], update_body(nan_values, 0, global.layout), good_meta); },
       422, "unprocessable"},
      {"Inf",
       [&] { return upload(*invited[0], update_body(inf_values, 0, global.layout), good_meta); },
       422, "unprocessable"},
      {"norm over the bound",
       [&] { return upload(*invited[0], update_body(huge_values, 0, global.layout), good_meta); },
       422, "unprocessable"},
      {"stale model version",
       [&] { return upload(*invited[0], update_body(zeros, 9, global.layout), good_meta); }, 422,
       "unprocessable"},
      {"client not invited", [&] { return upload(*outsider, good, good_meta); }, 403,
       "permission_denied"},
      {"round that does not exist",
       [&] {
         return invited[0]->caller->call("POST", "/v1/jobs/1/rounds/7/update", good,
                                         {{"X-Fedcase-Meta", good_meta}});
       },
       409, "conflict"},
      {"job JSON nested too deep",
       [&] {
         return admin.call("POST", "/v1/admin/jobs",
                           "{\"name\":\"x\",\"selection\":" + nested_json(200) + "}", {});
       },
       400, "invalid_argument"},
      {"metadata nested too deep", [&] { return upload(*invited[0], good, nested_json(200)); }, 400,
       "invalid_argument"},
      {"no metadata, not invited",
       [&] {
         return outsider->caller->call("POST", upload_url, good,
                                       {{"Content-Type", "application/octet-stream"}});
       },
       403, "permission_denied"},
      {"no metadata, round not open",
       [&] { return invited[0]->caller->call("POST", "/v1/jobs/1/rounds/7/update", good, {}); },
       409, "conflict"},
      {"no metadata", [&] { return invited[0]->caller->call("POST", upload_url, good, {}); }, 400,
       "invalid_argument"},
      {"tensor name with invalid UTF-8",
       [&] { return upload(*invited[0], update_body(zeros, 0, bad_name_layout), good_meta); }, 422,
       "unprocessable"},
      {"shapes larger than the blob",
       [&] {
         return upload(*invited[0], update_body({}, 0, ModelLayout{{{"w", {1u << 30, 1u << 30}}}}),
                       good_meta);
       },
       400, "invalid_argument"},
      {"URL with invalid UTF-8",
       [&] { return admin.post("/v1/admin/jobs/1/\xff\xfe", json::object()); }, 404, "not_found"},
      {"unknown job", [&] { return admin.get("/v1/admin/jobs/42"); }, 404, "not_found"},
      {"bad job action", [&] { return admin.post("/v1/admin/jobs/1/explode", json::object()); },
       404, "not_found"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.what);
    Reply r = c.send();
    CHECK(r.status == c.status);
    CHECK(error_code(r) == c.code);
    CHECK(store_snapshot(db) == before);
  }

  // The honest clients finish the round: the first upload counts, a repeat is a conflict.
  Reply accepted = upload(*invited[0], good, good_meta);
  REQUIRE(accepted.status == 200);
  std::string after_one = store_snapshot(db);
  CHECK(invited[0]->caller->get(status_url).body["reason"] == "already uploaded");
  Reply twice = upload(*invited[0], good, good_meta);
  CHECK(twice.status == 409);
  CHECK(error_code(twice) == "conflict");
  CHECK(store_snapshot(db) == after_one);
  for (size_t i = 1; i < invited.size(); ++i) {
    CHECK(upload(*invited[i], good, good_meta).status == 200);
  }
  json detail;
  REQUIRE(wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/1").body;
        // Evaluated too: its metrics are written once, after the commit.
        auto rounds = committed_rounds(detail);
        return rounds.size() == 1 && rounds[0]["metrics"].contains("test_accuracy");
      },
      60));
  CHECK(committed_rounds(detail)[0]["metrics"]["updates"] == 3);
  // A zero delta leaves the model where it was, but under a new version.
  Reply next = admin.get("/v1/jobs/1/models/1");
  REQUIRE(next.status == 200);
  CHECK(decode_blob(next.raw, 1 << 24)->data == global.data);

  // Uploads to the closed round are refused and change nothing.
  CHECK(invited[1]->caller->get(status_url).body["needed"] == false);
  std::string committed = store_snapshot(db);
  Reply late = upload(*outsider, good, good_meta);
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
  Caller admin(port, kAdminToken);
  Caller enroll(port, kEnrollmentToken);
  Reply registered = enroll.post("/v1/clients/register", {{"dataset_size", 10}});
  REQUIRE(registered.status == 201);
  Caller client(port, registered.body["token"].get<std::string>());
  const std::string deep = nested_json(60000);  // about 120 KB, under the 1 MiB body limit
  const std::string before = store_snapshot(dir.file("fedcase.db"));
  struct Case {
    const char* what;
    Caller* caller;
    const char* path;
    std::string body;
  };
  const Case cases[] = {
      {"register", &enroll, "/v1/clients/register", deep},
      {"register device", &enroll, "/v1/clients/register", "{\"device\":" + deep + "}"},
      {"heartbeat", &client, "/v1/clients/heartbeat", "{\"a\":" + deep + "}"},
      {"job selection", &admin, "/v1/admin/jobs", "{\"name\":\"j\",\"selection\":" + deep + "}"},
      {"job training", &admin, "/v1/admin/jobs", "{\"name\":\"j\",\"training\":" + deep + "}"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Reply r = c.caller->call("POST", c.path, c.body, {{"Content-Type", "application/json"}});
    CHECK(r.status == 400);
    CHECK(error_code(r) == "invalid_argument");
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
