#pragma once
// What the benchmarks that drive a real coordinator over HTTP share: their tokens, latency
// percentiles, fatal errors, a caller with a bearer token, and jobs whose model is one large
// tensor (addresses and hand-written requests: http_wire.h).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/http_wire.h"
#include "client_sdk/http_client.h"
#include "common/blob.h"
#include "storage/store.h"

namespace fedcase::bench {

inline constexpr const char* kAdminToken = "bench-admin-token-0123456789";
inline constexpr const char* kEnrollmentToken = "bench-enroll-token-0123456789";

// Seconds of the steady clock since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The q-quantile (q in [0, 1]) of `values`, by the nearest rank; 0 for none.
inline double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, size_t(q * double(values.size() - 1) + 0.5))];
}

// Prints "<bench>: <what>" and exits 1: a benchmark that cannot run has no figures.
[[noreturn]] inline void die(const char* bench, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", bench, what.c_str());
  std::exit(1);
}

// One caller with a bearer token and a keep-alive connection; a transport failure ends the
// benchmark (its figures would be wrong).
class Caller {
 public:
  Caller(const char* bench, client::ConnectionOptions connection, std::string token)
      : bench_(bench), http_(std::move(connection)), token_(std::move(token)) {}
  client::HttpResponse call(const std::string& method, const std::string& target,
                            const std::string& body = "",
                            std::map<std::string, std::string> headers = {}) {
    headers["Authorization"] = "Bearer " + token_;
    auto r = http_.request(method, target, body, headers, 600);
    if (!r.ok()) die(bench_, target + ": " + r.status().to_string());
    return std::move(r).value();
  }
  const std::string& token() const { return token_; }

 private:
  const char* bench_;
  client::HttpClient http_;
  std::string token_;
};

// A coordinator's config on `database` at `port` (0: any) for benchmarks whose clients are all
// 127.0.0.1: the benchmarks' tokens, the request-rate, connection and per-address limits
// lifted, uploads of `parameters` floats allowed, timeouts long enough for large rounds, and
// long polls held up to `long_poll_max_s`.
inline nlohmann::json unthrottled_config(uint16_t port, const std::string& database,
                                         size_t parameters, double long_poll_max_s) {
  return {{"port", port},
          {"database", database},
          {"admin_token", kAdminToken},
          {"enrollment_token", kEnrollmentToken},
          {"requests_per_second", 1e6},
          {"unauthenticated_per_second", 1e6},
          {"max_connections", 1'000'000},
          {"max_connections_per_ip", 1'000'000},
          {"max_upload_bytes", parameters * 4 + (1 << 20)},
          {"read_timeout_s", 600},
          {"idle_timeout_s", 3600},
          {"long_poll_max_s", long_poll_max_s},
          {"client_timeout_s", 3600}};
}

// Stores a running job with `config` whose initial model is one tensor "w" of `parameters`
// floats, in the database at `database` (a SQLite path or a PostgreSQL URL: storage::open_store),
// before a coordinator opens it (the admin API creates only built-in architectures). Dies on
// failure.
inline void store_large_job(const char* bench, const std::string& database,
                            const nlohmann::json& config, size_t parameters) {
  auto store = storage::open_store(database);
  if (!store.ok()) die(bench, "store: " + store.status().to_string());
  const std::string blob =
      encode_blob({0, {{{"w", {parameters}}}}, std::vector<float>(parameters, 0.5f)});
  auto id = (*store)->create_job(
      {0, config.value("name", "large"), config, JobState::kRunning, nlohmann::json::object(), 1},
      {0, 0, blob, blob_checksum(blob), "", 1}, "");
  if (!id.ok()) die(bench, "job: " + id.status().to_string());
}

}  // namespace fedcase::bench
