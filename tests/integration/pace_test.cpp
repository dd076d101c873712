// Pace steering with a real fleet: 2,000 SDK devices (one thread each) against the coordinator
// binary on an SQLite file. While a job runs, only about the pool its rounds choose from is
// checked in (the rest sleep without a connection, docs/scaling.md "Pace steering"); after the
// coordinator is killed and started again, the devices' returns spread over the operator's
// reconnect window (peak at most twice the mean); and every round still gets its K updates.

#include <doctest/doctest.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "client_sdk/fleet.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/coordinator_process.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

constexpr size_t kDevices = 2000;
constexpr size_t kPerRound = 20;    // K; a round invites ceil(1.3 K) = 26
constexpr double kReconnectS = 20;  // the operator's reconnect window
constexpr double kOutageS = 25;     // longer than most devices' sleep: nearly all miss it
constexpr double kBinS = 2;         // the check-in rate is read over bins this long

// Each device holds a connection while it is checked in (and all of them while they register):
// more than the default 1,024 descriptors, for this process and the coordinator it starts.
void allow_many_files() {
  rlimit limit{};
  REQUIRE(getrlimit(RLIMIT_NOFILE, &limit) == 0);
  limit.rlim_cur = limit.rlim_max;
  REQUIRE(setrlimit(RLIMIT_NOFILE, &limit) == 0);
  REQUIRE(limit.rlim_cur >= 2 * kDevices + 100);
}

void write_config(const TempDir& dir, uint16_t port) {
  json config = {{"port", port},
                 {"port_file", dir.file("port")},
                 {"database", dir.file("fedcase.db")},
                 {"admin_token", kAdminToken},
                 {"enrollment_token", kEnrollmentToken},
                 {"eval_data_dir", FEDCASE_FMNIST_DIR},
                 {"eval_samples", 500},
                 {"long_poll_max_s", 5},
                 // A fleet on one address, registering at once: not a caller to throttle.
                 {"max_connections_per_ip", 4 * kDevices},
                 {"requests_per_second", 1e5},
                 {"pace", {{"reconnect_window_s", kReconnectS}}}};
  std::ofstream(dir.file("coordinator.json")) << config.dump(2);
  std::remove(dir.file("port").c_str());
}

// Task polls answered so far, as a /metrics page counts them.
double check_ins(const std::string& metrics) {
  double total = 0;
  for (const char* answer : {"task", "later"}) {
    const std::string series = std::string("fedcase_check_ins_total{answer=\"") + answer + "\"}";
    total += std::max(0.0, metric_value(metrics, series));
  }
  return total;
}

}  // namespace

TEST_CASE(
    "2,000 steered devices: a small pool checks in, an outage's returns spread out, every "
    "round gets its K") {
  allow_many_files();
  TempDir dir;
  const std::string config_path = dir.file("coordinator.json");
  const std::string log_path = dir.file("coordinator.log");
  write_config(dir, 0);
  auto first = std::make_unique<CoordinatorProcess>(config_path, log_path);
  const uint16_t port = wait_for_port(dir.file("port"), log_path);
  REQUIRE(port != 0);
  Caller admin(port, kAdminToken);
  const json job = {
      {"name", "steered"},
      {"model", "mlp"},
      {"rounds", 1000},
      {"clients_per_round", kPerRound},
      {"selection", {{"policy", "random"}, {"overcommit", 1.3}}},
      {"training",
       {{"sample_budget", 10}, {"lr", 0.05}, {"deadline", {{"mode", "fixed"}, {"seconds", 60}}}}}};
  REQUIRE(admin.post("/v1/admin/jobs", job).status == 201);

  const ml::Dataset& slice = fmnist_train();  // 30 samples a device
  const auto started = std::chrono::steady_clock::now();
  auto fleet = client::Fleet::start(test_fleet(port, kDevices, slice));
  REQUIRE_MESSAGE(fleet.ok(), fleet.status().to_string());
  json detail;
  REQUIRE(wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/1").body;
        return committed_rounds(detail).size() >= 3;
      },
      240));

  // Steady, once the fleet's first check-ins (all at its start) have spread: the job wants
  // 4 x 26 = 104 devices checked in, its polls held 1 s, so a period of 1 x (2000 / 104 - 1)
  // = 18.2 s and about 2000 / 19.2 = 104 check-ins a second answered "later"; the devices
  // sleep in between and hold no connection. A poll that finds the pool full is answered at
  // once: about the pool is available (the round's invitees training aside).
  std::this_thread::sleep_until(started + std::chrono::seconds(45));
  const std::string first_page = admin.get("/metrics").raw;
  std::this_thread::sleep_for(std::chrono::seconds(10));
  const std::string page = admin.get("/metrics").raw;
  const std::string later = "fedcase_check_ins_total{answer=\"later\"}";
  const double later_per_s = (metric_value(page, later) - metric_value(first_page, later)) / 10;
  const double connected = metric_value(page, "fedcase_clients_connected");
  const double open = metric_value(page, "fedcase_http_open_connections");
  const double period = metric_value(page, "fedcase_check_in_period_seconds");
  MESSAGE("steady: " << connected << " of " << kDevices << " devices available, " << open
                     << " connections open, check-in period " << period << " s, " << later_per_s
                     << " check-ins a second told to come back later");
  CHECK(period == doctest::Approx(1.0 * (kDevices / 104.0 - 1)).epsilon(0.05));
  CHECK(later_per_s == doctest::Approx(kDevices / (period + 1)).epsilon(0.35));
  CHECK(connected <= 1.25 * 104);
  CHECK(open <= 1.25 * 104);

  // The outage: every device that checks in meanwhile finds nobody.
  first->kill_now();
  std::this_thread::sleep_for(std::chrono::duration<double>(kOutageS));
  write_config(dir, port);
  CoordinatorProcess second(config_path, log_path);
  REQUIRE(wait_for_port(dir.file("port"), log_path) == port);
  const auto back = std::chrono::steady_clock::now();
  Caller admin2(port, kAdminToken);

  // The check-ins of the reconnect window that follows, bin by bin.
  const size_t bins = size_t(kReconnectS / kBinS);
  std::vector<double> at_edge(bins + 1, 0);  // check-ins counted by each bin's end
  for (size_t edge = 1; edge <= bins; ++edge) {
    std::this_thread::sleep_until(back + std::chrono::duration<double>(edge * kBinS));
    at_edge[edge] = check_ins(admin2.get("/metrics").raw);
  }
  std::vector<double> per_bin;
  for (size_t b = 0; b < bins; ++b) per_bin.push_back(at_edge[b + 1] - at_edge[b]);
  const double mean = at_edge[bins] / double(bins);
  const double peak = *std::max_element(per_bin.begin(), per_bin.end());
  std::string shape;
  for (double n : per_bin) shape += std::to_string(int(n)) + " ";
  MESSAGE("after a " << kOutageS << " s outage, check-ins per " << kBinS << " s over the "
                     << kReconnectS << " s window: " << shape << "(peak " << peak / mean
                     << "x the mean)");
  CHECK(at_edge[bins] >= 0.8 * kDevices);  // nearly every device came back within the window
  CHECK(peak <= 2 * mean);

  // The job goes on, and every round it committed had its K updates.
  const size_t before = committed_rounds(detail).size();
  REQUIRE(wait_until(
      [&] {
        detail = admin2.get("/v1/admin/jobs/1").body;
        return committed_rounds(detail).size() >= before + 2;
      },
      180));
  for (const json& round : committed_rounds(detail)) {
    CHECK_MESSAGE(round["metrics"]["updates"].get<size_t>() >= kPerRound, round.dump());
  }
  fleet.value()->stop();
}
