#pragma once
// Helpers for tests that talk to a real coordinator over real HTTP on 127.0.0.1.

#include <doctest/doctest.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "client_sdk/fleet.h"
#include "client_sdk/http_client.h"
#include "ml/dataset.h"
#include "server/core/base/config.h"
#include "server/service.h"
#include "tests/support/temp_dir.h"

namespace fedcase::testing {

inline constexpr const char* kAdminToken = "test-admin-token-0123456789";
inline constexpr const char* kEnrollmentToken = "test-enrollment-token-0123456789";

// Pace steering for tests: devices with no job to serve check in again within a second or
// two (not the production minute), and come back within a second of an outage.
inline const nlohmann::json kTestPace = {{"max_period_s", 1}, {"reconnect_window_s", 1}};

// A coordinator config for tests: port 0, database in `dir`, small evaluation set.
inline server::CoordinatorConfig test_config(const TempDir& dir) {
  nlohmann::json j = {{"port", 0},
                      {"database", dir.file("fedcase.db")},
                      {"admin_token", kAdminToken},
                      {"enrollment_token", kEnrollmentToken},
                      {"eval_data_dir", FEDCASE_FMNIST_DIR},
                      {"eval_samples", 1000},
                      {"long_poll_max_s", 5},
                      {"pace", kTestPace}};
  return server::parse_coordinator_config(j);
}

// A running coordinator with its database in `dir`, on 127.0.0.1 port 0; `adjust` may change
// the config first.
inline std::unique_ptr<server::CoordinatorService> start_coordinator(
    const TempDir& dir, const std::function<void(server::CoordinatorConfig&)>& adjust = {}) {
  server::CoordinatorConfig config = test_config(dir);
  if (adjust) adjust(config);
  auto service = server::CoordinatorService::start(config);
  REQUIRE_MESSAGE(service.ok(), service.status().to_string());
  return std::move(service).value();
}

// A start_coordinator adjustment: serve TLS with this certificate chain and key (PEM files).
inline std::function<void(server::CoordinatorConfig&)> serving_tls(std::string cert_file,
                                                                   std::string key_file) {
  return [cert_file, key_file](server::CoordinatorConfig& c) {
    c.tls.cert_file = cert_file;
    c.tls.key_file = key_file;
  };
}

// A fleet of `clients` SDK clients on Dirichlet(alpha) partitions of `data` (which must outlive
// the fleet), enrolled at the coordinator on `port`, polling for tasks every second.
inline client::FleetConfig test_fleet(uint16_t port, size_t clients, const ml::Dataset& data,
                                      double alpha = 1.0) {
  client::FleetConfig config;
  config.coordinator.port = port;
  config.enrollment_token = kEnrollmentToken;
  config.clients = clients;
  config.alpha = alpha;
  config.poll_wait_s = 1;
  config.data = &data;
  return config;
}

// The Fashion-MNIST training set, loaded once per test process.
inline const ml::Dataset& fmnist_train() {
  static const ml::Dataset data =
      std::move(ml::load_fashion_mnist(FEDCASE_FMNIST_DIR, ml::Split::kTrain)).value();
  return data;
}

struct Reply {
  int status = 0;
  nlohmann::json body;
  std::string raw;
  client::HttpResponse response;
};

// One caller with one bearer token and one keep-alive connection.
class Caller {
 public:
  Caller(uint16_t port, std::string token)
      : Caller(client::plain_connection("127.0.0.1", port), std::move(token)) {}
  Caller(client::ConnectionOptions connection, std::string token)
      : http_(std::move(connection)), token_(std::move(token)) {}
  void set_token(std::string token) { token_ = std::move(token); }

  Reply call(const std::string& method, const std::string& path, const std::string& body = "",
             std::map<std::string, std::string> headers = {}) {
    if (!token_.empty()) headers["Authorization"] = "Bearer " + token_;
    auto r = http_.request(method, path, body, headers, 30);
    Reply out;
    if (!r.ok()) {  // status 0: transport failure, its message in `raw`
      out.raw = r.status().message();
      return out;
    }
    out.status = r->status;
    out.raw = r->body;
    out.body = nlohmann::json::parse(r->body, nullptr, false);
    out.response = std::move(r).value();
    return out;
  }
  Reply get(const std::string& path) { return call("GET", path); }
  Reply post(const std::string& path, const nlohmann::json& body) {
    return call("POST", path, body.dump(), {{"Content-Type", "application/json"}});
  }

 private:
  client::HttpClient http_;
  std::string token_;
};

// `ask`'s answer, asked again after 250 ms while it is 503 (a replica reading from the store
// what another replica just wrote: a token, a job, a round), 20 times at most, as the SDK does.
inline Reply retried(const std::function<Reply()>& ask) {
  Reply r = ask();
  for (int again = 0; again < 20 && r.status == 503; ++again) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    r = ask();
  }
  return r;
}

// Polls `done` every 100 ms until it holds or `timeout_s` passes; returns whether it held.
inline bool wait_until(const std::function<bool()>& done, double timeout_s) {
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < end) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

// The value of the metric line that starts with `series` (a family's name, with its labels
// if it has any) in a /metrics page, or -1.
inline double metric_value(const std::string& page, const std::string& series) {
  const size_t at = page.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + series.size() + 2));
}

// Committed rounds of a job detail reply, in order.
inline std::vector<nlohmann::json> committed_rounds(const nlohmann::json& detail) {
  std::vector<nlohmann::json> out;
  if (!detail.is_object() || !detail.contains("rounds")) return out;
  for (const auto& r : detail["rounds"]) {
    if (r["state"] == "committed") out.push_back(r);
  }
  return out;
}

// A small MLP job for tests of flaky links: `rounds` rounds of 3 clients (no
// over-commitment), 200 samples a task, a deadline far away.
inline nlohmann::json small_mlp_job(const std::string& name, int rounds) {
  return {{"name", name},
          {"model", "mlp"},
          {"rounds", rounds},
          {"clients_per_round", 3},
          {"selection", {{"overcommit", 1.0}}},
          {"training",
           {{"sample_budget", 200},
            {"lr", 0.05},
            {"deadline", {{"mode", "fixed"}, {"seconds", 120}}}}}};
}

// Job 1's detail once it finished, as `admin` reads it, waiting up to `timeout_s`; nullopt
// (with the last detail in `last`) if it did not finish in time.
inline std::optional<nlohmann::json> finished_job(Caller& admin, double timeout_s,
                                                  nlohmann::json& last) {
  const bool finished = wait_until(
      [&] {
        last = admin.get("/v1/admin/jobs/1").body;
        return last.value("state", "") == "finished";
      },
      timeout_s);
  if (!finished) return std::nullopt;
  return last;
}

}  // namespace fedcase::testing
