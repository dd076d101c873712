// The coordinator's serving path under load, over real sockets on 127.0.0.1, against the raw
// loopback TCP throughput measured in the same run.
//
//   serve_bench [--clients C] [--parameters P] [--rounds R] [--idle N] [--tls]
//               [--io-threads T] [--upload-threads U]
//
// A coordinator (SQLite in a temporary directory) serves one job whose model is one tensor of
// P floats (default 1,000,000: 4 MB), all C clients (default 50) invited every round. The
// clients run in a forked process: they register, then one thread drives every client's
// keep-alive connection (bench/event_fleet.h): each long-polls for its task, downloads the
// model, waits until every client has it, then uploads a delta, so that the uploads of a
// round arrive together. Reported:
//   (a) ingest: bytes of accepted updates (received, decoded, validated, folded) per second,
//       from a round's first upload to its last answer, against one TCP stream's loopback
//       throughput measured just before that round's uploads; the median over rounds of
//       the ratio (target >= 0.5x; with --tls >= 0.3x the plain loopback figure);
//   (b) dispatch: from a round's opening to each invited client whose poll was waiting
//       holding its task (its answer received by the client's socket), p50 / p99, rounds
//       after the first (target p99 < 50 ms; --clients 1000 for a fleet-sized figure); also
//       until the fleet's one thread read it (dispatch_read_*);
//   (c) heartbeat p99 while uploads are in flight, sent on a connection of its own
//       (target < 20 ms);
//   (d) the coordinator process's peak RSS, and with --idle N (default 1,000; 10,000 for the
//   target):
//       N idle keep-alive connections opened before the rounds, the RSS they add, and the
//       p99 of an admin call while they are open (target: 10,000 under 1 GiB, < 100 ms).
// The request-rate and per-address limits are lifted (every client is 127.0.0.1). Prints a
// summary and, as its last line, one JSON object.

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/fleet_rounds.h"
#include "bench/http_bench_util.h"
#include "client_sdk/http_client.h"
#include "common/blob.h"
#include "server/core/base/config.h"
#include "server/service.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certificates.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using fedcase::bench::percentile;
using fedcase::bench::seconds_since;
constexpr const char* kBench = "serve_bench";
constexpr const char* kAdmin = fedcase::bench::kAdminToken;
constexpr const char* kEnroll = fedcase::bench::kEnrollmentToken;

[[noreturn]] void die(const std::string& what) { fedcase::bench::die(kBench, what); }

// A /proc/self/status field in MiB ("VmRSS", "VmHWM").
double status_mib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024;
  }
  return 0;
}

// A caller of the coordinator (plain or TLS).
struct Client : fedcase::bench::Caller {
  Client(fedcase::client::ConnectionOptions connection, std::string token)
      : Caller(kBench, std::move(connection), std::move(token)) {}
};

// Opens `n` keep-alive connections that each make one request and then stay idle.
std::vector<int> open_idle_connections(uint16_t port, size_t n) {
  const std::string request =
      std::string("GET /v1/admin/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ") +
      kAdmin + "\r\n\r\n";
  const sockaddr_in address = fedcase::bench::loopback_address(port);
  std::vector<int> fds;
  char answer[4096];
  for (size_t i = 0; i < n; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0 ||
        send(fd, request.data(), request.size(), 0) != ssize_t(request.size()) ||
        recv(fd, answer, sizeof(answer), 0) <= 0 || std::strncmp(answer, "HTTP/1.1 200", 12)) {
      die("idle connection " + std::to_string(i) + ": " + std::strerror(errno));
    }
    fds.push_back(fd);
  }
  return fds;
}

struct Plan {
  size_t clients = 50, parameters = 1'000'000, idle = 1000;
  int rounds = 5;
  bool tls = false;
};
constexpr double kDeadline = 3600;  // the job's round deadline: a round opened at deadline - this

// The clients' process: idle connections (the coordinator measures its memory meanwhile),
// then registration and the rounds. Returns its figures.
json run_clients(fedcase::client::ConnectionOptions connection, const Plan& plan,
                 fedcase::bench::Channel& coordinator) {
  connection.port = static_cast<uint16_t>(std::stoul(coordinator.receive()));
  json figures = json::object();
  if (plan.idle > 0 && !plan.tls) {
    std::vector<int> fds = open_idle_connections(connection.port, plan.idle);
    coordinator.send("idle");
    coordinator.receive();  // measured
    Client c(connection, kAdmin);
    std::vector<double> latencies;
    for (int i = 0; i < 200; ++i) {
      const auto start = Clock::now();
      c.call("GET", "/v1/admin/jobs");
      latencies.push_back(seconds_since(start));
    }
    figures["idle_answer_p99_ms"] = percentile(latencies, 0.99) * 1e3;
    for (int fd : fds) close(fd);
  }

  std::vector<std::string> tokens;
  {
    Client enroll(connection, kEnroll);
    for (size_t i = 0; i < plan.clients; ++i) {
      auto r = enroll.call("POST", "/v1/clients/register", json{{"dataset_size", 100}}.dump(),
                           {{"Content-Type", "application/json"}});
      if (r.status != 201) die("register: " + r.body);
      tokens.push_back(json::parse(r.body)["token"]);
    }
  }
  std::fprintf(stderr, "%zu clients registered; %d rounds of %zu-float updates\n", plan.clients,
               plan.rounds, plan.parameters);
  figures.update(fedcase::bench::run_fleet_rounds(kBench, connection, tokens, plan.parameters,
                                                  plan.rounds, kDeadline)
                     .figures);
  return figures;
}

}  // namespace

int main(int argc, char** argv) {
  Plan plan;
  int io_threads = 2, upload_threads = 2;
  const char* usage =
      "usage: serve_bench [--clients C] [--parameters P] [--rounds R] [--idle N] [--tls] "
      "[--io-threads T] [--upload-threads U]";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--tls") {
      plan.tls = true;
      continue;
    }
    if (i + 1 >= argc) die(usage);
    const std::string value = argv[++i];
    if (flag == "--clients")
      plan.clients = std::stoull(value);
    else if (flag == "--parameters")
      plan.parameters = std::stoull(value);
    else if (flag == "--rounds")
      plan.rounds = std::stoi(value);
    else if (flag == "--idle")
      plan.idle = std::stoull(value);
    else if (flag == "--io-threads")
      io_threads = std::stoi(value);
    else if (flag == "--upload-threads")
      upload_threads = std::stoi(value);
    else
      die(usage);
  }
  fedcase::bench::raise_open_files_limit();

  fedcase::testing::TempDir dir;
  const std::string database = dir.file("bench.db");
  fedcase::bench::store_large_job(
      kBench, database,
      {{"name", "serve"},
       {"model", "mlp"},
       {"rounds", plan.rounds + 1},
       {"clients_per_round", plan.clients},
       {"min_clients", plan.clients},
       {"selection", {{"policy", "random"}, {"overcommit", 1.0}}},
       {"training", {{"deadline", {{"mode", "fixed"}, {"seconds", kDeadline}}}}}},
      plan.parameters);
  json config_json = fedcase::bench::unthrottled_config(0, database, plan.parameters, 600);
  config_json["io_threads"] = io_threads;
  config_json["upload_threads"] = upload_threads;
  fedcase::client::ConnectionOptions connection;
  std::unique_ptr<fedcase::testing::TestCertificates> certs;
  if (plan.tls) {
    certs = std::make_unique<fedcase::testing::TestCertificates>(dir);
    config_json["tls"] = {{"cert_file", certs->server_cert}, {"key_file", certs->server_key}};
    connection.ca_file = certs->ca;
  }

  // The clients run in a process of their own (forked while this one has no other thread), so
  // that this process's memory and descriptors are the coordinator's.
  fedcase::bench::Channel channel(kBench);
  const pid_t clients = fedcase::bench::fork_clients(kBench, channel, [&](auto& coordinator) {
    coordinator.send(run_clients(connection, plan, coordinator).dump());
  });
  auto config = fedcase::server::parse_coordinator_config(config_json);
  auto started = fedcase::server::CoordinatorService::start(config);
  if (!started.ok()) die("coordinator: " + started.status().to_string());
  auto service = std::move(started).value();
  const double rss_started = status_mib("VmRSS");
  channel.send(std::to_string(service->port()));
  double idle_rss_mib = 0;
  if (plan.idle > 0 && !plan.tls) {
    channel.receive();  // the idle connections are open
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    idle_rss_mib = status_mib("VmRSS") - rss_started;
    channel.send("measured");
  }
  const json figures = json::parse(channel.receive());
  const double peak_rss = status_mib("VmHWM");
  waitpid(clients, nullptr, 0);
  service.reset();

  const double ingest_gbps = figures["ingest_gbps"];
  const double loopback_gbps = figures["loopback_gbps"];
  const double ratio = figures["ingest_vs_loopback"];
  const double target = plan.tls ? 0.3 : 0.5;
  std::printf("serve_bench: %zu clients, %zu-float updates (%.1f MB), %d rounds, %s, %.1f s\n",
              plan.clients, plan.parameters, figures["update_bytes"].get<double>() / 1e6,
              plan.rounds, plan.tls ? "TLS" : "plain HTTP", figures["run_s"].get<double>());
  std::printf("(a) ingest %.2f GB/s vs loopback %.2f GB/s: %.2fx (target >= %.1fx)\n", ingest_gbps,
              loopback_gbps, ratio, target);
  std::printf(
      "(b) dispatch p50 %.2f ms, p99 %.2f ms over %zu waiting polls (target p99 < 50 ms); read "
      "by the fleet's thread: p50 %.2f ms, p99 %.2f ms\n",
      figures["dispatch_p50_ms"].get<double>(), figures["dispatch_p99_ms"].get<double>(),
      figures["dispatch_polls"].get<size_t>(), figures["dispatch_read_p50_ms"].get<double>(),
      figures["dispatch_read_p99_ms"].get<double>());
  std::printf("(c) heartbeat during ingest p50 %.2f ms, p99 %.2f ms (%zu; target < 20 ms)\n",
              figures["heartbeat_during_ingest_p50_ms"].get<double>(),
              figures["heartbeat_during_ingest_p99_ms"].get<double>(),
              figures["heartbeats_during_ingest"].get<size_t>());
  std::printf("(d) coordinator peak RSS %.0f MiB (%.0f MiB once started)", peak_rss, rss_started);
  if (figures.contains("idle_answer_p99_ms")) {
    std::printf("; %zu idle connections +%.1f MiB (%.1f KiB each), answering p99 %.2f ms",
                plan.idle, idle_rss_mib, idle_rss_mib * 1024 / plan.idle,
                figures["idle_answer_p99_ms"].get<double>());
  }
  std::printf("\n");
  json out = figures;
  out.update({{"bench", "serve"},
              {"clients", plan.clients},
              {"parameters", plan.parameters},
              {"rounds", plan.rounds},
              {"tls", plan.tls},
              {"io_threads", io_threads},
              {"upload_threads", upload_threads},
              {"ingest_target", target},
              {"peak_rss_mib", peak_rss},
              {"started_rss_mib", rss_started},
              {"idle_connections", figures.contains("idle_answer_p99_ms") ? plan.idle : 0},
              {"idle_rss_mib", idle_rss_mib}});
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
