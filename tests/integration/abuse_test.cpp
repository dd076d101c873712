// The coordinator against abusive peers over real sockets: slow-loris connections, idle
// keep-alives, pipelined and HTTP/1.0 requests, absurd headers and targets, token guessing,
// more uploads than body slots, and a graceful stop with work in flight. Each gets the
// documented answer, and refused requests leave the SQLite file unchanged.

#include <doctest/doctest.h>

#include <chrono>
#include <future>
#include <thread>

#include "tests/support/bad_requests.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/raw_connection.h"
#include "tests/support/store_snapshot.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

std::string upload_header(size_t length, const std::string& token) {
  return "POST /v1/jobs/1/rounds/1/update HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer " +
         token + "\r\nContent-Length: " + std::to_string(length) + "\r\n\r\n";
}

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

TEST_CASE("slow-loris connections are cut at the read timeout and cannot crowd out clients") {
  TempDir dir;
  auto service = start_coordinator(dir, [](server::CoordinatorConfig& c) {
    c.max_connections_per_ip = 5;
    c.read_timeout_s = 1;
  });
  const uint16_t port = service->port();
  // One peer (127.0.0.2) opens as many connections as it may and trickles header bytes.
  std::vector<std::unique_ptr<RawConnection>> loris;
  for (int i = 0; i < 5; ++i) {
    loris.push_back(std::make_unique<RawConnection>(port, "127.0.0.2"));
    REQUIRE(loris.back()->send("GET /v1/admin/jobs HTTP/1.1\r\nHost: x\r\n"));
  }
  const auto started = Clock::now();
  RawConnection sixth(port, "127.0.0.2");
  const std::string refused = sixth.read();
  CHECK(refused.rfind("HTTP/1.1 503", 0) == 0);
  CHECK(refused.find("from this address") != std::string::npos);

  // A real client from another address is served at once.
  Caller admin(port, kAdminToken);
  const auto asked = Clock::now();
  CHECK(admin.get("/v1/admin/jobs").status == 200);
  CHECK(seconds_since(asked) < 0.5);

  // Trickling bytes does not extend the read timeout: every loris is closed by about 1 s.
  bool all_cut = true;
  trickle(loris, "X-Slow: 1\r\n", started + std::chrono::seconds(3));
  for (auto& c : loris) {
    c->set_receive_timeout(0.5);
    c->read();
    all_cut &= c->closed();
  }
  CHECK(all_cut);
  CHECK(seconds_since(started) < 2.5);
  // Their places are free again.
  RawConnection after(port, "127.0.0.2");
  after.send(get_request("/v1/admin/jobs", kAdminToken));
  CHECK(after.read(12).rfind("HTTP/1.1 200", 0) == 0);
}

TEST_CASE("an idle keep-alive connection is closed after idle_timeout_s") {
  TempDir dir;
  auto service =
      start_coordinator(dir, [](server::CoordinatorConfig& c) { c.idle_timeout_s = 0.5; });
  RawConnection idle(service->port());
  idle.set_receive_timeout(3);
  REQUIRE(idle.send(get_request("/v1/admin/jobs", kAdminToken)));
  const auto answered = Clock::now();
  const std::string answer = idle.read();
  CHECK(answer.rfind("HTTP/1.1 200", 0) == 0);
  CHECK(idle.closed());
  CHECK(seconds_since(answered) == doctest::Approx(0.5).epsilon(0.8));
}

TEST_CASE("pipelined and HTTP/1.0 requests are answered in order, absurd ones refused") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  const std::string before = store_snapshot(dir.file("fedcase.db"));

  RawConnection pipelined(port);
  REQUIRE(pipelined.send(get_request("/v1/admin/jobs", kAdminToken) +
                         get_request("/v1/admin/nope", kAdminToken) +
                         "GET /v1/admin/clients HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                         kAdminToken + "\r\nConnection: close\r\n\r\n"));
  const std::string answers = pipelined.read();
  CHECK(count(answers, "HTTP/1.1 200") == 2);
  CHECK(count(answers, "HTTP/1.1 404") == 1);
  CHECK(answers.find("HTTP/1.1 404") > answers.find("HTTP/1.1 200"));
  CHECK(answers.find("\"clients\"") > answers.find("HTTP/1.1 404"));
  CHECK(pipelined.closed());

  RawConnection old(port);
  REQUIRE(old.send(get_request("/v1/admin/jobs", kAdminToken, "HTTP/1.0")));
  CHECK(old.read().rfind("HTTP/1.0 200", 0) == 0);
  CHECK(old.closed());

  for (const RawBadRequest& a : absurd_requests()) {
    CAPTURE(a.what);
    RawConnection c(port);
    c.send(a.bytes);
    CHECK(c.read(12).rfind(a.answer, 0) == 0);
  }
  CHECK(store_snapshot(dir.file("fedcase.db")) == before);
}

TEST_CASE("wrong tokens get 401 on every route, guessing is limited per address") {
  TempDir dir;
  auto service = start_coordinator(
      dir, [](server::CoordinatorConfig& c) { c.unauthenticated_per_second = 2; });
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);
  REQUIRE(admin.post("/v1/admin/jobs", {{"name", "j"}, {"model", "mlp"}, {"rounds", 1}}).status ==
          201);
  const std::string before = store_snapshot(dir.file("fedcase.db"));

  const Guesses guesses = guess_tokens(port, 3);
  CHECK(guesses.unauthorized >= 4);
  CHECK(guesses.limited >= 20);
  CHECK(guesses.unauthorized + guesses.limited == guesses.sent);
  // The limit is the guesser's alone: a known token from the same address is served.
  CHECK(admin.get("/v1/admin/jobs").status == 200);
  CHECK(store_snapshot(dir.file("fedcase.db")) == before);
}

TEST_CASE("uploads beyond max_upload_bodies wait for a slot before their body is read") {
  TempDir dir;
  auto service = start_coordinator(dir, [](server::CoordinatorConfig& c) {
    c.max_upload_bodies = 1;
    c.read_timeout_s = 10;
  });
  const uint16_t port = service->port();
  Caller enroller(port, kEnrollmentToken);
  std::vector<std::string> tokens;
  for (int i = 0; i < 2; ++i) {
    Reply r = enroller.post("/v1/clients/register", json::object());
    REQUIRE(r.status == 201);
    tokens.push_back(r.body["token"]);
  }
  // Only a registered client may hold a slot: others are refused before their body is read.
  for (const char* token : {"not-a-token-0123456789", kAdminToken}) {
    RawConnection refused(port);
    REQUIRE(refused.send(upload_header(1000, token)));
    const char* expected = std::string(token) == kAdminToken ? "HTTP/1.1 403" : "HTTP/1.1 401";
    CHECK(refused.read(12).rfind(expected, 0) == 0);
  }
  // A holds the only slot: its header and part of its body have arrived.
  RawConnection a(port);
  REQUIRE(a.send(upload_header(1000, tokens[0]) + std::string(10, 'x')));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  // B is complete, but waits; other requests do not.
  RawConnection b(port);
  REQUIRE(b.send(upload_header(100, tokens[1]) + std::string(100, 'y')));
  b.set_receive_timeout(1);
  CHECK(b.read(1).empty());
  Caller admin(port, kAdminToken);
  CHECK(admin.get("/v1/admin/jobs").status == 200);
  // A finishes: it is answered, and then B is read and answered.
  REQUIRE(a.send(std::string(990, 'x')));
  CHECK(a.read(12).rfind("HTTP/1.1 404", 0) == 0);  // there is no job 1
  b.set_receive_timeout(5);
  CHECK(b.read(12).rfind("HTTP/1.1 404", 0) == 0);
}

TEST_CASE("a graceful stop answers waiting polls, finishes uploads in flight, then closes") {
  TempDir dir;
  auto service =
      start_coordinator(dir, [](server::CoordinatorConfig& c) { c.drain_timeout_s = 10; });
  const uint16_t port = service->port();
  Caller enroller(port, kEnrollmentToken);
  Reply registered = enroller.post("/v1/clients/register", json::object());
  REQUIRE(registered.status == 201);
  const std::string token = registered.body["token"];

  // A long poll waiting for a task, and an upload whose body is still arriving.
  auto poll = std::async(std::launch::async, [&] {
    Caller client(port, token);
    const auto start = Clock::now();
    const int status = client.get("/v1/task?wait=5").status;
    return std::make_pair(status, seconds_since(start));
  });
  RawConnection upload(port);
  REQUIRE(upload.send(upload_header(1000, token) + std::string(500, 'x')));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));

  const auto stop_started = Clock::now();
  auto stopping = std::async(std::launch::async, [&] { service->stop(); });
  const auto [poll_status, poll_seconds] = poll.get();
  CHECK(poll_status == 204);
  CHECK(poll_seconds < 2);
  // New connections are no longer accepted.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK(Caller(port, kAdminToken).get("/v1/admin/jobs").status == 0);
  // The upload in flight is still read to its end and answered, then its connection closes.
  CHECK(stopping.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
  REQUIRE(upload.send(std::string(500, 'x')));
  const std::string answer = upload.read();
  CHECK(answer.rfind("HTTP/1.1 404", 0) == 0);  // there is no job 1
  CHECK(answer.find("Connection: close") != std::string::npos);
  CHECK(upload.closed());
  stopping.get();
  CHECK(seconds_since(stop_started) < 5);
}
