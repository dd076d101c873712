// A large steered fleet against a coordinator service, over real sockets on 127.0.0.1: does
// pace steering (docs/scaling.md, "Pace steering") keep the coordinators' load, memory and
// rounds flat as the fleet grows, and spread the fleet's return after an outage?
//
//   fleet_scale_bench [--devices 10000,30000,100000] [--setups sqlite_1,postgres_3]
//                     [--coordinator PATH] [--rounds R] [--reconnect-window S] [--outage S]
//                     [--quick]
//
// For each setup and fleet size F, the coordinator binary (default
// build/server/fedcase-coordinator, copied first so that one build serves the whole run) runs
// as child processes: sqlite_1 is one coordinator on a fresh SQLite file; postgres_3 is three
// replicas (lease_s 5) on a fresh database of a private PostgreSQL server, behind HAProxy
// (configs/haproxy.cfg, its connection limits raised to the fleet's as far as the open-file
// limit allows). Each coordinator has its
// request-rate and connection limits lifted (every device is on 127.0.0.0/8), task polls held
// up to 10 s, clients silent 30 s offline, pace steering's defaults but for its reconnect
// window (default 30 s) and max_period_s 240, so that the rule, not that bound, sets the
// period at every size (K = 1% of F makes it the same at every size: 10 x (F / (4 x 1.3% F)
// - 1) = 182 s; with the default bound of 60 s a fleet checks in F / 70 times a second, three
// times as often, which one coordinator here could not answer at 100,000: docs/scaling.md,
// "Sizing"). It serves one job whose model is one tensor of 1,000 floats: K = 1% of F (or the
// same K at every size: --clients-per-round), overcommit 1.3, a fixed 120 s deadline.
// The devices are a DeviceEmulator (bench/device_emulator.h) on a thread of this process:
// each registers, then polls for tasks with ?wait=10, sleeps as each 204 tells it, trains a
// task for 1-3 s and uploads. In turn:
//   enrolment: the job paused (a fleet enrolling before its job, and no 10 s poll held per
//     new device), every device registers, at most 64 at once: registrations per second,
//     overall and over the first and the last tenth (the rate as the registry grows), and the
//     largest coordinator's RSS once all are registered. A fleet not enrolled within 20 minutes is
//     reported as such ("incomplete"), its other phases not run: at that pace the coordinator
//     is still enrolling, and would be measured doing so;
//   rounds: the job resumed, R rounds (default 3) commit: each round's open-to-close seconds
//     from the admin API's round timing, and their median;
//   steady state: once the fleet has settled (360 s after the resume: the longest window a
//     device without a reported utility gets, max_period_s 240 x (1 + jitter 0.5)), for 30 s:
//     check-ins per second and their latency (raw p99; polls answered 204 before their wait was up;
//     those answered once it was, less the wait: the coordinator's own delay; polls given a task),
//     and the coordinator's VmRSS: RSS per registered device is its growth over the RSS measured
//     before enrolment, divided by F;
//   idle: the job paused, for 20 s, the fleet still checking in: fedcase_client_rows_read_total
//     per second (a single coordinator reads its clients once, at start: expected 0);
//   outage: the job resumed, the coordinator is killed (SIGKILL), started again on the same
//     port and database after --outage seconds (default 40), and the fleet's check-ins (task
//     polls sent) per 1 s bin over the reconnect window from its first healthy answer: the
//     peak bin over the mean bin (also by the time they were answered).
// Targets (met true/false in the JSON): reconnect peak/mean <= 2 at every size; the median
// round's open-to-close at the largest fleet within 2x the smallest's; coordinator RSS <= 4 KiB
// per registered device at every size; idle client rows read per second not growing with the
// fleet (the largest fleet's rate at most the smallest's). --quick: 2,000 and 5,000 devices, a
// 10 s outage, a 20 s settle and a 10 s steady state (a smoke run; its steady state is not
// settled). A figure a fleet did not reach counts as a missed target. Each fleet also records
// the machine's load average after each phase (the coordinator shares two cores with the
// fleet, and with whatever else runs). Progress on stderr, a table on stdout, and as the last
// line one JSON object.

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/device_emulator.h"
#include "bench/fleet_rounds.h"
#include "bench/http_bench_util.h"
#include "client_sdk/http_client.h"
#include "tests/support/child_process.h"
#include "tests/support/postgres_server.h"
#include "tests/support/temp_dir.h"

namespace {

using fedcase::bench::percentile;
using nlohmann::json;
constexpr const char* kBench = "fleet_scale_bench";
constexpr const char* kAdmin = fedcase::bench::kAdminToken;
constexpr const char* kJob = "/v1/admin/jobs/1";
constexpr double kPollWaitS = 10;  // the coordinator's long_poll_max_s and the devices' ?wait=
constexpr double kClientTimeoutS = 30;
constexpr double kLeaseS = 5;           // docs/scaling.md's and scripts/lib/cluster.sh's lease
constexpr rlim_t kOpenFiles = 1 << 18;  // for every device's socket, here and in a coordinator
constexpr double kDeadlineS = 120;
constexpr double kOvercommit = 1.3;
constexpr double kBinS = 1;
constexpr double kReconnectTarget = 2;  // peak bin over the mean bin
constexpr double kRoundTarget = 2;      // largest fleet's round over the smallest's
constexpr double kRssTargetKib = 4;     // per registered device
// Enrolment slower than this (under 83 registrations/s for 100,000 devices) misses by far.
constexpr double kEnrolTimeoutS = 1200;

[[noreturn]] void die(const std::string& what) { fedcase::bench::die(kBench, what); }

void progress(const char* format, ...) __attribute__((format(printf, 1, 2)));
void progress(const char* format, ...) {
  std::fprintf(stderr, "%s: ", kBench);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
}

void sleep_s(double seconds) {
  if (seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

struct Plan {
  std::vector<size_t> fleets = {10'000, 30'000, 100'000};
  std::vector<std::string> setups = {"sqlite_1", "postgres_3"};
  std::string coordinator = "build/server/fedcase-coordinator";
  int rounds = 3;
  double reconnect_window_s = 30;
  double outage_s = 40;
  double max_period_s = 240;
  double settle_s = 360;
  double steady_s = 30;
  double idle_s = 20;
  size_t parameters = 1000;
  size_t clients_per_round = 0;  // K; 0: 1% of each fleet
  bool quick = false;
};

// ---- The service: child processes, and what they show ---------------------------------------

// The child processes of this benchmark (0: a free place), killed at exit and on a signal that
// ends this process (a benchmark that dies leaves none behind).
constexpr size_t kMaxChildren = 8;
volatile sig_atomic_t children[kMaxChildren] = {};
void track_child(pid_t pid) {
  for (volatile sig_atomic_t& child : children) {
    if (child == 0) {
      child = pid;
      return;
    }
  }
  die("more child processes than kMaxChildren");
}
void end_child(pid_t pid) {
  fedcase::testing::kill_process(pid);
  for (volatile sig_atomic_t& child : children) {
    if (child == pid) child = 0;
  }
}
void end_children() {
  for (volatile sig_atomic_t& child : children) {
    if (child > 0) end_child(child);
  }
}
void end_children_and_end(int signal_number) {
  for (volatile sig_atomic_t& child : children) {
    if (child > 0) kill(child, SIGKILL);
  }
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

bool healthy(uint16_t port) {
  fedcase::client::HttpClient http(fedcase::client::plain_connection("127.0.0.1", port));
  auto r = http.request("GET", "/healthz", "", {}, 2);
  return r.ok() && r->status == 200;
}

// VmRSS of process `pid` in bytes (its /proc status gives kB); 0 if it is gone.
double rss_bytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) * 1024;
  }
  return 0;
}

// One child process that answers GET /healthz on `port` once it has started.
struct Process {
  std::string name;
  std::vector<std::string> argv;
  std::string log;
  uint16_t port = 0;
  pid_t pid = 0;
};

// What the fleet checks in with: one coordinator, or replicas behind HAProxy (`proxy`), all
// on one database. Ports stay the same across kill() and start().
struct Service {
  std::vector<Process> coordinators;
  std::optional<Process> proxy;

  uint16_t entry() const { return proxy ? proxy->port : coordinators.front().port; }

  // Starts every process, each once the one before answers (up to 5 minutes: a large fleet's
  // store to load).
  void start() {
    auto start_one = [](Process& p) {
      p.pid = fedcase::testing::start_process(p.argv, p.log);
      track_child(p.pid);
      for (const auto start = std::chrono::steady_clock::now(); !healthy(p.port);) {
        if (fedcase::bench::seconds_since(start) > 300) {
          die(p.name + " does not answer; see " + p.log);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    };
    for (Process& c : coordinators) start_one(c);
    if (proxy) start_one(*proxy);
  }
  // SIGKILL to every process.
  void kill() {
    if (proxy) end_child(proxy->pid);
    for (Process& c : coordinators) end_child(c.pid);
  }
  // Each coordinator's VmRSS, in bytes.
  std::vector<double> rss() const {
    std::vector<double> out;
    for (const Process& c : coordinators) out.push_back(rss_bytes(c.pid));
    return out;
  }
};

// The service of `setup` on a fresh database holding the job, its files in `dir`; not started.
Service make_service(const Plan& plan, const std::string& setup, const json& job, size_t devices,
                     fedcase::testing::TempDir& dir,
                     std::unique_ptr<fedcase::testing::PostgresServer>& postgres) {
  const bool replicas = setup == "postgres_3";
  std::string database = dir.file("fleet.db");
  if (replicas) {
    if (!postgres) postgres = std::make_unique<fedcase::testing::PostgresServer>();
    database = postgres->tcp_url(postgres->create_database());
  }
  fedcase::bench::store_large_job(kBench, database, job, plan.parameters);
  Service service;
  std::vector<uint16_t> ports;
  for (size_t i = 0; i < (replicas ? 3 : 1); ++i) {
    Process c;
    c.name = replicas ? "replica-" + std::to_string(i + 1) : "coordinator";
    c.port = fedcase::testing::free_local_port();
    json config = fedcase::bench::unthrottled_config(c.port, database, plan.parameters, kPollWaitS);
    config["client_timeout_s"] = kClientTimeoutS;
    config["pace"] = {{"reconnect_window_s", plan.reconnect_window_s},
                      {"max_period_s", plan.max_period_s}};
    if (replicas) {
      config["replica_id"] = c.name;
      config["lease_s"] = kLeaseS;
    }
    const std::string path = dir.file(c.name + ".json");
    std::ofstream(path) << config.dump(2);
    c.argv = {plan.coordinator, "--config", path};
    c.log = dir.file(c.name + ".log");
    ports.push_back(c.port);
    service.coordinators.push_back(std::move(c));
  }
  if (replicas) {
    Process proxy;
    proxy.name = "HAProxy";
    proxy.port = fedcase::testing::free_local_port();
    // Every device may hold a connection (a poll) at once, all through HAProxy, as far as
    // HAProxy's descriptors allow (two per connection; it cannot raise its limit here).
    rlimit files{};
    getrlimit(RLIMIT_NOFILE, &files);
    fedcase::testing::HaproxySettings settings;
    settings.max_connections = int(std::min<rlim_t>(devices + 1000, (files.rlim_cur - 1000) / 2));
    settings.replica_max_connections = int(devices);
    settings.max_connections_per_client = int(devices);
    const std::string path = dir.file("haproxy.cfg");
    std::ofstream(path) << fedcase::testing::haproxy_config(proxy.port, ports, settings);
    proxy.argv = {fedcase::testing::kHaproxyBin, "-db", "-f", path};
    proxy.log = dir.file("haproxy.log");
    service.proxy = std::move(proxy);
  }
  return service;
}

fedcase::bench::Caller admin(uint16_t port) {
  return {kBench, fedcase::client::plain_connection("127.0.0.1", port), kAdmin};
}

void control_job(uint16_t port, const std::string& action) {
  const auto r = admin(port).call("POST", std::string(kJob) + "/" + action);
  if (r.status != 200) die(action + ": " + std::to_string(r.status) + " " + r.body);
}

// The value of the series `series` (a family's name and its labels, if any) in a /metrics
// page; 0 when it has not been set yet.
double metric(const std::string& page, const std::string& series) {
  const size_t at = page.find("\n" + series + " ");
  return at == std::string::npos ? 0 : std::stod(page.substr(at + series.size() + 2));
}

// What each coordinator of a service shows in /metrics.
struct Scrape {
  struct Coordinator {
    double check_ins = 0, rows_read = 0, connected = 0, open_connections = 0, period_s = 0;
  };
  std::vector<Coordinator> coordinators;

  double check_ins() const {
    double sum = 0;
    for (const Coordinator& c : coordinators) sum += c.check_ins;
    return sum;
  }
  // The largest of `field` over the coordinators.
  double largest(double Coordinator::*field) const {
    double most = 0;
    for (const Coordinator& c : coordinators) most = std::max(most, c.*field);
    return most;
  }
};
Scrape scrape(const Service& service) {
  Scrape out;
  for (const Process& c : service.coordinators) {
    const auto r = admin(c.port).call("GET", "/metrics");
    if (r.status != 200) die(c.name + " /metrics: " + std::to_string(r.status));
    const std::string page = "\n" + r.body;
    out.coordinators.push_back({metric(page, "fedcase_check_ins_total{answer=\"task\"}") +
                                    metric(page, "fedcase_check_ins_total{answer=\"later\"}"),
                                metric(page, "fedcase_client_rows_read_total"),
                                metric(page, "fedcase_clients_connected"),
                                metric(page, "fedcase_http_open_connections"),
                                metric(page, "fedcase_check_in_period_seconds")});
  }
  return out;
}

// The job's committed rounds, in order, as the admin API gives them.
std::vector<json> committed_rounds(uint16_t port) {
  const auto r = admin(port).call("GET", kJob);
  if (r.status != 200) die(std::string(kJob) + ": " + std::to_string(r.status));
  const json job = json::parse(r.body);
  std::vector<json> out;
  for (const json& round : job["rounds"]) {
    if (round["state"] == "committed") out.push_back(round);
  }
  return out;
}

double open_to_close_s(const json& round) {
  return round["closed_at"].get<double>() - round["opened_at"].get<double>();
}

// What a committed round's record says of where its time went: its invitees, its updates,
// its timing (the mean seconds from its open to an accepted update's first fetch, ...), and
// why the invitees without an update were dropped (counts by reason).
json round_breakdown(const json& round) {
  const json& metrics = round["metrics"];
  json dropped = json::object();
  const json why_dropped = metrics.value("dropped", json::object());
  for (const auto& [client, why] : why_dropped.items()) {
    const std::string reason = why.get<std::string>();
    dropped[reason] = dropped.value(reason, 0) + 1;
  }
  return {{"open_to_close_s", open_to_close_s(round)},
          {"invited", metrics.value("invited", 0)},
          {"updates", metrics.value("updates", 0)},
          {"timing", metrics.value("timing", json::object())},
          {"dropped", dropped}};
}

// ---- One fleet size ------------------------------------------------------------------------

json job_config(size_t clients_per_round) {
  return {{"name", "fleet"},
          {"model", "blob"},
          {"rounds", 100'000},
          {"clients_per_round", clients_per_round},
          {"selection", {{"overcommit", kOvercommit}}},
          {"training", {{"deadline", {{"mode", "fixed"}, {"seconds", kDeadlineS}}}}}};
}

json milliseconds_p99(const std::vector<double>& seconds) {
  return seconds.empty() ? json() : json(percentile(seconds, 0.99) * 1e3);
}

// The machine's 1-minute load average: what else ran beside the coordinator and the fleet.
double load_average() {
  double one_minute = 0;
  std::ifstream("/proc/loadavg") >> one_minute;
  return one_minute;
}

// Polls `done` every `every_s` until it holds (true) or `timeout_s` passes (false).
template <class Done>
bool wait_for(double timeout_s, double every_s, Done done) {
  for (const auto start = std::chrono::steady_clock::now(); !done();) {
    if (fedcase::bench::seconds_since(start) > timeout_s) return false;
    sleep_s(every_s);
  }
  return true;
}

// What the phases of one fleet size share; each phase adds its figures to `out`.
struct FleetRun {
  const Plan& plan;
  size_t devices;
  Service& service;
  fedcase::bench::DeviceEmulator& fleet;
  json& out;
  double resumed_s = 0;  // when the job was resumed after enrolment (the fleet's clock)

  void phase_done(const char* phase) { out["load_average_1m"][phase] = load_average(); }
};

// Every device registers while the job is paused. False if enrolment did not end in time.
bool enrol(FleetRun& run) {
  const bool enrolled = wait_for(kEnrolTimeoutS, 5, [&] {
    const uint64_t registered = run.fleet.counters().registered;
    progress("  registered %llu of %zu", static_cast<unsigned long long>(registered), run.devices);
    return registered == run.devices;
  });
  std::vector<double> answered = run.fleet.registrations_answered_s();
  std::sort(answered.begin(), answered.end());
  const double first_sent = run.fleet.first_registration_sent_s();
  run.out["registered"] = answered.size();
  if (answered.empty()) return false;
  const double registration_s = answered.back() - first_sent;
  run.out["registration_s"] = registration_s;
  run.out["registrations_per_s"] = double(answered.size()) / registration_s;
  // The rate as the registry grows: over the first and the last tenth of the registrations.
  const size_t tenth = std::max<size_t>(1, answered.size() / 10);
  run.out["registrations_per_s_first_tenth"] = double(tenth) / (answered[tenth - 1] - first_sent);
  const double last_tenth_from =
      answered.size() > tenth ? answered[answered.size() - 1 - tenth] : first_sent;
  run.out["registrations_per_s_last_tenth"] = double(tenth) / (answered.back() - last_tenth_from);
  const std::vector<double> rss = run.service.rss();
  run.out["rss_enrolled_mib"] = *std::max_element(rss.begin(), rss.end()) / (1 << 20);
  run.phase_done("enrolment");
  return enrolled;
}

// The job resumes; R rounds commit. False if they did not in time.
bool commit_rounds(FleetRun& run) {
  control_job(run.service.entry(), "resume");
  run.resumed_s = run.fleet.clock_s();
  std::vector<json> records;
  const size_t wanted = size_t(run.plan.rounds);
  const bool committed = wait_for(double(wanted) * (kDeadlineS + 60), 1, [&] {
    records = committed_rounds(run.service.entry());
    progress("  rounds committed: %zu of %zu", std::min(records.size(), wanted), wanted);
    return records.size() >= wanted;
  });
  records.resize(std::min(records.size(), wanted));
  std::vector<double> rounds;
  json breakdown = json::array();
  for (const json& record : records) {
    rounds.push_back(open_to_close_s(record));
    breakdown.push_back(round_breakdown(record));
  }
  run.out["round_open_to_close_s"] = rounds;
  run.out["rounds"] = breakdown;
  if (!committed) return false;
  run.out["round_open_to_close_median_s"] = percentile(rounds, 0.5);
  progress("  %zu rounds committed, median %.2f s open to close", wanted, percentile(rounds, 0.5));
  run.phase_done("rounds");
  return true;
}

// The settled fleet: check-ins, their latency, the coordinators' memory (`rss_before`: each
// one's before enrolment).
void steady_state(FleetRun& run, const std::vector<double>& rss_before) {
  sleep_s(run.resumed_s + run.plan.settle_s - run.fleet.clock_s());
  const double from = run.fleet.clock_s();
  const Scrape before = scrape(run.service);
  sleep_s(run.plan.steady_s);
  const Scrape after = scrape(run.service);
  const double to = run.fleet.clock_s();
  const std::vector<double> rss_steady = run.service.rss();
  sleep_s(kPollWaitS + 2);  // a poll enters the log once it ends
  const std::vector<fedcase::bench::CheckInRecord> polls = run.fleet.check_ins(from, to);
  const auto latencies = fedcase::bench::check_in_latencies(polls, kPollWaitS);
  json& out = run.out;
  out["check_ins_per_s"] = double(latencies.all.size()) / (to - from);
  out["coordinator_check_ins_per_s"] = (after.check_ins() - before.check_ins()) / (to - from);
  out["check_in_p99_ms"] = milliseconds_p99(latencies.all);
  out["check_in_at_once_p99_ms"] = milliseconds_p99(latencies.at_once);
  out["check_in_past_wait_p99_ms"] = milliseconds_p99(latencies.past_wait);
  out["check_in_task_p99_ms"] = milliseconds_p99(latencies.task);
  out["polls_answered_at_once"] = latencies.at_once.size();
  out["polls_answered_past_wait"] = latencies.past_wait.size();
  out["polls_failed"] = polls.size() - latencies.all.size();
  const double period_s = after.largest(&Scrape::Coordinator::period_s);
  out["check_in_period_s"] = period_s;
  // A device is checked in for a poll's wait, then sleeps about a period.
  out["steady_check_ins_per_s_expected"] = double(run.devices) / (kPollWaitS + period_s);
  out["clients_connected"] = json::array();
  out["http_open_connections"] = json::array();
  for (const Scrape::Coordinator& c : after.coordinators) {
    out["clients_connected"].push_back(c.connected);
    out["http_open_connections"].push_back(c.open_connections);
  }
  double rss_largest = 0, growth_largest = 0;
  for (size_t i = 0; i < rss_steady.size(); ++i) {
    rss_largest = std::max(rss_largest, rss_steady[i]);
    growth_largest = std::max(growth_largest, rss_steady[i] - rss_before[i]);
  }
  out["rss_steady_mib"] = rss_largest / (1 << 20);
  const double per_device_kib = growth_largest / 1024 / double(run.devices);
  out["rss_per_device_kib"] = per_device_kib;
  progress("  steady: %.0f check-ins/s, p99 %.1f ms past the wait; RSS %.1f KiB per device",
           out["check_ins_per_s"].get<double>(), percentile(latencies.past_wait, 0.99) * 1e3,
           per_device_kib);
  run.phase_done("steady");
}

// The job paused, the fleet still checking in: client rows the registry reads.
void idle(FleetRun& run) {
  control_job(run.service.entry(), "pause");
  const Scrape start = scrape(run.service);
  sleep_s(run.plan.idle_s);
  const Scrape end = scrape(run.service);
  double rows_per_s = 0;  // the replica that read most
  for (size_t i = 0; i < end.coordinators.size(); ++i) {
    rows_per_s =
        std::max(rows_per_s, end.coordinators[i].rows_read - start.coordinators[i].rows_read);
  }
  rows_per_s /= run.plan.idle_s;
  run.out["idle_client_rows_read_per_s"] = rows_per_s;
  run.out["idle_check_ins_per_s"] = (end.check_ins() - start.check_ins()) / run.plan.idle_s;
  progress("  idle: %.1f client rows read/s, %.0f check-ins/s", rows_per_s,
           run.out["idle_check_ins_per_s"].get<double>());
  run.phase_done("idle");
}

// The service killed under a running job and started again: the fleet's return.
void outage(FleetRun& run) {
  control_job(run.service.entry(), "resume");
  sleep_s(kPollWaitS);  // rounds and held polls under way when it dies
  fedcase::bench::DeviceEmulator& fleet = run.fleet;
  const auto before = fleet.counters();
  const double killed_s = fleet.clock_s();
  run.service.kill();
  sleep_s(run.plan.outage_s);
  const double restarted_s = fleet.clock_s();
  run.service.start();
  const double back_s = fleet.clock_s();
  progress("  outage: killed, started again after %.0f s, answering %.1f s later",
           run.plan.outage_s, back_s - restarted_s);
  const double window_s = run.plan.reconnect_window_s;
  sleep_s(back_s + window_s + kPollWaitS + 2 - fleet.clock_s());  // the window's polls ended
  std::vector<double> sent, answered;
  for (const auto& poll : fleet.check_ins(killed_s, fleet.clock_s())) {
    sent.push_back(poll.sent_s);
    if (poll.status != 0) answered.push_back(poll.answered_s);
  }
  const auto sent_bins = fedcase::bench::per_bin(sent, back_s, back_s + window_s, kBinS);
  const auto answered_bins = fedcase::bench::per_bin(answered, back_s, back_s + window_s, kBinS);
  const auto after = fleet.counters();
  run.out["outage"] = {
      {"outage_s", run.plan.outage_s},
      {"start_to_healthy_s", back_s - restarted_s},
      {"reconnect_window_s", window_s},
      {"check_ins_per_bin_sent", sent_bins},
      {"peak_to_mean_sent", fedcase::bench::peak_to_mean(sent_bins)},
      {"check_ins_per_bin_answered", answered_bins},
      {"peak_to_mean_answered", fedcase::bench::peak_to_mean(answered_bins)},
      {"connection_failures", after.connection_failures - before.connection_failures},
      {"local_failures", after.local_failures - before.local_failures},
      {"peak_open_connections_so_far", after.peak_open_connections}};
  progress("  reconnect: peak/mean %.2f by send time, %.2f by answer time",
           run.out["outage"]["peak_to_mean_sent"].get<double>(),
           run.out["outage"]["peak_to_mean_answered"].get<double>());
  run.phase_done("outage");
}

json run_fleet(const Plan& plan, const std::string& setup, size_t devices,
               std::unique_ptr<fedcase::testing::PostgresServer>& postgres) {
  const size_t per_round =
      plan.clients_per_round > 0 ? plan.clients_per_round : std::max<size_t>(1, devices / 100);
  progress("%s, %zu devices, K = %zu", setup.c_str(), devices, per_round);
  fedcase::testing::TempDir dir;
  Service service = make_service(plan, setup, job_config(per_round), devices, dir, postgres);
  service.start();
  control_job(service.entry(), "pause");
  const std::vector<double> rss_before = service.rss();
  json out = {{"devices", devices}, {"clients_per_round", per_round}};
  out["rss_before_mib"] = *std::max_element(rss_before.begin(), rss_before.end()) / (1 << 20);

  fedcase::bench::DeviceEmulatorOptions options;
  options.port = service.entry();
  options.enrollment_token = fedcase::bench::kEnrollmentToken;
  options.devices = devices;
  options.poll_wait_s = kPollWaitS;
  options.parameters = plan.parameters;
  options.reconnect_window_s = plan.reconnect_window_s;
  options.seed = devices;
  fedcase::bench::DeviceEmulator fleet(kBench, options);
  fleet.start();
  FleetRun run{plan, devices, service, fleet, out};
  if (!enrol(run)) {
    out["incomplete"] =
        "enrolment did not end within " + std::to_string(int(kEnrolTimeoutS)) + " s";
  } else if (!commit_rounds(run)) {
    out["incomplete"] = "rounds did not commit in time";
  } else {
    steady_state(run, rss_before);
    idle(run);
    outage(run);
  }
  if (out.contains("incomplete")) progress("  %s", out["incomplete"].get<std::string>().c_str());
  fleet.stop();
  service.kill();

  const auto c = fleet.counters();
  out["emulator"] = {{"check_ins", c.check_ins},
                     {"tasks", c.tasks},
                     {"uploads_accepted", c.uploads_accepted},
                     {"uploads_refused", c.uploads_refused},
                     {"retried_503", c.retried_503},
                     {"connection_failures", c.connection_failures},
                     {"local_failures", c.local_failures},
                     {"peak_open_connections", c.peak_open_connections}};
  // Every figure of this size now, should a later size not end.
  progress("  figures: %s", out.dump().c_str());
  return out;
}

std::vector<std::string> parse_list(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) items.push_back(item);
  return items;
}

std::optional<double> number(const json& f, const char* key) {
  return f.contains(key) && f[key].is_number() ? std::optional<double>(f[key].get<double>())
                                               : std::nullopt;
}

// The targets of one setup's fleets (each fleet gets its own too); a figure a fleet did not
// reach counts as missed.
json targets_of(json& fleets) {
  bool reconnect_met = true, rss_met = true;
  for (json& f : fleets) {
    // A figure not reached: a peak of 0 and an unbounded RSS, both missed.
    const double peak =
        f.contains("outage") ? number(f["outage"], "peak_to_mean_sent").value_or(0) : 0;
    const double rss = number(f, "rss_per_device_kib").value_or(HUGE_VAL);
    f["targets"] = {{"reconnect_peak_to_mean_le_2", peak > 0 && peak <= kReconnectTarget},
                    {"rss_le_4_kib_per_device", rss <= kRssTargetKib}};
    reconnect_met &= f["targets"]["reconnect_peak_to_mean_le_2"].get<bool>();
    rss_met &= f["targets"]["rss_le_4_kib_per_device"].get<bool>();
  }
  const json& smallest = fleets.front();
  const json& largest = fleets.back();
  const auto round_smallest = number(smallest, "round_open_to_close_median_s");
  const auto round_largest = number(largest, "round_open_to_close_median_s");
  json round_ratio;
  if (round_smallest && round_largest) round_ratio = *round_largest / *round_smallest;
  // The RSS a device adds from the smallest fleet to the largest that reached a steady state
  // (the fixed costs of a running job cancel out): shown beside the target, which divides all
  // growth by the fleet.
  std::vector<const json*> steady;
  for (const json& f : fleets) {
    if (number(f, "rss_steady_mib")) steady.push_back(&f);
  }
  json marginal_kib;
  if (steady.size() >= 2) {
    const json& low = *steady.front();
    const json& high = *steady.back();
    marginal_kib = (high["rss_steady_mib"].get<double>() - low["rss_steady_mib"].get<double>()) *
                   1024 / double(high["devices"].get<size_t>() - low["devices"].get<size_t>());
  }
  const auto rows_smallest = number(smallest, "idle_client_rows_read_per_s");
  const auto rows_largest = number(largest, "idle_client_rows_read_per_s");
  return {{"reconnect_peak_to_mean_le_2", {{"met", reconnect_met}}},
          {"round_open_to_close_largest_within_2x_smallest",
           {{"ratio", round_ratio},
            {"met", round_ratio.is_number() && round_ratio.get<double>() <= kRoundTarget}}},
          {"rss_le_4_kib_per_device",
           {{"met", rss_met}, {"marginal_kib_per_device_across_steady_fleets", marginal_kib}}},
          {"idle_rows_read_per_replica_independent_of_fleet_size",
           {{"smallest_per_s", rows_smallest ? json(*rows_smallest) : json()},
            {"largest_per_s", rows_largest ? json(*rows_largest) : json()},
            {"met", rows_smallest && rows_largest && *rows_largest <= *rows_smallest}}}};
}

void print_table(const std::string& setup, const json& fleets, const json& targets) {
  std::printf("%s\n", setup.c_str());
  std::printf("%8s %9s %10s %10s %10s %9s %9s %9s %10s %9s\n", "devices", "reg/s", "checkin/s",
              "p99 ms", "p99 wait", "round s", "RSS MiB", "KiB/dev", "rows/s idl", "reconnect");
  for (const json& f : fleets) {
    auto cell = [](std::optional<double> value, const char* format) {
      char text[32] = "-";
      if (value) std::snprintf(text, sizeof text, format, *value);
      return std::string(text);
    };
    std::printf(
        "%8zu %9s %10s %10s %10s %9s %9s %9s %10s %9s\n", f["devices"].get<size_t>(),
        cell(number(f, "registrations_per_s"), "%.0f").c_str(),
        cell(number(f, "check_ins_per_s"), "%.0f").c_str(),
        cell(number(f, "check_in_p99_ms"), "%.1f").c_str(),
        cell(number(f, "check_in_past_wait_p99_ms"), "%.1f").c_str(),
        cell(number(f, "round_open_to_close_median_s"), "%.2f").c_str(),
        cell(number(f, "rss_steady_mib"), "%.0f").c_str(),
        cell(number(f, "rss_per_device_kib"), "%.2f").c_str(),
        cell(number(f, "idle_client_rows_read_per_s"), "%.1f").c_str(),
        cell(f.contains("outage") ? number(f["outage"], "peak_to_mean_sent") : std::nullopt, "%.2f")
            .c_str());
    if (f.contains("incomplete")) {
      std::printf("%8s %s\n", "", f["incomplete"].get<std::string>().c_str());
    }
  }
  std::printf("targets: %s\n", targets.dump().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Plan plan;
  const char* usage =
      "usage: fleet_scale_bench [--devices 10000,30000,100000] [--setups sqlite_1,postgres_3] "
      "[--coordinator PATH] [--rounds R] [--clients-per-round K] [--reconnect-window S] "
      "[--outage S] [--quick]";
  bool sizes_given = false, outage_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--quick") {
      plan.quick = true;
      continue;
    }
    if (i + 1 >= argc) die(usage);
    const std::string value = argv[++i];
    if (flag == "--devices") {
      plan.fleets.clear();
      for (const std::string& size : parse_list(value)) plan.fleets.push_back(std::stoull(size));
      sizes_given = true;
    } else if (flag == "--setups") {
      plan.setups = parse_list(value);
    } else if (flag == "--coordinator") {
      plan.coordinator = value;
    } else if (flag == "--rounds") {
      plan.rounds = std::stoi(value);
    } else if (flag == "--clients-per-round") {
      plan.clients_per_round = std::stoull(value);
    } else if (flag == "--reconnect-window") {
      plan.reconnect_window_s = std::stod(value);
    } else if (flag == "--outage") {
      plan.outage_s = std::stod(value);
      outage_given = true;
    } else {
      die(usage);
    }
  }
  if (plan.quick) {
    if (!sizes_given) plan.fleets = {2000, 5000};
    if (!outage_given) plan.outage_s = 10;
    plan.settle_s = 20;
    plan.steady_s = 10;
  }
  if (plan.fleets.empty() || plan.setups.empty() || plan.rounds < 1 ||
      plan.reconnect_window_s < 1) {
    die(usage);
  }
  for (const std::string& setup : plan.setups) {
    if (setup != "sqlite_1" && setup != "postgres_3") die("unknown setup " + setup + "; " + usage);
  }
  if (access(plan.coordinator.c_str(), X_OK) != 0)
    die("no coordinator binary at " + plan.coordinator);
  std::sort(plan.fleets.begin(), plan.fleets.end());
  // One build for the whole run, restarts included, even if the tree is rebuilt meanwhile.
  fedcase::testing::TempDir binaries;
  const std::string coordinator = binaries.file("fedcase-coordinator");
  std::filesystem::copy_file(plan.coordinator, coordinator);
  plan.coordinator = coordinator;
  // A fleet's checked-in devices each hold a socket here and in the coordinator (a child, which
  // inherits the limit).
  fedcase::bench::raise_open_files_limit(kOpenFiles);
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  std::atexit(end_children);
  for (int signal_number : {SIGTERM, SIGINT, SIGHUP, SIGABRT})
    std::signal(signal_number, end_children_and_end);

  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<fedcase::testing::PostgresServer> postgres;  // for postgres_3, made once
  json setups = json::object();
  for (const std::string& setup : plan.setups) {
    json fleets = json::array();
    for (size_t devices : plan.fleets) fleets.push_back(run_fleet(plan, setup, devices, postgres));
    const json targets = targets_of(fleets);
    setups[setup] = {{"coordinators", setup == "postgres_3" ? 3 : 1},
                     {"database", setup == "postgres_3" ? "postgresql" : "sqlite"},
                     {"fleets", fleets},
                     {"targets", targets}};
  }

  std::printf("fleet_scale_bench: reconnect window %.0f s, outage %.0f s, %.0f s%s\n",
              plan.reconnect_window_s, plan.outage_s, fedcase::bench::seconds_since(start),
              plan.quick ? " (--quick: not settled)" : "");
  for (const auto& [setup, figures] : setups.items()) {
    print_table(setup, figures["fleets"], figures["targets"]);
  }
  const json result = {{"bench", "fleet_scale"},
                       {"quick", plan.quick},
                       {"cores", std::thread::hardware_concurrency()},
                       {"open_files_limit", files.rlim_cur},
                       {"poll_wait_s", kPollWaitS},
                       {"reconnect_window_s", plan.reconnect_window_s},
                       {"max_period_s", plan.max_period_s},
                       {"outage_s", plan.outage_s},
                       {"rounds", plan.rounds},
                       {"parameters", plan.parameters},
                       {"run_s", fedcase::bench::seconds_since(start)},
                       {"setups", setups}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}
