// Secure aggregation (secagg/) in one process: a SecAggServer and N SecAggClients run whole
// rounds, every message written to JSON text and read back as the wire would carry it, and
// the same N updates folded by a plain streaming FedAvg (aggregation/fedavg.h) in the same run.
//
//   secagg_bench [--clients N,N,...] [--params P,P,...] [--dropout F] [--threads T]
//                [--coordinator-clients N,N,...] [--coordinator-params P,P,...]
//                [--coordinator-bin PATH] [--flower FILE]
//
// Defaults: N in {50, 100, 200}, P in {100000, 1000000}, no dropouts, T = 2 (the server's
// threads, as the plain FedAvg's). Larger: --clients 50,100,200,500,1000. Each round derives k
// and t from N (5% dropouts, 5% corrupt, semi-malicious, sigma 40, eta 20: secagg/params.h),
// uses 32-bit words, clip 10, max_weight 1000 and the largest scale that fits.
//
// Per round:
//  - client: CPU seconds of one client's four stages (the mean over the N clients; each runs
//    on one thread, timed with its thread CPU clock) and the bytes it sends and receives (JSON
//    text and the masked vector's body);
//  - server: CPU seconds (process CPU while only the server runs, its helper threads included)
//    and wall seconds of every server call, split into keys and shares, folds, and unmasking
//    (close of inputs, answers, finish); the server's peak memory (the largest memory_bytes()
//    after a call: what it holds, not allocator overhead), in models of P float32;
//  - plain: wall and CPU seconds of StreamingFedAvg folding the same N updates and its mean();
//  - ratios: server wall over plain wall, and server wall over N log2 N across N.
// With --dropout F, a fraction F of the clients send no masked input (after sharing keys), so
// unmasking also rebuilds their keys and removes their pairwise masks.
// Through the real coordinator (built with the server): for each N of --coordinator-clients
// (default 50, 100) and P of --coordinator-params (default 100000), one secure round and one
// plain round of N client threads against the fedcase-coordinator binary (a child process on
// 127.0.0.1; --coordinator-bin, default ../server/fedcase-coordinator beside this binary):
// the coordinator's CPU seconds from the job's creation to the commit, the round's wall
// seconds and one client's CPU seconds (bench/secagg_coordinator.h); --coordinator-clients 0
// skips them.
// With --flower FILE (the output of bench/flower_secaggplus.py, Flower's own SecAgg+ workflow
// timed the same way: its last line is read), each of its rounds is set beside this run's
// round of the same N and P: Flower's server CPU seconds over fedcase's, and the same for one
// client's CPU seconds and bytes sent.
// The last line of output is one JSON object with every figure.

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "aggregation/fedavg.h"
#ifdef FEDCASE_BENCH_COORDINATOR
#include "bench/secagg_coordinator.h"
#endif
#include "bench/synthetic_update.h"
#include "protocol/secagg.h"
#include "secagg/client.h"
#include "secagg/params.h"
#include "secagg/server.h"

namespace {

using fedcase::ClientId;
using fedcase::Result;
using fedcase::Status;
using fedcase::bench::fill_update;
using fedcase::secagg::SecAggClient;
using fedcase::secagg::SecAggServer;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;
namespace protocol = fedcase::protocol;
namespace secagg = fedcase::secagg;

struct Options {
  std::vector<size_t> clients = {50, 100, 200};
  std::vector<size_t> params = {100000, 1000000};
  double dropout = 0;
  size_t threads = 2;
  std::vector<size_t> coordinator_clients = {50, 100};
  std::vector<size_t> coordinator_params = {100000};
  std::string coordinator_bin;
  std::string flower;
};

std::optional<std::vector<size_t>> parse_list(const std::string& text) {
  std::vector<size_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v == 0) return std::nullopt;
    out.push_back(v);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return std::nullopt;
    const std::string value = argv[++i];
    if (flag == "--clients" || flag == "--params") {
      auto list = parse_list(value);
      if (!list) return std::nullopt;
      (flag == "--clients" ? o.clients : o.params) = *list;
    } else if (flag == "--coordinator-clients" && value == "0") {
      o.coordinator_clients.clear();
    } else if (flag == "--coordinator-clients" || flag == "--coordinator-params") {
      auto list = parse_list(value);
      if (!list) return std::nullopt;
      (flag == "--coordinator-clients" ? o.coordinator_clients : o.coordinator_params) = *list;
    } else if (flag == "--coordinator-bin") {
      o.coordinator_bin = value;
    } else if (flag == "--flower") {
      o.flower = value;
    } else if (flag == "--dropout") {
      char* end = nullptr;
      o.dropout = std::strtod(value.c_str(), &end);
      if (*end != '\0' || !(o.dropout >= 0 && o.dropout < 0.5)) return std::nullopt;
    } else if (flag == "--threads") {
      o.threads = std::strtoull(value.c_str(), nullptr, 10);
      if (o.threads == 0) return std::nullopt;
    } else {
      return std::nullopt;
    }
  }
  return o;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

double process_cpu_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_utime.tv_sec) + double(usage.ru_utime.tv_usec) * 1e-6 +
         double(usage.ru_stime.tv_sec) + double(usage.ru_stime.tv_usec) * 1e-6;
}

void require(const Status& s, const char* what) {
  if (!s.ok()) {
    std::cerr << "secagg_bench: " << what << ": " << s.to_string() << "\n";
    std::exit(1);
  }
}

template <class T>
T require(Result<T> r, const char* what) {
  require(r.status(), what);
  return std::move(*r);
}

uint64_t weight_of(size_t i) { return 50 + (i % 7) * 25; }

// Times and accounts the server's calls: wall, process CPU, and the largest memory_bytes() of
// the server after any call (what it holds: the running sum, graph, keys, ciphertexts, shares).
class ServerMeter {
 public:
  explicit ServerMeter(const SecAggServer* const* server) : server_(server) {}

  template <class F>
  auto run(double& wall, F&& call) {
    const double cpu0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    auto result = call();
    wall += std::chrono::duration<double>(Clock::now() - t0).count();
    cpu_ += process_cpu_seconds() - cpu0;
    if (*server_ != nullptr) peak_ = std::max(peak_, (*server_)->memory_bytes());
    return result;
  }
  double cpu() const { return cpu_; }
  size_t peak_bytes() const { return peak_; }

 private:
  const SecAggServer* const* server_;  // the round's server, once created
  double cpu_ = 0;
  size_t peak_ = 0;
};

// Times and accounts one client's calls (thread CPU) and the bytes it sends and receives.
struct ClientMeter {
  double cpu = 0;
  size_t sent = 0;
  size_t received = 0;

  template <class F>
  auto run(F&& call) {
    const double cpu0 = thread_cpu_seconds();
    auto result = call();
    cpu += thread_cpu_seconds() - cpu0;
    return result;
  }
};

// The text of a message as the wire carries it.
template <class T>
std::string text(const T& message, nlohmann::json (*write)(const T&)) {
  return write(message).dump();
}

template <class T>
T parse(const std::string& text, Result<T> (*read)(const nlohmann::json&)) {
  return require(read(nlohmann::json::parse(text)), "read a message");
}

Json run_round(const Options& o, size_t n, size_t length) {
  secagg::GraphRequirements req;
  req.clients = n;
  const secagg::GraphParams graph = require(secagg::derive_graph_params(req), "derive k, t");
  secagg::SecAggRoundSetup setup;
  setup.job = 1;
  setup.round = 1;
  setup.params.degree = graph.degree;
  setup.params.threshold = graph.threshold;
  setup.params.bits = 32;
  setup.params.clip = 10;
  setup.params.max_weight = 1000;
  setup.params.vector_length = length;
  setup.params.scale = require(secagg::max_scale(n, 10, 1000, 32), "max scale");
  setup.graph_seed = require(secagg::random_seed(), "graph seed");
  setup.threads = o.threads;
  for (size_t i = 0; i < n; ++i) setup.invitees.push_back(1000 + i);
  std::vector<fedcase::secagg::KeyPair> signing(n);
  for (size_t i = 0; i < n; ++i) {
    signing[i] = require(fedcase::secagg::generate_signing_key(), "signing key");
    setup.signing_keys[setup.invitees[i]] = std::string(fedcase::secagg::as_view(signing[i].public_key));
  }

  std::vector<float> update(length);
  const SecAggServer* measured = nullptr;
  ServerMeter server_meter(&measured);
  double keys_wall = 0, fold_wall = 0, unmask_wall = 0;
  std::unique_ptr<SecAggServer> server =
      server_meter.run(keys_wall, [&] { return require(SecAggServer::create(setup), "create"); });
  measured = server.get();
  std::vector<std::unique_ptr<SecAggClient>> clients;
  std::vector<ClientMeter> meters(n);
  for (size_t i = 0; i < n; ++i) {
    clients.push_back(std::make_unique<SecAggClient>(1, 1, setup.invitees[i], signing[i].private_key));
  }
  const size_t dropped = size_t(std::floor(o.dropout * double(n)));

  // Stage 1.
  for (size_t i = 0; i < n; ++i) {
    const std::string sent = meters[i].run([&] {
      return text(require(clients[i]->advertise_keys(), "advertise"),
                  protocol::write_secagg_advertise_keys);
    });
    meters[i].sent += sent.size();
    server_meter.run(keys_wall, [&] {
      require(server->receive_keys(setup.invitees[i],
                                   parse(sent, protocol::read_secagg_advertise_keys)),
              "receive keys");
      return 0;
    });
  }
  server_meter.run(keys_wall, [&] { return (require(server->close_keys(), "close keys"), 0); });
  // Stage 2: the graph is one message for all, written once.
  const std::string graph_text = server_meter.run(keys_wall, [&] {
    return text(require(server->graph(), "graph"), protocol::write_secagg_graph);
  });
  for (size_t i = 0; i < n; ++i) {
    const std::string list = server_meter.run(keys_wall, [&] {
      return text(require(server->key_list(setup.invitees[i]), "key list"),
                  protocol::write_secagg_key_list);
    });
    meters[i].received += graph_text.size() + list.size();
    const std::string sent = meters[i].run([&] {
      return text(require(clients[i]->share_keys(parse(graph_text, protocol::read_secagg_graph),
                                                 parse(list, protocol::read_secagg_key_list)),
                          "share keys"),
                  protocol::write_secagg_shares);
    });
    meters[i].sent += sent.size();
    server_meter.run(keys_wall, [&] {
      require(server->receive_shares(setup.invitees[i], parse(sent, protocol::read_secagg_shares)),
              "receive shares");
      return 0;
    });
  }
  server_meter.run(keys_wall, [&] { return (require(server->close_shares(), "close shares"), 0); });
  // Stage 3: one client's update and masked vector at a time.
  for (size_t i = 0; i < n; ++i) {
    const std::string forwarded = server_meter.run(keys_wall, [&] {
      return text(require(server->forwarded_shares(setup.invitees[i]), "forwarded"),
                  protocol::write_secagg_forwarded_shares);
    });
    meters[i].received += forwarded.size();
    if (i < dropped) continue;  // drops out after sharing its keys
    fill_update(update, i + 1);
    secagg::SecAggMaskedVector masked = meters[i].run([&] {
      return require(
          clients[i]->mask_input(parse(forwarded, protocol::read_secagg_forwarded_shares),
                                 update.data(), length, weight_of(i), 1),
          "mask");
    });
    const std::string header = text(masked.header, protocol::write_secagg_masked_input);
    meters[i].sent += header.size() + masked.body.size();
    server_meter.run(fold_wall, [&] {
      require(
          server->receive_masked_input(
              setup.invitees[i], parse(header, protocol::read_secagg_masked_input), masked.body),
          "receive input");
      return 0;
    });
  }
  // Stage 4.
  server_meter.run(unmask_wall,
                   [&] { return (require(server->close_masked_inputs(), "close inputs"), 0); });
  for (size_t i = dropped; i < n; ++i) {
    const std::string request = server_meter.run(unmask_wall, [&] {
      return text(require(server->unmask_request(setup.invitees[i]), "request"),
                  protocol::write_secagg_unmask_request);
    });
    meters[i].received += request.size();
    const std::string sent = meters[i].run([&] {
      return text(require(clients[i]->unmask(parse(request, protocol::read_secagg_unmask_request)),
                          "unmask"),
                  protocol::write_secagg_unmask_response);
    });
    meters[i].sent += sent.size();
    server_meter.run(unmask_wall, [&] {
      require(server->receive_unmask_response(setup.invitees[i],
                                              parse(sent, protocol::read_secagg_unmask_response)),
              "receive response");
      return 0;
    });
  }
  const secagg::SecAggSum sum =
      server_meter.run(unmask_wall, [&] { return require(server->finish(), "finish"); });
  const double server_wall = keys_wall + fold_wall + unmask_wall;

  // The plain baseline: the same survivors' updates through streaming FedAvg.
  double plain_wall = 0, plain_cpu = 0;
  double max_error = 0;
  {
    fedcase::aggregation::StreamingFedAvg avg(length, o.threads);
    for (size_t i = dropped; i < n; ++i) {
      fill_update(update, i + 1);
      const double cpu0 = process_cpu_seconds();
      const auto t0 = Clock::now();
      require(avg.add(update.data(), length, double(weight_of(i))), "plain fold");
      plain_wall += std::chrono::duration<double>(Clock::now() - t0).count();
      plain_cpu += process_cpu_seconds() - cpu0;
    }
    const double cpu0 = process_cpu_seconds();
    const auto t0 = Clock::now();
    std::vector<float> plain_mean = require(avg.mean(), "plain mean");
    plain_wall += std::chrono::duration<double>(Clock::now() - t0).count();
    plain_cpu += process_cpu_seconds() - cpu0;
    const std::vector<float> secure_mean = require(sum.mean(), "secure mean");
    for (size_t j = 0; j < length; ++j) {
      max_error = std::max(max_error, double(std::abs(secure_mean[j] - plain_mean[j])));
    }
  }

  double client_cpu = 0, client_sent = 0, client_received = 0;
  for (size_t i = dropped; i < n; ++i) {
    client_cpu += meters[i].cpu;
    client_sent += double(meters[i].sent);
    client_received += double(meters[i].received);
  }
  const double survivors = double(n - dropped);
  Json j;
  j["clients"] = n;
  j["params"] = length;
  j["degree"] = graph.degree;
  j["threshold"] = graph.threshold;
  j["dropped"] = dropped;
  j["client_cpu_s"] = client_cpu / survivors;
  j["client_sent_bytes"] = client_sent / survivors;
  j["client_received_bytes"] = client_received / survivors;
  j["server_wall_s"] = server_wall;
  j["server_cpu_s"] = server_meter.cpu();
  j["server_keys_wall_s"] = keys_wall;
  j["server_fold_wall_s"] = fold_wall;
  j["server_unmask_wall_s"] = unmask_wall;
  j["server_peak_bytes"] = server_meter.peak_bytes();
  j["server_peak_models"] = double(server_meter.peak_bytes()) / double(length * sizeof(float));
  j["plain_wall_s"] = plain_wall;
  j["plain_cpu_s"] = plain_cpu;
  j["server_over_plain_wall"] = server_wall / plain_wall;
  j["server_wall_per_n_log_n_us"] = server_wall / (double(n) * std::log2(double(n))) * 1e6;
  j["max_mean_error_vs_plain"] = max_error;
  return j;
}

// The last line of `path` (flower_secaggplus.py's JSON); exits the process if it is not one.
Json read_last_json_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  Json j = Json::parse(last, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("rounds")) {
    std::cerr << "secagg_bench: " << path << " does not end with flower_secaggplus.py's JSON\n";
    std::exit(1);
  }
  return j;
}

// Flower's rounds beside this run's rounds of the same N and P.
Json beside_flower(const Json& flower, const Json& rounds) {
  Json out = Json::array();
  for (const Json& f : flower["rounds"]) {
    for (const Json& r : rounds) {
      if (r["clients"] != f["clients"] || r["params"] != f["params"]) continue;
      out.push_back({{"clients", r["clients"]},
                     {"params", r["params"]},
                     {"flower_server_cpu_s", f["server_cpu_s"]},
                     {"fedcase_server_cpu_s", r["server_cpu_s"]},
                     {"flower_over_fedcase_server_cpu",
                      f["server_cpu_s"].get<double>() / r["server_cpu_s"].get<double>()},
                     {"flower_client_cpu_s", f["client_cpu_s"]},
                     {"fedcase_client_cpu_s", r["client_cpu_s"]},
                     {"flower_over_fedcase_client_cpu",
                      f["client_cpu_s"].get<double>() / r["client_cpu_s"].get<double>()},
                     {"flower_client_sent_bytes", f["client_sent_bytes"]},
                     {"fedcase_client_sent_bytes", r["client_sent_bytes"]},
                     {"flower_secure_over_plain_server_cpu", f.value("server_cpu_over_plain", 0.0)},
                     {"fedcase_secure_over_plain_server_wall", r["server_over_plain_wall"]}});
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const auto options = parse_options(argc, argv);
  if (!options) {
    std::cerr << "usage: secagg_bench [--clients N,N,...] [--params P,P,...] [--dropout F]"
                 " [--threads T] [--coordinator-clients N,N,...|0]"
                 " [--coordinator-params P,P,...] [--coordinator-bin PATH] [--flower FILE]"
                 "   (positive integers; F in [0, 0.5))\n";
    return 2;
  }
  const Options& o = *options;
  std::cout << "secagg_bench: " << o.threads << " server threads, "
            << std::thread::hardware_concurrency() << " hardware threads, dropout " << o.dropout
            << "\n";
  std::printf("%6s %8s %4s %4s | %9s %10s %10s | %9s %9s %8s %8s %8s %7s | %9s %7s\n", "N", "P",
              "k", "t", "client s", "sent B", "recv B", "server s", "cpu s", "keys s", "fold s",
              "unmask s", "peak", "plain s", "ratio");
  Json rounds = Json::array();
  for (size_t length : o.params) {
    for (size_t n : o.clients) {
      Json r = run_round(o, n, length);
      std::printf(
          "%6zu %8zu %4u %4u | %9.4f %10.0f %10.0f | %9.4f %9.4f %8.4f %8.4f %8.4f %6.2fm | "
          "%9.4f %6.2fx\n",
          n, length, r["degree"].get<unsigned>(), r["threshold"].get<unsigned>(),
          r["client_cpu_s"].get<double>(), r["client_sent_bytes"].get<double>(),
          r["client_received_bytes"].get<double>(), r["server_wall_s"].get<double>(),
          r["server_cpu_s"].get<double>(), r["server_keys_wall_s"].get<double>(),
          r["server_fold_wall_s"].get<double>(), r["server_unmask_wall_s"].get<double>(),
          r["server_peak_models"].get<double>(), r["plain_wall_s"].get<double>(),
          r["server_over_plain_wall"].get<double>());
      std::fflush(stdout);
      rounds.push_back(r);
    }
  }
  // The targets, read off the rounds that exist in this run.
  Json targets;
  const auto find = [&](size_t n, size_t p) -> const Json* {
    for (const Json& r : rounds) {
      if (r["clients"] == n && r["params"] == p) return &r;
    }
    return nullptr;
  };
  if (const Json* r = find(100, 1000000)) {
    targets["n100_p1m_server_over_plain"] = (*r)["server_over_plain_wall"];
  }
  for (size_t length : o.params) {
    const Json* small = find(100, length);
    const Json* large = find(1000, length);
    if (small && large) {
      targets["client_cpu_n1000_over_n100_p" + std::to_string(length)] =
          (*large)["client_cpu_s"].get<double>() / (*small)["client_cpu_s"].get<double>();
    }
    // Server time against N log N: the largest N's figure over the smallest N's.
    const Json* first = nullptr;
    const Json* last = nullptr;
    for (const Json& r : rounds) {
      if (r["params"] != length) continue;
      if (!first || r["clients"] < (*first)["clients"]) first = &r;
      if (!last || r["clients"] > (*last)["clients"]) last = &r;
    }
    if (first && last && first != last) {
      targets["server_per_n_log_n_growth_p" + std::to_string(length)] =
          (*last)["server_wall_per_n_log_n_us"].get<double>() /
          (*first)["server_wall_per_n_log_n_us"].get<double>();
    }
  }
  Json coordinator = Json::array();
#ifdef FEDCASE_BENCH_COORDINATOR
  std::string binary = o.coordinator_bin;
  if (binary.empty()) {
    binary = (std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path() /
              "server" / "fedcase-coordinator")
                 .string();
  }
  if (!o.coordinator_clients.empty()) {
    std::printf(
        "\nthrough the coordinator (%s):\n%6s %8s | %10s %10s %10s | %10s %10s %10s | %7s\n",
        binary.c_str(), "N", "P", "plain cpu", "wall s", "client s", "secure cpu", "wall s",
        "client s", "cpu x");
  }
  for (size_t length : o.coordinator_params) {
    for (size_t n : o.coordinator_clients) {
      Json plain = fedcase::bench::coordinator_round(binary, n, length, false);
      Json secure = fedcase::bench::coordinator_round(binary, n, length, true);
      const double ratio =
          secure["coordinator_cpu_s"].get<double>() / plain["coordinator_cpu_s"].get<double>();
      std::printf("%6zu %8zu | %10.4f %10.4f %10.4f | %10.4f %10.4f %10.4f | %6.2fx\n", n, length,
                  plain["coordinator_cpu_s"].get<double>(), plain["round_wall_s"].get<double>(),
                  plain["client_cpu_s"].get<double>(), secure["coordinator_cpu_s"].get<double>(),
                  secure["round_wall_s"].get<double>(), secure["client_cpu_s"].get<double>(),
                  ratio);
      std::fflush(stdout);
      coordinator.push_back(
          {{"clients", n},
           {"params", length},
           {"plain", plain},
           {"secure", secure},
           {"secure_over_plain_cpu", ratio},
           {"secure_cpu_per_n_log_n_us",
            secure["coordinator_cpu_s"].get<double>() * 1e6 / (double(n) * std::log2(double(n)))}});
    }
  }
  const auto through = [&](size_t n, size_t p) -> const Json* {
    for (const Json& r : coordinator) {
      if (r["clients"] == n && r["params"] == p) return &r;
    }
    return nullptr;
  };
  if (const Json* r = through(100, 1000000)) {
    targets["coordinator_n100_p1m_secure_over_plain_cpu"] = (*r)["secure_over_plain_cpu"];
  }
  for (size_t length : o.coordinator_params) {
    const Json* small = through(100, length);
    const Json* large = through(1000, length);
    if (small && large) {
      targets["coordinator_client_cpu_n1000_over_n100_p" + std::to_string(length)] =
          (*large)["secure"]["client_cpu_s"].get<double>() /
          (*small)["secure"]["client_cpu_s"].get<double>();
    }
    const Json* first = nullptr;
    const Json* last = nullptr;
    for (const Json& r : coordinator) {
      if (r["params"] != length) continue;
      if (!first || r["clients"] < (*first)["clients"]) first = &r;
      if (!last || r["clients"] > (*last)["clients"]) last = &r;
    }
    if (first && last && first != last) {
      targets["coordinator_cpu_per_n_log_n_growth_p" + std::to_string(length)] =
          (*last)["secure_cpu_per_n_log_n_us"].get<double>() /
          (*first)["secure_cpu_per_n_log_n_us"].get<double>();
    }
  }
#endif
  Json out;
  out["bench"] = "secagg";
  out["threads"] = o.threads;
  out["hardware_threads"] = std::thread::hardware_concurrency();
  out["dropout"] = o.dropout;
  out["rounds"] = rounds;
  out["coordinator_rounds"] = coordinator;
  if (!o.flower.empty()) {
    const Json flower = read_last_json_line(o.flower);
    out["flower"] = beside_flower(flower, rounds);
    std::printf("\nbeside Flower's SecAgg+ (%s):\n%6s %8s | %12s %12s %8s | %12s %12s %8s\n",
                o.flower.c_str(), "N", "P", "flower srv s", "fedcase srv s", "x", "flower cli s",
                "fedcase cli s", "x");
    for (const Json& b : out["flower"]) {
      std::printf("%6zu %8zu | %12.4f %12.4f %7.1fx | %12.4f %12.4f %7.1fx\n",
                  b["clients"].get<size_t>(), b["params"].get<size_t>(),
                  b["flower_server_cpu_s"].get<double>(), b["fedcase_server_cpu_s"].get<double>(),
                  b["flower_over_fedcase_server_cpu"].get<double>(),
                  b["flower_client_cpu_s"].get<double>(), b["fedcase_client_cpu_s"].get<double>(),
                  b["flower_over_fedcase_client_cpu"].get<double>());
      if (b["clients"] == 100 && b["params"] == 1000000) {
        targets["n100_p1m_flower_over_fedcase_server_cpu"] = b["flower_over_fedcase_server_cpu"];
      }
    }
  }
  out["targets"] = targets;
  std::cout << out.dump() << "\n";
  return 0;
}
