// One coordinator against a cluster, side by side in one run, over real sockets on 127.0.0.1:
//   sqlite_1      one fedcase-coordinator process on a SQLite file (a single coordinator);
//   postgres_1    one replica (lease_s 5, a replica_id) on a private PostgreSQL server;
//   postgres_3    three replicas on one database of that server behind HAProxy (health checks
//                 on GET /healthz every 500 ms; timeouts of 120 s, above the 60 s long polls).
//
//   cluster_bench [--clients C] [--parameters P] [--rounds R] [--kills K]
//                 [--register-threads T] [--setups sqlite_1,postgres_1,postgres_3]
//
// --setups runs some of the setups only (the targets of those measured).
// Every coordinator is the real binary (FEDCASE_COORDINATOR_BIN) as a child process, with the
// request-rate and per-address limits lifted (every client is 127.0.0.1, and behind HAProxy
// every replica sees HAProxy's address). Each setup serves one job whose model is one tensor
// of P floats (default 250,000: 1 MB), all C clients (default 500) invited every round (K = C).
// The clients run in a process forked at the start (their CPU apart from the coordinators'):
// for each setup they register over T keep-alive connections at once (default 16), then one
// thread drives every client's keep-alive connection (bench/fleet_rounds.h) for R rounds
// (default 3): each long-polls for its task, downloads the model, waits until every client
// has it, then uploads, so that the uploads of a round arrive together. Reported per setup:
//   registrations per second (C registrations, first request to last answer) and the
//     registration latency p50 / p99;
//   ingest: bytes of accepted updates per second, from a round's first upload to its last
//     answer, against one TCP stream's loopback throughput measured in the same round (median
//     over rounds of the ratio); updates per second;
//   heartbeat p99 while uploads are in flight, and dispatch p99 (a round's opening to each
//     waiting poll holding its task, rounds after the first);
//   commit latency: from a round's last upload answer (its K-th update admitted) to the
//     owner's GET /v1/admin/jobs listing the committed version (polled every 10 ms, from the
//     clients' process), p50 / max over rounds;
//   the owner's ingress per round: its own clients' uploads (updates the store recorded for it)
//     times the update's size, plus the partials it merged (the round's metrics,
//     partials.bytes), against one model (the encoded update's size) per replica;
//   CPU seconds of each coordinator process during registration and during the rounds (from
//     /proc; PostgreSQL's and HAProxy's own CPU are not counted);
//   postgres_3 only, failover: K times (default 3) the job's owner is killed with SIGKILL while
//     the job's next round is open and waiting; the time from the kill to the next round
//     opening on a survivor (the round's opened_at in the database), p50 / p99; the killed
//     replica is started again on its port once that round is open.
// Targets (pass/fail in the JSON): postgres_1 ingest >= 0.7x sqlite_1's and postgres_3's >=
// 0.8x postgres_1's (each ingest divided by its own loopback figure first, so that the
// machine's swings cancel); the owner's ingress from the other replicas (merged partials)
// <= 1.1 x (replicas - 1) x model bytes, and its total ingress <= 1.1 x replicas x model bytes;
// failover p99 <= 10 s. Prints a summary and, as its last line, one JSON object.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/fleet_rounds.h"
#include "bench/http_bench_util.h"
#include "client_sdk/http_client.h"
#include "storage/store.h"
#include "tests/support/child_process.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using fedcase::bench::percentile;
using fedcase::bench::seconds_since;
constexpr const char* kBench = "cluster_bench";
constexpr const char* kAdmin = fedcase::bench::kAdminToken;
constexpr const char* kEnroll = fedcase::bench::kEnrollmentToken;
constexpr double kDeadline = 3600;  // the job's round deadline: a round opened at deadline - this
constexpr double kLeaseS = 5;       // docs/scaling.md's and scripts/lib/cluster.sh's lease
constexpr double kLongPollMaxS = 60;
constexpr fedcase::JobId kJob = 1;

[[noreturn]] void die(const std::string& what) { fedcase::bench::die(kBench, what); }

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Plan {
  size_t clients = 500, parameters = 250'000, register_threads = 16;
  int rounds = 3, kills = 3;
  std::string setups = "sqlite_1,postgres_1,postgres_3";
};

// ---- The clients' process -------------------------------------------------------------------

// Registers `n` clients over `threads` keep-alive connections at once; their tokens, and the
// figures: registrations_per_s, register_p50_ms, register_p99_ms.
std::vector<std::string> register_clients(uint16_t port, size_t n, size_t threads, json& figures) {
  std::vector<std::string> tokens(n);
  std::vector<std::vector<double>> latencies(threads);
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (size_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      fedcase::client::ConnectionOptions connection;
      connection.port = port;
      fedcase::bench::Caller enroll(kBench, connection, kEnroll);
      for (size_t i = t; i < n; i += threads) {
        const auto sent = Clock::now();
        auto r = enroll.call("POST", "/v1/clients/register", json{{"dataset_size", 100}}.dump(),
                             {{"Content-Type", "application/json"}});
        latencies[t].push_back(seconds_since(sent));
        if (r.status != 201) die("register: " + std::to_string(r.status) + " " + r.body);
        tokens[i] = json::parse(r.body)["token"];
      }
    });
  }
  for (std::thread& w : workers) w.join();
  const double wall = seconds_since(start);
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  figures["registrations_per_s"] = double(n) / wall;
  figures["register_p50_ms"] = percentile(all, 0.5) * 1e3;
  figures["register_p99_ms"] = percentile(all, 0.99) * 1e3;
  return tokens;
}

// Polls the owner's job list every 10 ms and notes when each model version of the job was
// first listed, until stopped. wait_for() may be called while it polls; first_seen() only
// once it has stopped.
class VersionWatch {
 public:
  explicit VersionWatch(uint16_t owner_port) : thread_([this, owner_port] { run(owner_port); }) {}
  ~VersionWatch() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  // Whether `version` or a later one was listed within `seconds`.
  bool wait_for(uint64_t version, double seconds) const {
    for (const auto start = Clock::now(); latest_ < version && seconds_since(start) < seconds;) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return latest_ >= version;
  }
  uint64_t latest() const { return latest_; }
  // When `version` was first listed; nullopt if never.
  std::optional<Clock::time_point> first_seen(uint64_t version) const {
    auto it = seen_.find(version);
    if (it == seen_.end()) return std::nullopt;
    return it->second;
  }

 private:
  void run(uint16_t owner_port) {
    fedcase::client::ConnectionOptions connection;
    connection.port = owner_port;
    fedcase::bench::Caller admin(kBench, connection, kAdmin);
    while (!stop_) {
      const auto r = admin.call("GET", "/v1/admin/jobs");
      const auto at = Clock::now();
      if (r.status != 200) die("GET /v1/admin/jobs: " + std::to_string(r.status));
      const json listed = json::parse(r.body);
      for (const json& job : listed["jobs"]) {
        if (job["job_id"] != kJob) continue;
        const uint64_t version = job["model_version"];
        seen_.emplace(version, at);
        if (version > latest_) latest_ = version;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> latest_{0};
  std::map<uint64_t, Clock::time_point> seen_;  // written by thread_ only, read after stop()
  std::thread thread_;
};

// One setup's clients: registration, then the rounds (the coordinator's side measures CPU
// between them). Returns the figures.
json run_clients(const Plan& plan, fedcase::bench::Channel& coordinator, uint16_t entry_port,
                 uint16_t owner_port) {
  json figures = json::object();
  const std::vector<std::string> tokens =
      register_clients(entry_port, plan.clients, plan.register_threads, figures);
  coordinator.send("registered");
  coordinator.receive();  // go
  fedcase::client::ConnectionOptions connection;
  connection.port = entry_port;
  VersionWatch versions(owner_port);
  const fedcase::bench::FleetRounds rounds = fedcase::bench::run_fleet_rounds(
      kBench, connection, tokens, plan.parameters, plan.rounds, kDeadline);
  // The last round's commit comes after its last answer.
  versions.wait_for(uint64_t(plan.rounds), 60);
  versions.stop();
  figures.update(rounds.figures);
  std::vector<double> commits, windows;
  for (int r = 0; r < plan.rounds; ++r) {
    const auto& w = rounds.windows[size_t(r)];
    windows.push_back(std::chrono::duration<double>(w.last_answer - w.first_upload).count());
    if (auto seen = versions.first_seen(uint64_t(r) + 1)) {
      commits.push_back(
          std::max(0.0, std::chrono::duration<double>(*seen - w.last_answer).count()));
    }
  }
  if (commits.size() != size_t(plan.rounds)) {
    die("a round's committed version was never listed (latest listed: " +
        std::to_string(versions.latest()) + ")");
  }
  figures["commit_p50_ms"] = percentile(commits, 0.5) * 1e3;
  figures["commit_max_ms"] = percentile(commits, 1.0) * 1e3;
  figures["updates_per_s"] = double(plan.clients) / percentile(windows, 0.5);
  return figures;
}

// ---- The coordinators' side -----------------------------------------------------------------

// Every child process started, killed at exit (a benchmark that dies leaves none behind).
std::vector<pid_t>& children() {
  static std::vector<pid_t> pids;
  return pids;
}
void kill_children() {
  for (pid_t pid : children()) fedcase::testing::kill_process(pid);
  children().clear();
}
pid_t start_child(const std::vector<std::string>& argv, const std::string& log) {
  const pid_t pid = fedcase::testing::start_process(argv, log);
  children().push_back(pid);
  return pid;
}
void kill_child(pid_t pid) {
  fedcase::testing::kill_process(pid);
  auto& pids = children();
  pids.erase(std::remove(pids.begin(), pids.end(), pid), pids.end());
}

// User plus system CPU seconds of process `pid` so far (/proc/pid/stat); 0 if it is gone.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t comm_end = stat.rfind(')');
  if (comm_end == std::string::npos) return 0;
  std::istringstream fields(stat.substr(comm_end + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);  // utime, stime
  }
  return ticks / double(sysconf(_SC_CLK_TCK));
}

bool wait_until(const std::function<bool()>& condition, double seconds) {
  for (const auto start = Clock::now(); seconds_since(start) < seconds;) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return condition();
}

bool healthy(uint16_t port) {
  fedcase::client::ConnectionOptions connection;
  connection.port = port;
  fedcase::client::HttpClient http(connection);
  auto r = http.request("GET", "/healthz", "", {}, 2);
  return r.ok() && r->status == 200;
}

struct Replica {
  std::string name, config, log;
  uint16_t port = 0;
  pid_t pid = -1;
};

// Starts `replica` (again) on its port and waits until it answers GET /healthz.
void start_replica(Replica& replica) {
  replica.pid = start_child({FEDCASE_COORDINATOR_BIN, "--config", replica.config}, replica.log);
  if (!wait_until([&] { return healthy(replica.port); }, 60)) {
    die("replica " + replica.name + " does not answer; see " + replica.log);
  }
}

struct Setup {
  std::string name;
  size_t replicas = 1;
  bool postgres = false;
};

json job_config(const Plan& plan) {
  return {{"name", "cluster"},
          {"model", "mlp"},
          {"rounds", plan.rounds + plan.kills + 10},
          {"clients_per_round", plan.clients},
          {"min_clients", plan.clients},
          {"selection", {{"policy", "random"}, {"overcommit", 1.0}}},
          {"training", {{"deadline", {{"mode", "fixed"}, {"seconds", kDeadline}}}}}};
}

json replica_config(const Plan& plan, const Setup& setup, const Replica& replica,
                    const std::string& database) {
  json config =
      fedcase::bench::unthrottled_config(replica.port, database, plan.parameters, kLongPollMaxS);
  if (setup.postgres) {
    config["replica_id"] = replica.name;
    config["lease_s"] = kLeaseS;
  }
  return config;
}

// The job's lease holder ("" for none).
std::string holder(fedcase::storage::Store& store) {
  auto leases = store.list_leases();
  if (!leases.ok()) die("list_leases: " + leases.status().to_string());
  for (const auto& lease : *leases) {
    if (lease.job == kJob) return lease.holder;
  }
  return "";
}

std::vector<fedcase::storage::RoundRecord> rounds_of(fedcase::storage::Store& store) {
  auto rounds = store.list_rounds(kJob);
  if (!rounds.ok()) die("list_rounds: " + rounds.status().to_string());
  return std::move(rounds).value();
}

// The owner's ingress in rounds 1..R: per round, its own clients' updates (recorded for it)
// times the update's size plus the partials it merged. Figures per round (median).
json owner_ingress(fedcase::storage::Store& store, const Plan& plan, const std::string& owner,
                   size_t replicas, double update_bytes) {
  std::vector<double> own, merged, total;
  for (const auto& r : rounds_of(store)) {
    if (r.index < 1 || r.index > uint64_t(plan.rounds)) continue;
    if (r.state != fedcase::RoundState::kCommitted)
      die("round " + std::to_string(r.index) + " not committed");
    auto updates = store.list_updates(kJob, r.index);
    if (!updates.ok()) die("list_updates: " + updates.status().to_string());
    size_t mine = 0;
    for (const auto& u : *updates) mine += u.replica == owner;
    const double partial_bytes =
        r.metrics.contains("partials") ? r.metrics["partials"].value("bytes", 0.0) : 0.0;
    own.push_back(double(mine) * update_bytes);
    merged.push_back(partial_bytes);
    total.push_back(double(mine) * update_bytes + partial_bytes);
  }
  const double others_bound = 1.1 * double(replicas - 1) * update_bytes;
  const double total_bound = 1.1 * double(replicas) * update_bytes;
  const double merged_p50 = percentile(merged, 0.5), total_p50 = percentile(total, 0.5);
  return {{"owner_own_upload_bytes_per_round", percentile(own, 0.5)},
          {"owner_merged_partial_bytes_per_round", merged_p50},
          {"owner_ingress_bytes_per_round", total_p50},
          {"owner_ingress_vs_model", total_p50 / update_bytes},
          {"owner_merged_vs_model", merged_p50 / update_bytes},
          {"owner_merged_le_1_1x_other_replicas_models", merged_p50 <= others_bound},
          {"owner_ingress_le_1_1x_replicas_models", total_p50 <= total_bound}};
}

// Kills the job's owner `kills` times while its next round is open and waiting; from each kill
// to the next round opening on a survivor, in seconds.
std::vector<double> failovers(fedcase::storage::Store& store, std::vector<Replica>& replicas,
                              int kills) {
  std::vector<double> seconds;
  for (int k = 0; k < kills; ++k) {
    uint64_t open_index = 0;
    if (!wait_until(
            [&] {
              const auto rounds = rounds_of(store);
              if (rounds.empty() || rounds.back().state != fedcase::RoundState::kOpen) return false;
              open_index = rounds.back().index;
              return !holder(store).empty();
            },
            60)) {
      die("no round open to kill the owner under");
    }
    const std::string owner = holder(store);
    auto victim = std::find_if(replicas.begin(), replicas.end(),
                               [&](const Replica& r) { return r.name == owner; });
    if (victim == replicas.end()) die("unknown owner " + owner);
    const double killed_at = unix_now();
    kill_child(victim->pid);
    double opened_at = 0;
    if (!wait_until(
            [&] {
              if (!store.round_admission(kJob, open_index + 1).ok()) return false;
              for (const auto& r : rounds_of(store)) {
                if (r.index == open_index + 1) opened_at = r.opened_at;
              }
              return opened_at > 0;
            },
            60)) {
      die("no round opened within 60 s of killing " + owner);
    }
    seconds.push_back(opened_at - killed_at);
    std::fprintf(stderr, "%s: kill %d of %s: round %llu opened %.2f s later on %s\n", kBench, k + 1,
                 owner.c_str(), static_cast<unsigned long long>(open_index + 1), seconds.back(),
                 holder(store).c_str());
    start_replica(*victim);
  }
  return seconds;
}

json run_setup(const Plan& plan, const Setup& setup, fedcase::bench::Channel& clients,
               std::unique_ptr<fedcase::testing::PostgresServer>& server) {
  std::fprintf(stderr, "%s: %s\n", kBench, setup.name.c_str());
  fedcase::testing::TempDir dir;
  std::string database = dir.file("bench.db");
  if (setup.postgres) {
    if (!server) server = std::make_unique<fedcase::testing::PostgresServer>();
    database = server->tcp_url(server->create_database());
  }
  fedcase::bench::store_large_job(kBench, database, job_config(plan), plan.parameters);
  auto opened = fedcase::storage::open_store(database);
  if (!opened.ok()) die("store: " + opened.status().to_string());
  fedcase::storage::Store& store = **opened;

  std::vector<Replica> replicas(setup.replicas);
  std::vector<uint16_t> ports;
  for (size_t i = 0; i < replicas.size(); ++i) {
    Replica& r = replicas[i];
    r.name = "r" + std::to_string(i + 1);
    r.port = fedcase::testing::free_local_port();
    r.config = dir.file(r.name + ".json");
    r.log = dir.file(r.name + ".log");
    std::ofstream(r.config) << replica_config(plan, setup, r, database).dump(2);
    ports.push_back(r.port);
  }
  for (Replica& r : replicas) start_replica(r);
  uint16_t entry = replicas.front().port;
  pid_t proxy = -1;
  if (replicas.size() > 1) {
    entry = fedcase::testing::free_local_port();
    const std::string config = dir.file("haproxy.cfg");
    std::ofstream(config) << fedcase::testing::haproxy_config(entry, ports);
    proxy =
        start_child({fedcase::testing::kHaproxyBin, "-db", "-f", config}, dir.file("haproxy.log"));
    if (!wait_until([&] { return healthy(entry); }, 20)) die("HAProxy does not forward /healthz");
  }
  std::string owner;  // a single coordinator records its updates without a replica name
  uint16_t owner_port = replicas.front().port;
  if (setup.postgres) {
    if (!wait_until([&] { return !holder(store).empty(); }, 30)) die("nobody acquired the job");
    owner = holder(store);
    for (const Replica& r : replicas) {
      if (r.name == owner) owner_port = r.port;
    }
  }

  auto cpu = [&] {
    std::vector<double> s;
    for (const Replica& r : replicas) s.push_back(cpu_seconds(r.pid));
    return s;
  };
  const std::vector<double> cpu_start = cpu();
  clients.send(std::to_string(entry) + " " + std::to_string(owner_port));
  if (clients.receive() != "registered") die("the clients' process lost its way");
  const std::vector<double> cpu_registered = cpu();
  clients.send("go");
  json figures = json::parse(clients.receive());
  const std::vector<double> cpu_rounds = cpu();

  json cpu_register = json::array(), cpu_ingest = json::array();
  double cpu_ingest_total = 0;
  for (size_t i = 0; i < replicas.size(); ++i) {
    cpu_register.push_back(cpu_registered[i] - cpu_start[i]);
    cpu_ingest.push_back(cpu_rounds[i] - cpu_registered[i]);
    cpu_ingest_total += cpu_rounds[i] - cpu_registered[i];
  }
  const double update_bytes = figures["update_bytes"];
  const double ingested_gb = double(plan.clients) * double(plan.rounds) * update_bytes / 1e9;
  figures["replicas"] = setup.replicas;
  figures["database"] = setup.postgres ? "postgresql" : "sqlite";
  figures["owner"] = owner;
  figures["cpu_s_registration_by_replica"] = cpu_register;
  figures["cpu_s_rounds_by_replica"] = cpu_ingest;
  figures["cpu_s_per_gb_ingested"] = cpu_ingest_total / ingested_gb;
  figures["registrations_per_s_per_replica"] =
      figures["registrations_per_s"].get<double>() / double(setup.replicas);
  figures["updates_per_s_per_replica"] =
      figures["updates_per_s"].get<double>() / double(setup.replicas);
  figures["ingest_gbps_per_replica"] =
      figures["ingest_gbps"].get<double>() / double(setup.replicas);
  figures.update(owner_ingress(store, plan, owner, setup.replicas, update_bytes));
  if (setup.replicas > 1 && plan.kills > 0) {
    const std::vector<double> s = failovers(store, replicas, plan.kills);
    figures["failover_s"] = s;
    figures["failover_p50_s"] = percentile(s, 0.5);
    figures["failover_p99_s"] = percentile(s, 0.99);
  }
  if (proxy > 0) kill_child(proxy);
  for (const Replica& r : replicas) kill_child(r.pid);
  if (setup.postgres) server->drop_database(database.substr(database.rfind('/') + 1));
  return figures;
}

}  // namespace

int main(int argc, char** argv) {
  Plan plan;
  const char* usage =
      "usage: cluster_bench [--clients C] [--parameters P] [--rounds R] [--kills K] "
      "[--register-threads T] [--setups sqlite_1,postgres_1,postgres_3]";
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) die(usage);
    const std::string value = argv[++i];
    if (flag == "--clients")
      plan.clients = std::stoull(value);
    else if (flag == "--parameters")
      plan.parameters = std::stoull(value);
    else if (flag == "--rounds")
      plan.rounds = std::stoi(value);
    else if (flag == "--kills")
      plan.kills = std::stoi(value);
    else if (flag == "--register-threads")
      plan.register_threads = std::stoull(value);
    else if (flag == "--setups")
      plan.setups = value;
    else
      die(usage);
  }
  if (plan.clients < 2 || plan.rounds < 2 || plan.register_threads < 1) die(usage);
  fedcase::bench::raise_open_files_limit();

  std::vector<Setup> setups;
  for (const Setup& s :
       {Setup{"sqlite_1", 1, false}, Setup{"postgres_1", 1, true}, Setup{"postgres_3", 3, true}}) {
    if (("," + plan.setups + ",").find("," + s.name + ",") != std::string::npos)
      setups.push_back(s);
  }
  if (setups.empty()) die(usage);
  // The clients' process, forked while this one has no thread, child or connection yet.
  fedcase::bench::Channel channel(kBench);
  const pid_t clients = fedcase::bench::fork_clients(kBench, channel, [&](auto& coordinator) {
    for (size_t s = 0; s < setups.size(); ++s) {
      std::istringstream ports(coordinator.receive());
      uint16_t entry = 0, owner = 0;
      ports >> entry >> owner;
      coordinator.send(run_clients(plan, coordinator, entry, owner).dump());
    }
  });
  children();  // constructed before the handler is registered, so destroyed after it ran
  std::atexit(kill_children);

  const auto start = Clock::now();
  std::unique_ptr<fedcase::testing::PostgresServer> server;
  json results = json::object();
  for (const Setup& setup : setups) results[setup.name] = run_setup(plan, setup, channel, server);
  waitpid(clients, nullptr, 0);
  server.reset();

  // Ratios and targets of the setups measured (all three by default).
  auto normalised = [&](const char* name) {
    return results[name]["ingest_vs_loopback"].get<double>();
  };
  json ratios = json::object(), targets = json::object();
  if (results.contains("sqlite_1") && results.contains("postgres_1")) {
    ratios["ingest_postgres_1_vs_sqlite_1"] = normalised("postgres_1") / normalised("sqlite_1");
    targets["postgres_1_ingest_ge_0_7x_sqlite_1"] =
        ratios["ingest_postgres_1_vs_sqlite_1"].get<double>() >= 0.7;
  }
  if (results.contains("postgres_3")) {
    const json& pg3 = results["postgres_3"];
    if (results.contains("postgres_1")) {
      ratios["ingest_postgres_3_vs_postgres_1"] =
          normalised("postgres_3") / normalised("postgres_1");
      targets["postgres_3_ingest_ge_0_8x_postgres_1"] =
          ratios["ingest_postgres_3_vs_postgres_1"].get<double>() >= 0.8;
    }
    if (results.contains("sqlite_1")) {
      ratios["ingest_postgres_3_vs_sqlite_1"] = normalised("postgres_3") / normalised("sqlite_1");
    }
    targets["owner_merged_le_1_1x_other_replicas_models"] =
        pg3["owner_merged_le_1_1x_other_replicas_models"];
    targets["owner_ingress_le_1_1x_replicas_models"] = pg3["owner_ingress_le_1_1x_replicas_models"];
    if (pg3.contains("failover_p99_s")) {
      targets["failover_p99_le_10_s"] = pg3["failover_p99_s"].get<double>() <= 10;
    }
  }

  std::printf("cluster_bench: %zu clients, %zu-float updates (%.2f MB), %d rounds, %.0f s\n",
              plan.clients, plan.parameters,
              results.begin()->at("update_bytes").get<double>() / 1e6, plan.rounds,
              seconds_since(start));
  for (const auto& [name, s] : results.items()) {
    std::printf(
        "%-10s register %6.0f/s (p99 %6.1f ms) | ingest %.3f GB/s = %.3fx loopback, %5.0f "
        "updates/s | heartbeat p99 %6.1f ms | dispatch p99 %6.1f ms | commit p50 %6.1f ms | "
        "owner ingress %.2f models/round (%.2f merged)\n",
        name.c_str(), s["registrations_per_s"].get<double>(), s["register_p99_ms"].get<double>(),
        s["ingest_gbps"].get<double>(), s["ingest_vs_loopback"].get<double>(),
        s["updates_per_s"].get<double>(), s["heartbeat_during_ingest_p99_ms"].get<double>(),
        s["dispatch_p99_ms"].get<double>(), s["commit_p50_ms"].get<double>(),
        s["owner_ingress_vs_model"].get<double>(), s["owner_merged_vs_model"].get<double>());
  }
  std::printf("ingest ratios (each ingest over its own loopback): %s\n", ratios.dump().c_str());
  if (results.contains("postgres_3") && results["postgres_3"].contains("failover_p99_s")) {
    const json& pg3 = results["postgres_3"];
    std::printf(
        "failover (kill to next round open): p50 %.2f s, p99 %.2f s over %d kills "
        "(target p99 <= 10 s)\n",
        pg3["failover_p50_s"].get<double>(), pg3["failover_p99_s"].get<double>(), plan.kills);
  }
  std::printf("targets: %s\n", targets.dump().c_str());
  json out = {{"bench", "cluster"},
              {"clients", plan.clients},
              {"parameters", plan.parameters},
              {"rounds", plan.rounds},
              {"kills", plan.kills},
              {"lease_s", kLeaseS},
              {"register_threads", plan.register_threads},
              {"run_s", seconds_since(start)},
              {"setups", results},
              {"ratios", ratios},
              {"targets", targets}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
