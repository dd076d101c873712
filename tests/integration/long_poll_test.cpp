// Long polls are answered when their task appears, not on a timer.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "protocol/check_in.h"
#include "tests/support/coordinator_harness.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

TEST_CASE("waiting polls get their tasks within milliseconds of the round's opening") {
  TempDir dir;
  auto service =
      start_coordinator(dir, [](server::CoordinatorConfig& c) { c.long_poll_max_s = 20; });
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);
  Caller enroll(port, kEnrollmentToken);
  constexpr size_t kClients = 8;
  auto register_client = [&] {
    Reply r = enroll.post("/v1/clients/register", {{"dataset_size", 100}});
    REQUIRE(r.status == 201);
    return std::make_unique<Caller>(port, r.body["token"].get<std::string>());
  };
  std::vector<std::unique_ptr<Caller>> clients;
  for (size_t i = 0; i < kClients; ++i) clients.push_back(register_client());
  // A running job whose round needs one client more than there are: the polls wait for it.
  Reply created = admin.post("/v1/admin/jobs", {{"name", "dispatch"},
                                                {"model", "mlp"},
                                                {"clients_per_round", kClients + 1},
                                                {"min_clients", kClients + 1},
                                                {"selection", {{"overcommit", 1.0}}}});
  REQUIRE(created.status == 201);
  std::vector<Reply> replies(kClients);
  std::vector<double> answered(kClients);
  std::vector<std::thread> pollers;
  for (size_t i = 0; i < kClients; ++i) {
    pollers.emplace_back([&, i] {
      replies[i] = clients[i]->get("/v1/task?wait=15");
      answered[i] = unix_now();
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the polls are waiting
  CHECK(admin.get("/v1/admin/jobs/1").body["rounds"].empty());
  register_client();  // the last one the round needs: it opens
  for (auto& t : pollers) t.join();
  Reply detail = admin.get("/v1/admin/jobs/1");
  REQUIRE(detail.status == 200);
  REQUIRE(!detail.body["rounds"].empty());
  const double opened = detail.body["rounds"][0]["opened_at"];
  double slowest = 0;
  for (size_t i = 0; i < kClients; ++i) {
    CAPTURE(i);
    REQUIRE(replies[i].status == 200);
    CHECK(replies[i].body["round"] == 1);
    slowest = std::max(slowest, answered[i] - opened);
  }
  MESSAGE("slowest dispatch " << slowest * 1e3 << " ms after the round opened");
  CHECK(slowest < 0.1);  // a 200 ms re-check would often exceed this
}

TEST_CASE("a poll without a task ends empty at its wait, told when to check in again") {
  TempDir dir;
  auto service = start_coordinator(dir);
  Caller admin(service->port(), kAdminToken);
  Caller enroll(service->port(), kEnrollmentToken);
  Reply r = enroll.post("/v1/clients/register", {{"dataset_size", 100}});
  REQUIRE(r.status == 201);
  Caller client(service->port(), r.body["token"].get<std::string>());
  auto timed_poll = [&](double& waited) {
    const auto start = std::chrono::steady_clock::now();
    Reply empty = client.get("/v1/task?wait=1");
    waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return empty;
  };

  // No job could give it a task: answered at once, with the longest period (the tests' 1 s).
  double waited = 0;
  Reply idle = timed_poll(waited);
  CHECK(idle.status == 204);
  CHECK(waited < 0.5);
  auto window = protocol::read_check_in(idle.response.header("fedcase-check-in"));
  REQUIRE_MESSAGE(window.ok(), window.status().to_string());
  CHECK(window->after_s == doctest::Approx(0.5));  // 1 s, jittered by half
  CHECK(window->before_s == doctest::Approx(1.5));
  CHECK(window->reconnect_s == 1);

  // A running job that opens no round (it needs two clients): the poll waits out its second.
  REQUIRE(admin.post("/v1/admin/jobs", {{"name", "waiting"},
                                        {"model", "mlp"},
                                        {"clients_per_round", 2},
                                        {"min_clients", 2}})
              .status == 201);
  Reply empty = timed_poll(waited);
  CHECK(empty.status == 204);
  CHECK(waited >= 0.95);
  CHECK(waited < 3);
  // One device, and a round's 3 invitations (2 x 1.3) wanted 4 times over: the jobs want
  // more than the whole fleet, so it checks in again at once.
  window = protocol::read_check_in(empty.response.header("fedcase-check-in"));
  REQUIRE(window.ok());
  CHECK(window->before_s == 0);
  // The connection stays usable after the empty answer.
  CHECK(client.post("/v1/clients/heartbeat", json::object()).status == 200);
}
