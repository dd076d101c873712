#pragma once
// What serve_bench and cluster_bench share on the clients' side: the pipe between the
// coordinator's side and the clients' process, one TCP stream's loopback throughput, and the
// rounds of an EventFleet (bench/event_fleet.h) with their ingest, dispatch and heartbeat
// figures. Any failure ends the benchmark (die).

#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "bench/event_fleet.h"
#include "bench/http_bench_util.h"
#include "common/blob.h"

namespace fedcase::bench {

// Lines between the coordinator's side and the clients' process; made before fork(), after
// which each side keeps its ends (become_clients / become_coordinator).
class Channel {
 public:
  explicit Channel(const char* bench) : bench_(bench) {
    if (pipe(to_clients_) != 0 || pipe(to_coordinator_) != 0) die(bench_, "pipe");
  }
  void become_clients() {
    close(to_clients_[1]);
    close(to_coordinator_[0]);
    in_ = to_clients_[0];
    out_ = to_coordinator_[1];
  }
  void become_coordinator() {
    close(to_clients_[0]);
    close(to_coordinator_[1]);
    in_ = to_coordinator_[0];
    out_ = to_clients_[1];
  }
  void send(const std::string& line) {
    const std::string text = line + "\n";
    if (write(out_, text.data(), text.size()) != ssize_t(text.size())) die(bench_, "pipe write");
  }
  // The next line; dies when the other side has gone.
  std::string receive() {
    std::string line;
    char c;
    while (true) {
      if (read(in_, &c, 1) != 1) die(bench_, "the other process ended early");
      if (c == '\n') return line;
      line += c;
    }
  }

 private:
  const char* bench_;
  int to_clients_[2], to_coordinator_[2];
  int in_ = -1, out_ = -1;
};

// Forks the clients' process, which runs `clients` with its ends of `channel` and exits; returns
// its pid, this process keeping the coordinator's ends. Call it while this process has no
// other thread. The clients stand for other machines: a scheduling group of their own (a
// session, with the kernel's autogroups), so that their threads share the cores with the
// coordinators' as one party rather than one each.
inline pid_t fork_clients(const char* bench, Channel& channel,
                          const std::function<void(Channel&)>& clients) {
  const pid_t pid = fork();
  if (pid < 0) die(bench, "fork");
  if (pid == 0) {
    channel.become_clients();
    setsid();
    clients(channel);
    std::exit(0);
  }
  channel.become_coordinator();
  return pid;
}

// Lifts this process's open-file limit (its children inherit it: a fleet holds a socket per
// client, in the fleet and in the coordinator) to `wanted` when the process may raise its hard
// limit (root, up to fs.nr_open), else to its hard limit.
inline void raise_open_files_limit(rlim_t wanted = 0) {
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  const rlimit raised{wanted, wanted};
  if (wanted > files.rlim_max && setrlimit(RLIMIT_NOFILE, &raised) == 0) return;
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
}

// One TCP stream over 127.0.0.1: `bytes` sent in 1 MiB writes, received in 1 MiB reads.
inline double loopback_bytes_per_s(const char* bench, size_t bytes) {
  using Clock = std::chrono::steady_clock;
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = loopback_address(0);
  socklen_t length = sizeof(address);
  if (bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    die(bench, "loopback socket");
  }
  std::thread sender([&] {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
      die(bench, "connect");
    }
    std::vector<char> chunk(1 << 20, 'x');
    for (size_t sent = 0; sent < bytes;) {
      const ssize_t n = ::send(fd, chunk.data(), std::min(chunk.size(), bytes - sent), 0);
      if (n <= 0) die(bench, "loopback send");
      sent += size_t(n);
    }
    close(fd);
  });
  const int fd = accept(listener, nullptr, nullptr);
  std::vector<char> chunk(1 << 20);
  const auto start = Clock::now();
  size_t received = 0;
  for (ssize_t n; (n = recv(fd, chunk.data(), chunk.size(), 0)) > 0;) received += size_t(n);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  sender.join();
  close(fd);
  close(listener);
  if (received != bytes) die(bench, "loopback: short read");
  return double(bytes) / seconds;
}

struct FleetRounds {
  nlohmann::json figures;  // see run_fleet_rounds
  std::vector<EventFleet::Round>
      windows;  // each round's uploads, from the first to the last answer
};

// Drives `rounds` rounds of the clients holding `tokens` (every one invited every round, the
// model one tensor of `parameters` floats, each round's deadline `deadline_s` after its
// opening) through an EventFleet at `connection`. One TCP stream's loopback throughput swings
// by 2x over seconds on a shared machine: it is measured in every round, while the clients hold
// the model and the coordinator waits, just before that round's uploads, and each round's
// ingest is compared with its own. Heartbeats are sent while uploads are in flight, from the
// first client on a connection of its own (a client of its own would join the pool and could
// take an invitation it never answers). Figures: ingest_gbps (median over rounds: bytes of
// accepted updates from a round's first upload to its last answer), loopback_gbps,
// ingest_vs_loopback (median of the rounds' ratios), per_round, update_bytes, run_s,
// dispatch_{p50,p99}_ms and dispatch_polls, dispatch_read_{p50,p99}_ms (EventFleet),
// heartbeat_during_ingest_{p50,p99}_ms and heartbeats_during_ingest, retried_{polls,downloads,
// uploads} (EventFleet).
inline FleetRounds run_fleet_rounds(const char* bench, const client::ConnectionOptions& connection,
                                    const std::vector<std::string>& tokens, size_t parameters,
                                    int rounds, double deadline_s) {
  using Clock = std::chrono::steady_clock;
  auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  // Per round: the delta every client uploads (the same bytes: they name the round's base).
  std::vector<std::string> deltas;
  for (int r = 0; r < rounds; ++r) {
    deltas.push_back(encode_blob(
        {uint64_t(r), {{{"w", {parameters}}}}, std::vector<float>(parameters, 0.001f)}));
  }
  std::vector<double> loopbacks;
  EventFleet clients(
      bench, connection.port, connection.ca_file, tokens, deltas,
      [deadline_s](const nlohmann::json& task) {
        return task["deadline"].get<double>() - deadline_s;
      },
      [&](size_t) { loopbacks.push_back(loopback_bytes_per_s(bench, size_t(512) << 20)); });
  std::atomic<bool> rounds_done{false};
  std::vector<double> busy_heartbeats;
  std::thread beater([&] {
    Caller c(bench, connection, tokens[0]);
    while (!rounds_done) {
      if (clients.uploads_in_flight() == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      const auto start = Clock::now();
      c.call("POST", "/v1/clients/heartbeat", "{}", {{"Content-Type", "application/json"}});
      busy_heartbeats.push_back(seconds_since(start));
    }
  });
  const auto run_start = Clock::now();
  FleetRounds out;
  out.windows = clients.run();
  rounds_done = true;
  beater.join();
  const double run_s = seconds_since(run_start);

  std::vector<double> ingests, ratios;
  nlohmann::json per_round = nlohmann::json::array();
  for (int r = 0; r < rounds; ++r) {
    const double s =
        std::chrono::duration<double>(out.windows[r].last_answer - out.windows[r].first_upload)
            .count();
    const double ingest = double(tokens.size()) * double(deltas[r].size()) / s;
    std::fprintf(stderr, "%s: round %d: ingest %.2f GB/s, loopback %.2f GB/s: %.2fx\n", bench,
                 r + 1, ingest / 1e9, loopbacks[r] / 1e9, ingest / loopbacks[r]);
    ingests.push_back(ingest);
    ratios.push_back(ingest / loopbacks[r]);
    per_round.push_back({{"ingest_gbps", ingest / 1e9}, {"loopback_gbps", loopbacks[r] / 1e9}});
  }
  const std::vector<double>& dispatch_s = clients.dispatch_seconds();
  const std::vector<double>& dispatch_read_s = clients.dispatch_read_seconds();
  nlohmann::json& f = out.figures;
  f["ingest_gbps"] = percentile(ingests, 0.5) / 1e9;
  f["loopback_gbps"] = percentile(loopbacks, 0.5) / 1e9;
  f["ingest_vs_loopback"] = percentile(ratios, 0.5);
  f["per_round"] = per_round;
  f["update_bytes"] = deltas[0].size();
  f["run_s"] = run_s;
  f["dispatch_p50_ms"] = percentile(dispatch_s, 0.5) * 1e3;
  f["dispatch_p99_ms"] = percentile(dispatch_s, 0.99) * 1e3;
  f["dispatch_polls"] = dispatch_s.size();
  f["dispatch_read_p50_ms"] = percentile(dispatch_read_s, 0.5) * 1e3;
  f["dispatch_read_p99_ms"] = percentile(dispatch_read_s, 0.99) * 1e3;
  f["heartbeat_during_ingest_p50_ms"] = percentile(busy_heartbeats, 0.5) * 1e3;
  f["heartbeat_during_ingest_p99_ms"] = percentile(busy_heartbeats, 0.99) * 1e3;
  f["heartbeats_during_ingest"] = busy_heartbeats.size();
  f["retried_polls"] = clients.retried_polls();
  f["retried_downloads"] = clients.retried_downloads();
  f["retried_uploads"] = clients.retried_uploads();
  return out;
}

}  // namespace fedcase::bench
