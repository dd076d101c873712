// Heartbeat latency while the coordinator folds and commits a large update, over real HTTP on
// 127.0.0.1.
//
//   heartbeat_bench [--parameters N] [--rounds R]
//
// A coordinator (SQLite in a temporary directory, default limits) serves one job whose model
// is one tensor of N floats (default 16,000,000: a 64 MB update, just under the default 64 MiB
// upload limit), one update a round. Each round one client uploads its update (received,
// decoded, validated, folded) and the round driver commits the next model (optimizer step,
// encoding, a SQLite commit of the model); meanwhile another client sends heartbeats back to
// back on its own connection. Reported: heartbeat latency p50 / p99 / max during those busy
// windows, against the same client's latency when the coordinator is idle, measured in the
// same run. The request rate limit is lifted for the two clients. Target: busy p99 < 20 ms. Prints
// a summary and, as its last line, one JSON object.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/http_bench_util.h"
#include "client_sdk/http_client.h"
#include "common/blob.h"
#include "server/core/base/config.h"
#include "server/service.h"
#include "tests/support/temp_dir.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kAdmin = fedcase::bench::kAdminToken;
constexpr const char* kEnroll = fedcase::bench::kEnrollmentToken;
using fedcase::bench::percentile;
using fedcase::bench::seconds_since;

[[noreturn]] void die(const std::string& what) { fedcase::bench::die("heartbeat_bench", what); }

template <class T>
T or_die(fedcase::Result<T> r, const char* what) {
  if (!r.ok()) die(std::string(what) + ": " + r.status().to_string());
  return std::move(r).value();
}

// A caller of the coordinator on 127.0.0.1:`port`.
struct Client : fedcase::bench::Caller {
  Client(uint16_t port, const std::string& token)
      : Caller("heartbeat_bench", fedcase::client::plain_connection("127.0.0.1", port), token) {}
};

}  // namespace

int main(int argc, char** argv) {
  size_t parameters = 16'000'000;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--parameters")
      parameters = std::stoull(argv[i + 1]);
    else if (flag == "--rounds")
      rounds = std::stoi(argv[i + 1]);
    else
      die("usage: heartbeat_bench [--parameters N] [--rounds R]");
  }
  if (argc % 2 == 0) die("usage: heartbeat_bench [--parameters N] [--rounds R]");

  fedcase::testing::TempDir dir;
  const std::string database = dir.file("bench.db");
  fedcase::bench::store_large_job(
      "heartbeat_bench", database,
      {{"name", "large"},
       {"model", "mlp"},
       {"rounds", rounds + 1},
       {"clients_per_round", 1},
       {"min_clients", 1},
       {"selection", {{"policy", "random"}, {"overcommit", 1.0}}},
       {"training", {{"deadline", {{"mode", "fixed"}, {"seconds", 600}}}}}},
      parameters);
  auto config = fedcase::server::parse_coordinator_config({{"port", 0},
                                                           {"database", database},
                                                           {"admin_token", kAdmin},
                                                           {"enrollment_token", kEnroll},
                                                           {"requests_per_second", 1e6}});
  auto service = or_die(fedcase::server::CoordinatorService::start(config), "coordinator");
  const uint16_t port = service->port();

  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 2; ++i) {
    Client enroll(port, kEnroll);
    auto r = enroll.call("POST", "/v1/clients/register", json{{"dataset_size", 100}}.dump(),
                         {{"Content-Type", "application/json"}});
    if (r.status != 201) die("register: " + r.body);
    clients.push_back(std::make_unique<Client>(port, json::parse(r.body)["token"]));
  }
  Client admin(port, kAdmin);
  auto heartbeat = [](Client& c) {
    const auto start = Clock::now();
    auto r = c.call("POST", "/v1/clients/heartbeat", "{}", {{"Content-Type", "application/json"}});
    if (r.status != 200) die("heartbeat: " + r.body);
    return seconds_since(start);
  };

  const std::string update =
      fedcase::encode_blob({0, {{{"w", {parameters}}}}, std::vector<float>(parameters, 0.001f)});
  std::vector<double> idle, busy;
  double upload_s = 0, commit_s = 0;
  for (int round = 1; round <= rounds; ++round) {
    // Whoever holds the round's task uploads; the other one sends heartbeats.
    Client* uploader = nullptr;
    Client* beater = nullptr;
    json task;
    const auto wait_start = Clock::now();
    while (!uploader) {
      for (size_t i = 0; i < 2 && !uploader; ++i) {
        auto r = clients[i]->call("GET", "/v1/task?wait=0");
        if (r.status == 200) {
          uploader = clients[i].get();
          beater = clients[1 - i].get();
          task = json::parse(r.body);
        }
      }
      if (seconds_since(wait_start) > 30) die("no task was handed out");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // The same client's latency on an idle coordinator.
    for (int i = 0; i < 200; ++i) idle.push_back(heartbeat(*beater));

    const uint64_t version = task["model_version"];
    std::string blob = update;
    if (version != 0) {  // the update must name the model version it was trained on
      blob = fedcase::encode_blob(
          {version, {{{"w", {parameters}}}}, std::vector<float>(parameters, 0.001f)});
    }
    std::atomic<bool> done{false};
    std::thread upload([&] {
      const auto start = Clock::now();
      auto r = uploader->call("POST", task["upload_url"], blob,
                              {{"Content-Type", "application/octet-stream"},
                               {"X-Fedcase-Meta", json{{"samples", 10}}.dump()}});
      if (r.status != 200) die("upload: " + std::to_string(r.status) + " " + r.body);
      upload_s += seconds_since(start);
      // Committed once the job's model version moves.
      const auto commit_start = Clock::now();
      while (true) {
        auto d = admin.call("GET", "/v1/admin/jobs/1");
        if (json::parse(d.body)["model_version"] == uint64_t(task["round"])) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      commit_s += seconds_since(commit_start);
      done = true;
    });
    while (!done) busy.push_back(heartbeat(*beater));
    upload.join();
    std::fprintf(stderr, "round %d: %zu heartbeats during upload and commit\n", round, busy.size());
  }
  service->stop();

  const double ms = 1e3;
  const double busy_p99 = percentile(busy, 0.99) * ms;
  std::printf("heartbeat latency, idle:   p50 %.2f ms, p99 %.2f ms (%zu)\n",
              percentile(idle, 0.5) * ms, percentile(idle, 0.99) * ms, idle.size());
  std::printf(
      "heartbeat latency, during %zu-float update folds and commits: p50 %.2f ms, "
      "p99 %.2f ms, max %.2f ms (%zu)\n",
      parameters, percentile(busy, 0.5) * ms, busy_p99, percentile(busy, 1.0) * ms, busy.size());
  std::printf("upload (receive, decode, validate, fold) %.0f ms, commit %.0f ms per round\n",
              upload_s / rounds * ms, commit_s / rounds * ms);
  json out = {{"bench", "heartbeat"},
              {"parameters", parameters},
              {"update_bytes", update.size()},
              {"rounds", rounds},
              {"idle_p50_ms", percentile(idle, 0.5) * ms},
              {"idle_p99_ms", percentile(idle, 0.99) * ms},
              {"busy_p50_ms", percentile(busy, 0.5) * ms},
              {"busy_p99_ms", busy_p99},
              {"busy_max_ms", percentile(busy, 1.0) * ms},
              {"busy_heartbeats", busy.size()},
              {"upload_ms", upload_s / rounds * ms},
              {"commit_ms", commit_s / rounds * ms},
              {"hardware_threads", std::thread::hardware_concurrency()},
              {"target_busy_p99_ms", 20},
              {"target_met", busy_p99 < 20}};
  std::cout << out.dump() << std::endl;
  return 0;
}
