#include "bench/secagg_coordinator.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/synthetic_update.h"
#include "cli/request.h"
#include "client_sdk/http_client.h"
#include "client_sdk/secure_task.h"
#include "common/blob.h"
#include "protocol/base64.h"
#include "protocol/task_offer.h"
#include "protocol/update_meta.h"

namespace fedcase::bench {
namespace {

using Json = nlohmann::ordered_json;
constexpr const char* kAdmin = "bench-admin-token-0123456789";
constexpr const char* kEnrollment = "bench-enrollment-token-0123456789";

[[noreturn]] void die(const std::string& why) {
  std::cerr << "secagg_bench (coordinator): " << why << "\n";
  std::exit(1);
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// utime + stime of `pid`, from /proc/<pid>/stat (fields 14 and 15, in clock ticks).
double process_cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command may hold spaces
  if (close == std::string::npos) die("cannot read the coordinator's CPU time");
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);
  }
  return ticks / double(sysconf(_SC_CLK_TCK));
}

// The coordinator binary as a child process, with its database in a fresh folder.
class Coordinator {
 public:
  explicit Coordinator(const std::string& binary) {
    dir_ = std::filesystem::temp_directory_path() /
           ("secagg-bench-" + std::to_string(getpid()) + "-" + std::to_string(++runs_));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    const Json config = {{"port", 0},
                         {"port_file", (dir_ / "port").string()},
                         {"database", (dir_ / "fedcase.db").string()},
                         {"admin_token", kAdmin},
                         {"enrollment_token", kEnrollment},
                         {"requests_per_second", 100000},
                         {"long_poll_max_s", 30},
                         {"max_connections_per_ip", 10000}};
    std::ofstream(dir_ / "coordinator.json") << config.dump();
    pid_ = fork();
    if (pid_ < 0) die("fork failed");
    if (pid_ == 0) {
      FILE* log = std::fopen((dir_ / "coordinator.log").c_str(), "a");
      if (log) {
        dup2(fileno(log), STDOUT_FILENO);
        dup2(fileno(log), STDERR_FILENO);
      }
      execl(binary.c_str(), binary.c_str(), "--config", (dir_ / "coordinator.json").c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    for (int i = 0; i < 300 && port_ == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::ifstream in(dir_ / "port");
      unsigned port = 0;
      if (in >> port) port_ = static_cast<uint16_t>(port);
    }
    if (port_ == 0)
      die("the coordinator did not start; see " + (dir_ / "coordinator.log").string());
  }
  ~Coordinator() {
    ::kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    std::filesystem::remove_all(dir_);
  }
  pid_t pid() const { return pid_; }
  uint16_t port() const { return port_; }

 private:
  static inline int runs_ = 0;
  std::filesystem::path dir_;
  pid_t pid_ = -1;
  uint16_t port_ = 0;
};

client::HttpResponse request(client::HttpClient& http, const std::string& token,
                             const std::string& method, const std::string& target,
                             const std::string& body = "",
                             std::map<std::string, std::string> headers = {}) {
  headers["Authorization"] = "Bearer " + token;
  auto r = http.request(method, target, body, headers, 120);
  if (!r.ok()) die(method + " " + target + ": " + r.status().to_string());
  return std::move(*r);
}

// One client's round: its task, then the plain upload or the secure stages. Its thread's CPU.
double client_round(uint16_t port, const std::string& token, ClientId id,
                    const secagg::Bytes32& signing_key, JobId job,
                    const std::vector<float>& delta, const std::string& plain_body) {
  client::HttpClient http(client::plain_connection("127.0.0.1", port));
  protocol::TaskOffer task;
  for (bool found = false; !found;) {
    client::HttpResponse r = request(http, token, "GET", "/v1/task?wait=5");
    if (r.status != 200) continue;
    auto offer = protocol::read_task_offer(nlohmann::json::parse(r.body));
    if (!offer.ok()) die(offer.status().to_string());
    task = *offer;
    found = task.job == job;
  }
  const double start = thread_cpu_seconds();
  protocol::UpdateMeta meta;
  meta.samples = 100 + id % 7 * 25;
  std::map<std::string, std::string> headers = {
      {"Content-Type", "application/octet-stream"},
      {"X-Fedcase-Meta", protocol::write_update_meta(meta).dump()}};
  if (!task.secure_aggregation) {
    client::HttpResponse r = request(http, token, "POST", task.upload_url, plain_body, headers);
    if (r.status != 200) die("plain upload refused: " + r.body);
    return thread_cpu_seconds() - start;
  }
  std::atomic<bool> stop{false};
  auto calls = [&](const std::string& method, const std::string& target, const std::string& body,
                   std::map<std::string, std::string> h, double timeout_s) {
    h["Authorization"] = "Bearer " + token;
    return http.request(method, target, body, h, timeout_s);
  };
  client::SecureTask secure(task, id, signing_key, calls, 5, 120, stop);
  if (Status s = secure.share_keys(); !s.ok()) die("share keys: " + s.to_string());
  auto masked = secure.mask(delta, meta.samples);
  if (!masked.ok()) die("mask: " + masked.status().to_string());
  headers["X-Fedcase-SecAgg"] = masked->header;
  client::HttpResponse r = request(http, token, "POST", task.secure_aggregation->masked_input_url,
                                   masked->body, headers);
  if (r.status != 200) die("masked input refused: " + r.body);
  if (Status s = secure.unmask(); !s.ok()) die("unmask: " + s.to_string());
  return thread_cpu_seconds() - start;
}

}  // namespace

Json coordinator_round(const std::string& binary, size_t n, size_t params, bool secure) {
  Coordinator coordinator(binary);
  const uint16_t port = coordinator.port();
  client::HttpClient admin(client::plain_connection("127.0.0.1", port));
  // The clients first, so that the round invites all of them.
  struct Client {
    ClientId id;
    std::string token;
    secagg::KeyPair signing;  // registered: it signs the client's round keys
  };
  std::vector<Client> clients;
  for (size_t i = 0; i < n; ++i) {
    auto signing = secagg::generate_signing_key();
    if (!signing.ok()) die(signing.status().to_string());
    const Json registration = {
        {"dataset_size", 100},
        {"signing_public_key",
         protocol::encode_base64(std::string(secagg::as_view(signing->public_key)))}};
    client::HttpResponse r =
        request(admin, kEnrollment, "POST", "/v1/clients/register", registration.dump(),
                {{"Content-Type", "application/json"}});
    const auto reply = nlohmann::json::parse(r.body);
    clients.push_back(
        {reply["client_id"].get<ClientId>(), reply["token"].get<std::string>(), *signing});
  }
  std::vector<float> delta(params);
  fill_update(delta, 7);
  const ModelLayout layout{{{"w", {params}}}};
  const std::string plain_body = encode_blob(ModelBlob{0, layout, delta});
  Json job = {{"name", secure ? "secure" : "plain"},
              {"model", "blob"},
              {"loss", "mse"},
              {"rounds", 1},
              {"clients_per_round", n},
              {"selection", {{"overcommit", 1.0}}},
              {"training",
               {{"sample_budget", 1000}, {"deadline", {{"mode", "fixed"}, {"seconds", 600}}}}}};
  if (secure) job["secure_aggregation"] = {{"clip", 10}, {"stage_seconds", 60}};
  cli::Invocation inv;
  inv.command = cli::Command::kJobsCreate;
  inv.model_file = "model.blob";
  inv.token = kAdmin;
  const std::string model = encode_blob(ModelBlob{0, layout, std::vector<float>(params, 0)});
  const cli::ApiRequest create = cli::api_request(inv, job.dump(), model);

  const double cpu_before = process_cpu_seconds(coordinator.pid());
  client::HttpResponse created =
      request(admin, kAdmin, create.method, create.target, create.body, create.headers);
  if (created.status != 201) die("job refused: " + created.body);
  const JobId id = nlohmann::json::parse(created.body)["job_id"];
  std::vector<double> client_cpu(n);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      client_cpu[i] =
          client_round(port, clients[i].token, clients[i].id, clients[i].signing.private_key, id,
                       delta, plain_body);
    });
  }
  for (std::thread& t : threads) t.join();
  nlohmann::json record;
  for (int i = 0; i < 6000 && record.is_null(); ++i) {
    const auto detail = nlohmann::json::parse(
        request(admin, kAdmin, "GET", "/v1/admin/jobs/" + std::to_string(id)).body);
    for (const auto& r : detail["rounds"]) {
      if (r["state"] != "open") record = r;
    }
    if (record.is_null()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const double cpu = process_cpu_seconds(coordinator.pid()) - cpu_before;
  if (record.is_null() || record["state"] != "committed") die("the round did not commit");
  double client_sum = 0;
  for (double c : client_cpu) client_sum += c;
  Json out;
  out["clients"] = n;
  out["params"] = params;
  out["secure"] = secure;
  out["coordinator_cpu_s"] = cpu;
  out["round_wall_s"] = record["closed_at"].get<double>() - record["opened_at"].get<double>();
  out["client_cpu_s"] = client_sum / double(n);
  if (secure) out["secure_aggregation"] = record["metrics"]["secure_aggregation"];
  return out;
}

}  // namespace fedcase::bench
