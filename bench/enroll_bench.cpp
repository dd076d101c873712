// Enrolment throughput: many devices registering at once over HTTP on 127.0.0.1.
//
//   enroll_bench [--clients N] [--connections C]
//
// A coordinator (SQLite in a temporary directory, request rate limit lifted) receives N
// registrations (default 1,000) over C keep-alive connections at once (default 8). Reported:
// the wall seconds for all of them, registrations a second, latency p50 / p99, and as the
// same-run reference the same connections' heartbeat round trip (no store write). Target: the
// 1,000 registrations in well under a second. Prints a summary and, last, one JSON object.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/http_bench_util.h"
#include "client_sdk/http_client.h"
#include "server/core/base/config.h"
#include "server/service.h"
#include "tests/support/temp_dir.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kAdmin = fedcase::bench::kAdminToken;
constexpr const char* kEnroll = fedcase::bench::kEnrollmentToken;
using fedcase::bench::percentile;

[[noreturn]] void die(const std::string& what) { fedcase::bench::die("enroll_bench", what); }

}  // namespace

int main(int argc, char** argv) {
  size_t clients = 1000, connections = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) die("usage: enroll_bench [--clients N] [--connections C]");
    if (flag == "--clients")
      clients = std::stoull(argv[++i]);
    else if (flag == "--connections")
      connections = std::max<size_t>(1, std::stoull(argv[++i]));
    else
      die("usage: enroll_bench [--clients N] [--connections C]");
  }
  fedcase::testing::TempDir dir;
  auto config = fedcase::server::parse_coordinator_config({{"port", 0},
                                                           {"database", dir.file("bench.db")},
                                                           {"admin_token", kAdmin},
                                                           {"enrollment_token", kEnroll},
                                                           {"requests_per_second", 1e6}});
  auto service = fedcase::server::CoordinatorService::start(config);
  if (!service.ok()) die(service.status().to_string());
  const uint16_t port = (*service)->port();
  const json body = {{"dataset_size", 600}, {"device", {{"compute_ms_per_sample", 2.0}}}};

  std::mutex mu;
  std::vector<double> latencies, heartbeats;
  std::atomic<size_t> next{0};
  Clock::time_point last_registered{};  // guarded by mu
  auto enrol = [&] {
    fedcase::client::HttpClient http(fedcase::client::plain_connection("127.0.0.1", port));
    std::string token;
    std::vector<double> mine;
    while (next++ < clients) {
      const auto start = Clock::now();
      auto r = http.request("POST", "/v1/clients/register", body.dump(),
                            {{"Authorization", std::string("Bearer ") + kEnroll},
                             {"Content-Type", "application/json"}},
                            30);
      if (!r.ok() || r->status != 201) die("registration failed");
      mine.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      token = json::parse(r->body)["token"];
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      last_registered = std::max(last_registered, Clock::now());
    }
    // The reference: a contact that writes nothing, on the same connection.
    std::vector<double> beats;
    for (int i = 0; i < 100 && !token.empty(); ++i) {
      const auto start = Clock::now();
      auto r = http.request(
          "POST", "/v1/clients/heartbeat", "{}",
          {{"Authorization", "Bearer " + token}, {"Content-Type", "application/json"}}, 30);
      if (!r.ok() || r->status != 200) die("heartbeat failed");
      beats.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    }
    std::lock_guard<std::mutex> lock(mu);
    latencies.insert(latencies.end(), mine.begin(), mine.end());
    heartbeats.insert(heartbeats.end(), beats.begin(), beats.end());
  };
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (size_t w = 0; w < connections; ++w) workers.emplace_back(enrol);
  for (auto& t : workers) t.join();
  (*service)->stop();
  // From the first request to the last registration (the heartbeats come after).
  const double enrol_wall = std::chrono::duration<double>(last_registered - start).count();
  std::printf(
      "%zu registrations over %zu connections in %.3f s: %.0f a second; latency p50 "
      "%.2f ms, p99 %.2f ms; heartbeat round trip p50 %.3f ms\n",
      latencies.size(), connections, enrol_wall, double(latencies.size()) / enrol_wall,
      percentile(latencies, 0.5) * 1e3, percentile(latencies, 0.99) * 1e3,
      percentile(heartbeats, 0.5) * 1e3);
  json out = {
      {"bench", "enroll"},
      {"registrations", latencies.size()},
      {"connections", connections},
      {"seconds", enrol_wall},
      {"per_second", double(latencies.size()) / enrol_wall},
      {"latency_p50_ms", percentile(latencies, 0.5) * 1e3},
      {"latency_p99_ms", percentile(latencies, 0.99) * 1e3},
      {"heartbeat_p50_ms", percentile(heartbeats, 0.5) * 1e3},
      {"registration_vs_heartbeat", percentile(latencies, 0.5) / percentile(heartbeats, 0.5)},
      {"hardware_threads", std::thread::hardware_concurrency()},
      {"target_seconds_for_1000", 1.0},
      {"target_met",
       latencies.size() >= 1000 && enrol_wall * 1000.0 / double(latencies.size()) < 1.0}};
  std::cout << out.dump() << std::endl;
  return 0;
}
