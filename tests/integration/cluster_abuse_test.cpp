// The bad-input and abuse suites against a cluster: a private PostgreSQL
// (tests/support/postgres_server.h), three fedcase-coordinator replicas with leases and HAProxy
// in front (tests/support/haproxy_process.h). With a round open, the bad requests of
// tests/support/bad_requests.h go through HAProxy and to each replica's own port: each gets
// the answer a single coordinator gives, and none changes the database; a client's second
// update to another replica than its first is refused; slow-loris and flooding connections are
// cut by HAProxy without crowding out clients. Afterwards every replica is alive and ready, and
// the honest updates commit the round with a finite model (docs/scaling.md, "Bad input on a
// cluster").

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <map>
#include <memory>

#include "tests/support/bad_requests.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/coordinator_process.h"
#include "tests/support/haproxy_process.h"
#include "tests/support/postgres_server.h"
#include "tests/support/raw_connection.h"
#include "tests/support/store_snapshot.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kReplicas = 3;
constexpr size_t kMaxJsonBytes = 256 << 10;  // room for deep_json_requests()' 120 KB
constexpr size_t kMaxUploadBytes = 2 << 20;
constexpr double kReadTimeoutS = 2;
constexpr int kMaxConnectionsPerClient = 40;  // HAProxy's, per client address

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Client {
  std::string token;
  std::unique_ptr<Caller> caller;  // through HAProxy
  json task;                       // null while it has none
};

}  // namespace

TEST_CASE("bad input through HAProxy and at every replica is refused alike and changes nothing") {
  const auto started = Clock::now();
  PostgresServer& server = PostgresServer::shared();
  const std::string database = server.create_database();
  TempDir dir;
  std::map<std::string, std::unique_ptr<CoordinatorProcess>> replicas;
  std::vector<std::pair<std::string, uint16_t>> targets;  // HAProxy, then each replica
  std::vector<uint16_t> backend;
  const json limits = {{"max_json_bytes", kMaxJsonBytes},
                       {"max_upload_bytes", kMaxUploadBytes},
                       {"read_timeout_s", kReadTimeoutS},
                       {"unauthenticated_per_second", 2}};
  for (size_t i = 1; i <= kReplicas; ++i) {
    const std::string name = "r" + std::to_string(i);
    replicas[name] = std::make_unique<CoordinatorProcess>(
        write_replica_config(dir, name, server.url(database), limits), dir.file(name + ".log"));
  }
  for (const auto& [name, process] : replicas) {
    const uint16_t port = wait_for_port(dir.file(name + ".port"), dir.file(name + ".log"));
    REQUIRE(port != 0);
    targets.emplace_back(name, port);
    backend.push_back(port);
  }
  HaproxySettings settings;
  settings.http_request_timeout = "1s";
  settings.max_connections_per_client = kMaxConnectionsPerClient;
  HaproxyProcess proxy(dir.path().string(), backend, settings);
  targets.insert(targets.begin(), std::make_pair(std::string("HAProxy"), proxy.port()));

  // Four clients registered through HAProxy (on different replicas), then job 1 (K = 3): three
  // are invited to its round 1, one is left out.
  Caller admin(proxy.port(), kAdminToken);
  Caller enroll(proxy.port(), kEnrollmentToken);
  std::vector<Client> clients(4);
  for (Client& c : clients) {
    Reply r = enroll.post("/v1/clients/register", {{"dataset_size", 200}});
    REQUIRE(r.status == 201);
    c.token = r.body["token"];
    c.caller = std::make_unique<Caller>(proxy.port(), c.token);
  }
  REQUIRE(admin.post("/v1/admin/jobs", bad_input_job()).status == 201);
  std::vector<Client*> invited;
  REQUIRE(wait_until(
      [&] {
        for (Client& c : clients) {
          if (!c.task.is_null()) continue;
          Reply t = c.caller->get("/v1/task?wait=1");
          if (t.status == 200) {
            c.task = t.body;
            invited.push_back(&c);
          }
        }
        return invited.size() == 3;
      },
      60));
  Client* outsider = nullptr;
  for (Client& c : clients) {
    if (c.task.is_null()) outsider = &c;
  }
  REQUIRE(outsider != nullptr);
  const std::string upload_url = invited[0]->task["upload_url"];
  const std::string model_url = invited[0]->task["model_url"];
  Reply model_reply = retried([&] { return invited[0]->caller->get(model_url); });
  REQUIRE(model_reply.status == 200);
  const ModelBlob base = std::move(decode_blob(model_reply.raw, 1 << 24)).value();
  const std::string good = update_body(std::vector<float>(base.data.size(), 0.0f), 0, base.layout);
  const std::string meta = good_update_meta();

  // Every replica serves the round (the owner's, or its copy), and knows who is invited.
  const std::string status_url = "/v1/jobs/1/rounds/1/status";
  for (const auto& [name, port] : targets) {
    CAPTURE(name);
    Caller invitee(port, invited[0]->token);
    CHECK(wait_until(
        [&] {
          return invitee.get(status_url).body == json{{"needed", true}, {"reason", "open"}};
        },
        20));
    CHECK(retried([&] { return Caller(port, outsider->token).get(status_url); }).body["reason"] ==
          "not invited");
    // Every replica knows every client's token from here on (it read them from the store).
    for (Client& c : clients) {
      CHECK(retried([&] { return Caller(port, c.token).get(status_url); }).status == 200);
    }
  }
  MESSAGE("round 1 open on every replica after " << seconds_since(started) << " s");

  // The bad requests, through HAProxy and at each replica: the same answers, nothing changed.
  const std::string before = store_snapshot(server, database);
  for (const auto& [name, port] : targets) {
    CAPTURE(name);
    const BadInputTarget target{port, invited[0]->token, outsider->token, upload_url, model_url,
                                base, kMaxJsonBytes,     kMaxUploadBytes};
    std::vector<BadRequest> requests = bad_requests(target);
    for (BadRequest& deep : deep_json_requests(port, outsider->token)) {
      requests.push_back(std::move(deep));
    }
    for (const BadRequest& request : requests) {
      CAPTURE(request.what);
      // A token a replica does not know is looked up in its store first (503, retried).
      check_answer(request, retried(request.send), port == proxy.port());
      CHECK(store_snapshot(server, database) == before);
    }
    for (const RawBadRequest& absurd : absurd_requests()) {
      CAPTURE(absurd.what);
      RawConnection c(port);
      c.send(absurd.bytes);
      const std::string answer = c.read(12);
      CHECK(answer.rfind(port == proxy.port() ? absurd.proxied_answer : absurd.answer, 0) == 0);
    }
    // A body longer than its Content-Length: the rest is read as the next request.
    RawConnection longer(port);
    longer.send("GET /v1/admin/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                std::string(kAdminToken) + "\r\nContent-Length: 2\r\n\r\n{}NOT HTTP\r\n\r\n");
    const std::string answers = longer.read();
    CHECK(answers.rfind("HTTP/1.1 200", 0) == 0);
    CHECK(answers.find("HTTP/1.1 400") != std::string::npos);
    CHECK(store_snapshot(server, database) == before);
  }
  MESSAGE("bad requests answered after " << seconds_since(started) << " s");

  // A body shorter than its Content-Length, everywhere at once: the replica waits
  // read_timeout_s for the rest, then closes the connection without an answer; HAProxy, whose
  // replica closed on it, answers 502.
  {
    std::vector<std::unique_ptr<RawConnection>> shorter;
    for (const auto& [name, port] : targets) {
      shorter.push_back(std::make_unique<RawConnection>(port));
      shorter.back()->send("POST " + upload_url + " HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                           invited[0]->token + "\r\nX-Fedcase-Meta: " + meta +
                           "\r\nContent-Length: 100000\r\n\r\n" + good.substr(0, 1000));
    }
    const auto sent = Clock::now();
    for (size_t i = 0; i < targets.size(); ++i) {
      CAPTURE(targets[i].first);
      shorter[i]->set_receive_timeout(3 * kReadTimeoutS);
      const std::string answer = shorter[i]->read();
      CHECK(shorter[i]->closed());
      CHECK(answer.rfind(i == 0 ? "HTTP/1.1 502" : "", 0) == 0);
      if (i > 0) CHECK(answer.empty());
    }
    CHECK(seconds_since(sent) < 2.5 * kReadTimeoutS);
    CHECK(store_snapshot(server, database) == before);
  }

  // Token guesses through HAProxy: 401 or 429, each replica limiting HAProxy's address (every
  // caller behind HAProxy has it), and 503 while a replica looks the token up the first time
  // (it is nobody's from then on); a known token is still served.
  const Guesses guesses = guess_tokens(proxy.port(), 4);
  CHECK(guesses.unauthorized >= 3);
  CHECK(guesses.limited >= 10);
  CHECK(guesses.looked_up <= 3 * int(kReplicas));
  CHECK(guesses.unauthorized + guesses.limited + guesses.looked_up == guesses.sent);
  CHECK(admin.get("/v1/admin/jobs").status == 200);
  CHECK(store_snapshot(server, database) == before);

  // Slow loris through HAProxy: one address (127.0.0.2) trickles header bytes on five
  // connections; HAProxy answers each 408 at `timeout http-request` (1 s), and a client is
  // served meanwhile.
  {
    std::vector<std::unique_ptr<RawConnection>> loris;
    for (int i = 0; i < 5; ++i) {
      loris.push_back(std::make_unique<RawConnection>(proxy.port(), "127.0.0.2"));
      REQUIRE(loris.back()->send("GET /v1/admin/jobs HTTP/1.1\r\nHost: x\r\n"));
    }
    const auto loris_started = Clock::now();
    const auto asked = Clock::now();
    CHECK(admin.get("/v1/admin/jobs").status == 200);
    CHECK(seconds_since(asked) < 1);
    trickle(loris, "X-Slow: 1\r\n", loris_started + std::chrono::seconds(3));
    for (auto& c : loris) {
      c->set_receive_timeout(0.5);
      CHECK(c->read().rfind("HTTP/1.1 408", 0) == 0);
      CHECK(c->closed());
    }
    CHECK(seconds_since(loris_started) < 2.5);
  }

  // One address (127.0.0.3) holds as many keep-alive connections as HAProxy lets one client
  // hold (each answered once, so HAProxy counts it): the next one is closed at once; a client
  // from another address is served.
  {
    std::vector<std::unique_ptr<RawConnection>> flood;
    for (int i = 0; i < kMaxConnectionsPerClient; ++i) {
      flood.push_back(std::make_unique<RawConnection>(proxy.port(), "127.0.0.3"));
      REQUIRE(flood.back()->send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"));
      REQUIRE(flood.back()->read(12).rfind("HTTP/1.1 200", 0) == 0);
    }
    RawConnection over(proxy.port(), "127.0.0.3");
    over.set_receive_timeout(0.5);
    CHECK(over.read().empty());
    CHECK(over.closed());
    CHECK(admin.get("/v1/admin/jobs").status == 200);
  }

  // An invitee's update admitted at one replica; its second update, to each other replica and
  // through HAProxy, is a conflict and changes nothing.
  const std::string first_replica = targets[1].first;
  Caller first_upload(targets[1].second, invited[0]->token);
  REQUIRE(upload(first_upload, upload_url, good, meta).status == 200);
  const std::string after_one = store_snapshot(server, database);
  CHECK(after_one != before);
  for (size_t i = 0; i < targets.size(); ++i) {
    if (i == 1) continue;
    CAPTURE(targets[i].first);
    Caller again(targets[i].second, invited[0]->token);
    Reply twice = upload(again, upload_url, good, meta);
    CHECK(twice.status == 409);
    CHECK(error_code(twice) == "conflict");
    CHECK(store_snapshot(server, database) == after_one);
  }

  // Every replica is alive and ready.
  for (const auto& [name, port] : targets) {
    CAPTURE(name);
    CHECK(Caller(port, "").get("/healthz").status == 200);
  }
  for (auto& [name, process] : replicas) {
    CAPTURE(name);
    CHECK(process->running());
  }

  // The other invitees' updates, through HAProxy, commit the round with a finite model: the
  // base (zero deltas), served alike by every replica.
  for (size_t i = 1; i < invited.size(); ++i) {
    CHECK(upload(*invited[i]->caller, upload_url, good, meta).status == 200);
  }
  check_round_committed(admin);
  for (const auto& [name, port] : targets) {
    CAPTURE(name);
    Caller reader(port, kAdminToken);
    Reply next;
    CHECK(wait_until([&] { return (next = reader.get("/v1/jobs/1/models/1")).status == 200; },
                     10 * kTestLeaseS));
    auto model = decode_blob(next.raw, 1 << 24);
    REQUIRE(model.ok());
    bool finite = true;
    for (float v : model->data) finite &= std::isfinite(v);
    CHECK(finite);
    CHECK(model->data == base.data);
  }

  // An update to the committed round, anywhere, is refused and changes nothing.
  const std::string committed = store_snapshot(server, database);
  for (const auto& [name, port] : targets) {
    CAPTURE(name);
    Caller late(port, outsider->token);
    CHECK(upload(late, upload_url, good, meta).status == 409);
  }
  CHECK(store_snapshot(server, database) == committed);
  MESSAGE("first update admitted at " << first_replica << "; test took " << seconds_since(started)
                                      << " s");
}
