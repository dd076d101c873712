// fedcase-client: runs a fleet of SDK clients (one thread each) against a coordinator.
//   fedcase-client --port 8080 --clients 100 --alpha 0.5 [--host 127.0.0.1] [--seed 1]
//                  [--data-dir /usr/share/datasets/fashion-mnist] [--enrollment-token T]
//                  [--state-dir DIR [--sample-bytes N] [--read-mbps M] [--read-latency-ms L]]
//                  [--cache-capacity-bytes N] [--concurrent-training N]
//                  [--tls-ca FILE [--tls-cert FILE --tls-key FILE]] [--secure-aggregation]
//                  [--replica HOST:PORT]...
// Each --replica names another replica of the same coordinator (same TLS settings), tried in
// turn when the current one cannot be reached (SessionConfig::replicas).
// With --tls-ca the clients speak TLS and verify the coordinator against that CA and the host
// name; --tls-cert and --tls-key give each client a certificate for mutual TLS.
// With --state-dir, each client keeps its partition in a record file and its sampler state
// under DIR/client-<i>, reading samples through an emulated device of M megabytes (10^6
// bytes) per second and L ms per read, with N bytes per stored sample.
// With --concurrent-training N at most N clients train at once (default: no bound), so that
// on one machine each emulated device trains at full speed on a core of its own; a client
// holds its slot for the whole local round, emulated storage reads included.
// With --secure-aggregation the clients take part only in jobs with secure aggregation (a
// task whose update would travel in the clear is declined); such jobs' tasks run through its
// stages whatever the flag says.
// The enrollment token may also come from FEDCASE_ENROLLMENT_TOKEN. Stops on SIGINT/SIGTERM.

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "client_sdk/fleet.h"
#include "common/log.h"
#include "ml/model.h"

namespace {

void usage() {
  std::cout << "usage: fedcase-client [--host H] [--port P] [--clients N] [--alpha A] [--seed S]\n"
               "                      [--data-dir DIR] [--enrollment-token T] [--poll-wait S]\n"
               "                      [--state-dir DIR] [--sample-bytes N] [--read-mbps M]\n"
               "                      [--read-latency-ms L] [--cache-capacity-bytes N]\n"
               "                      [--concurrent-training N]\n"
               "                      [--tls-ca FILE [--tls-cert FILE --tls-key FILE]]\n"
               "                      [--secure-aggregation]\n"
               "                      [--replica HOST:PORT]...\n";
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fedcase;
  client::FleetConfig config;
  std::string data_dir = ml::kDefaultFashionMnistDir;
  if (const char* env = std::getenv("FEDCASE_ENROLLMENT_TOKEN")) config.enrollment_token = env;
  std::vector<std::string> replicas;  // HOST:PORT of each --replica
  try {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
        return argv[++i];
      };
      if (arg == "--host")
        config.coordinator.host = value();
      else if (arg == "--port")
        config.coordinator.port = static_cast<uint16_t>(std::stoul(value()));
      else if (arg == "--tls-ca")
        config.coordinator.ca_file = value();
      else if (arg == "--tls-cert")
        config.coordinator.cert_file = value();
      else if (arg == "--tls-key")
        config.coordinator.key_file = value();
      else if (arg == "--clients")
        config.clients = std::stoul(value());
      else if (arg == "--alpha")
        config.alpha = std::stod(value());
      else if (arg == "--seed")
        config.seed = std::stoull(value());
      else if (arg == "--data-dir")
        data_dir = value();
      else if (arg == "--enrollment-token")
        config.enrollment_token = value();
      else if (arg == "--poll-wait")
        config.poll_wait_s = std::stod(value());
      else if (arg == "--state-dir")
        config.state_dir = value();
      else if (arg == "--sample-bytes")
        config.sample_bytes = std::stoull(value());
      else if (arg == "--read-mbps")
        config.storage.read_bytes_per_s = std::stod(value()) * 1e6;
      else if (arg == "--read-latency-ms")
        config.storage.read_latency_s = std::stod(value()) / 1e3;
      else if (arg == "--cache-capacity-bytes")
        config.cache_capacity_bytes = std::stoull(value());
      else if (arg == "--concurrent-training")
        config.concurrent_training = std::stoul(value());
      else if (arg == "--secure-aggregation")
        config.require_secure_aggregation = true;
      else if (arg == "--replica")
        replicas.push_back(value());
      else if (arg == "--help" || arg == "-h")
        return usage(), 0;
      else
        throw std::invalid_argument("unknown argument '" + arg + "'");
    }
    for (const std::string& replica : replicas) {
      const size_t colon = replica.rfind(':');
      if (colon == std::string::npos) throw std::invalid_argument("--replica needs HOST:PORT");
      client::ConnectionOptions options = config.coordinator;  // the same TLS settings
      options.host = replica.substr(0, colon);
      options.port = static_cast<uint16_t>(std::stoul(replica.substr(colon + 1)));
      config.replicas.push_back(options);
    }
  } catch (const std::exception& e) {
    std::cerr << "fedcase-client: " << e.what() << " (try --help)\n";
    return 2;
  }
  const client::StorageEmulation& storage = config.storage;
  if (config.state_dir.empty() &&
      (config.sample_bytes || storage.read_bytes_per_s || storage.read_latency_s)) {
    std::cerr << "fedcase-client: --sample-bytes, --read-mbps and --read-latency-ms need "
                 "--state-dir\n";
    return 2;
  }
  const client::ConnectionOptions& coordinator = config.coordinator;
  if (coordinator.cert_file.empty() != coordinator.key_file.empty() ||
      (!coordinator.cert_file.empty() && !coordinator.tls())) {
    std::cerr << "fedcase-client: --tls-cert and --tls-key go together, and need --tls-ca\n";
    return 2;
  }
  if (config.enrollment_token.empty()) {
    std::cerr << "fedcase-client: an enrollment token is required (--enrollment-token or "
                 "FEDCASE_ENROLLMENT_TOKEN)\n";
    return 2;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto data = ml::load_fashion_mnist(data_dir, ml::Split::kTrain);
  if (!data.ok()) {
    std::cerr << "fedcase-client: " << data.status().to_string() << "\n";
    return 1;
  }
  config.data = &*data;
  auto fleet = client::Fleet::start(config);
  if (!fleet.ok()) {
    std::cerr << "fedcase-client: " << fleet.status().to_string() << "\n";
    return 1;
  }
  log_info("fleet of " + std::to_string(config.clients) + " clients started against " +
           (coordinator.tls() ? "https://" : "http://") + coordinator.host + ":" +
           std::to_string(coordinator.port));
  int received = 0;
  sigwait(&signals, &received);
  (*fleet)->stop();
  log_info("fleet stopped after " + std::to_string((*fleet)->rounds_trained()) +
           " local trainings, " + std::to_string((*fleet)->updates_accepted()) +
           " accepted updates");
  return 0;
}
