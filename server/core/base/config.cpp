#include "server/core/base/config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "common/json_read.h"
#include "storage/store.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// An error naming `key` unless `value` lies in [min, max] (integer bounds the reader's type
// checks do not already give).
Status check_range(const char* key, double value, double min, double max) {
  if (value >= min && value <= max) return ok_status();
  return invalid_argument(std::string(key) + " must be in [" + std::to_string(int64_t(min)) + ", " +
                          std::to_string(int64_t(max)) + "]");
}

Status parse_tls(const json& j, TlsConfig& tls) {
  ObjectReader r(j, "tls");
  r.text("cert_file", tls.cert_file).text("key_file", tls.key_file);
  r.text("client_ca_file", tls.client_ca_file);
  Status s = r.strict_status();
  if (s.ok() && tls.cert_file.empty() != tls.key_file.empty()) {
    s = invalid_argument("tls.cert_file and tls.key_file must be given together");
  }
  if (s.ok() && !tls.client_ca_file.empty() && !tls.enabled()) {
    s = invalid_argument("tls.client_ca_file needs tls.cert_file and tls.key_file");
  }
  return s;
}

Status parse_pace(const json& j, scheduling::PaceConfig& pace) {
  ObjectReader r(j, "pace");
  r.number("pool_factor", pace.pool_factor, 1, 1e6)
      .number("min_period_s", pace.min_period_s, 0, 86400)
      .number("max_period_s", pace.max_period_s, 0, 86400)
      .number("jitter", pace.jitter, 0, 1)
      .number("value_spread", pace.value_spread, 0, 1)
      .number("reconnect_window_s", pace.reconnect_window_s, 0, 3600);
  Status s = r.strict_status();
  return s.ok() ? scheduling::check_pace_config(pace) : s;
}

Status check_replica_id(const std::string& id) {
  const bool fits =
      id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '.' || ch == '_' || ch == '-';
      });
  if (fits) return ok_status();
  return invalid_argument("replica_id must be 1-64 letters, digits, '.', '_' or '-'");
}

}  // namespace

CoordinatorConfig parse_coordinator_config(const json& j) {
  CoordinatorConfig c;
  ObjectReader r(j, "config");
  if (const json* tls = r.member("tls")) r.merge(parse_tls(*tls, c.tls));
  if (const json* pace = r.member("pace")) r.merge(parse_pace(*pace, c.pace));
  r.text("listen_address", c.listen_address)
      .integer("port", c.port)
      .text("port_file", c.port_file)
      .text("database", c.database)
      .text("replica_id", c.replica_id)
      .number("lease_s", c.lease_s, 0, 600)
      .text("admin_token", c.admin_token)
      .text("enrollment_token", c.enrollment_token)
      .text("metrics_token", c.metrics_token)
      .integer("io_threads", c.io_threads)
      .integer("handler_threads", c.handler_threads)
      .integer("upload_threads", c.upload_threads)
      .integer("max_connections", c.max_connections)
      .integer("max_connections_per_ip", c.max_connections_per_ip)
      .integer("max_upload_bodies", c.max_upload_bodies)
      .integer("max_json_bytes", c.max_json_bytes)
      .integer("max_upload_bytes", c.max_upload_bytes)
      .integer("upload_chunk_bytes", c.upload_chunk_bytes)
      .integer("upload_piece_bytes", c.upload_piece_bytes)
      .integer("max_chunked_upload_bytes", c.max_chunked_upload_bytes)
      .text("spool_dir", c.spool_dir)
      .integer("max_model_bytes", c.max_model_bytes)
      .integer("export_cache_bytes", c.export_cache_bytes)
      .number("read_timeout_s", c.read_timeout_s, 0.1, 3600)
      .number("idle_timeout_s", c.idle_timeout_s, 0.1, 86400)
      .number("drain_timeout_s", c.drain_timeout_s, 0, 3600)
      .number("long_poll_max_s", c.long_poll_max_s, 0, 600)
      .number("client_timeout_s", c.client_timeout_s, 1, 86400)
      .number("requests_per_second", c.requests_per_second, 0.1, 1e6)
      .number("unauthenticated_per_second", c.unauthenticated_per_second, 0.1, 1e6)
      .text("eval_data_dir", c.eval_data_dir)
      .text("datasets_dir", c.datasets_dir)
      .integer("eval_samples", c.eval_samples)
      .integer("torch_threads", c.torch_threads);
  Status s = r.strict_status();
  if (s.ok()) {
    auto url = storage::parse_store_url(c.database);
    if (!url.ok()) s = invalid_argument("database: " + url.status().message());
  }
  if (s.ok()) s = check_replica_id(c.replica_id);
  if (s.ok() && c.lease_s > 0 && c.lease_s < 1) s = invalid_argument("lease_s must be 0 or >= 1");
  if (s.ok()) s = check_range("io_threads", c.io_threads, 1, 64);
  if (s.ok()) s = check_range("handler_threads", c.handler_threads, 1, 256);
  if (s.ok()) s = check_range("upload_threads", c.upload_threads, 1, 256);
  if (s.ok()) s = check_range("max_connections", c.max_connections, 1, 1e7);
  if (s.ok()) s = check_range("max_connections_per_ip", c.max_connections_per_ip, 1, 1e7);
  if (s.ok()) s = check_range("max_upload_bodies", c.max_upload_bodies, 1, 4096);
  if (s.ok()) s = check_range("max_json_bytes", c.max_json_bytes, 1024, 64 << 20);
  if (s.ok()) s = check_range("max_upload_bytes", c.max_upload_bytes, 4096, 4.0 * (1ull << 30));
  // A chunk is never larger than a plain upload (an update up to a chunk goes plain) and is
  // whole pieces: the default chunk shrinks to a smaller max_upload_bytes (in whole pieces),
  // the default piece to a smaller chunk; sizes given must fit.
  const auto given = [&j](const char* key) { return j.is_object() && j.contains(key); };
  if (s.ok() && !given("upload_chunk_bytes")) {
    c.upload_chunk_bytes = std::min(c.upload_chunk_bytes, c.max_upload_bytes);
  }
  if (s.ok() && !given("upload_piece_bytes")) {
    c.upload_piece_bytes = std::min(c.upload_piece_bytes, c.upload_chunk_bytes);
  }
  if (s.ok()) {
    s = check_range("upload_chunk_bytes", c.upload_chunk_bytes, 4096, double(c.max_upload_bytes));
  }
  if (s.ok()) {
    s = check_range("upload_piece_bytes", c.upload_piece_bytes, 4096,
                    double(c.upload_chunk_bytes));
  }
  if (s.ok() && !given("upload_chunk_bytes")) {
    c.upload_chunk_bytes -= c.upload_chunk_bytes % c.upload_piece_bytes;
  }
  if (s.ok() && c.upload_chunk_bytes % c.upload_piece_bytes != 0) {
    s = invalid_argument("upload_chunk_bytes (" + std::to_string(c.upload_chunk_bytes) +
                         ") must be a whole number of upload_piece_bytes (" +
                         std::to_string(c.upload_piece_bytes) + ")");
  }
  if (s.ok()) {
    s = check_range("max_chunked_upload_bytes", c.max_chunked_upload_bytes, 1024,
                    64.0 * (1ull << 30));
  }
  if (s.ok()) s = check_range("max_model_bytes", c.max_model_bytes, 1024, 4.0 * (1ull << 30));
  if (s.ok()) s = check_range("export_cache_bytes", c.export_cache_bytes, 0, 64.0 * (1ull << 30));
  if (s.ok()) s = check_range("eval_samples", c.eval_samples, 1, 1e7);
  if (s.ok()) s = check_range("torch_threads", c.torch_threads, 1, 256);
  if (!s.ok()) throw std::runtime_error(s.message());
  if (const char* env = std::getenv("FEDCASE_ADMIN_TOKEN")) c.admin_token = env;
  if (const char* env = std::getenv("FEDCASE_ENROLLMENT_TOKEN")) c.enrollment_token = env;
  if (const char* env = std::getenv("FEDCASE_METRICS_TOKEN")) c.metrics_token = env;
  if (c.admin_token.size() < 16 || c.enrollment_token.size() < 16) {
    throw std::runtime_error(
        "admin_token and enrollment_token must be set (config or FEDCASE_ADMIN_TOKEN / "
        "FEDCASE_ENROLLMENT_TOKEN) and at least 16 characters long");
  }
  if (c.admin_token == c.enrollment_token) {
    throw std::runtime_error("admin_token and enrollment_token must differ");
  }
  if (!c.metrics_token.empty() &&
      (c.metrics_token.size() < 16 || c.metrics_token == c.admin_token ||
       c.metrics_token == c.enrollment_token)) {
    throw std::runtime_error(
        "metrics_token must be at least 16 characters long and differ from the other tokens");
  }
  return c;
}

CoordinatorConfig load_coordinator_config(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read config file " + path);
  json j = json::parse(in, nullptr, false);
  if (j.is_discarded()) throw std::runtime_error("config file " + path + " is not valid JSON");
  return parse_coordinator_config(j);
}

}  // namespace fedcase::server
