#include "server/config.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <stdexcept>

#include "aggregation/server_optimizer.h"
#include "common/json_read.h"
#include "scheduling/selection.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// An error naming `key` unless `value` lies in [min, max] (integer bounds the reader's type
// checks do not already give).
Status check_range(const char* key, double value, double min, double max) {
  if (value >= min && value <= max) return ok_status();
  return invalid_argument(std::string(key) + " must be in [" + std::to_string(int64_t(min)) +
                          ", " + std::to_string(int64_t(max)) + "]");
}

}  // namespace

CoordinatorConfig parse_coordinator_config(const json& j) {
  CoordinatorConfig c;
  ObjectReader r(j, "config");
  r.text("listen_address", c.listen_address)
      .integer("port", c.port)
      .text("port_file", c.port_file)
      .text("database", c.database)
      .text("admin_token", c.admin_token)
      .text("enrollment_token", c.enrollment_token)
      .integer("io_threads", c.io_threads)
      .integer("max_connections", c.max_connections)
      .integer("max_json_bytes", c.max_json_bytes)
      .integer("max_upload_bytes", c.max_upload_bytes)
      .number("read_timeout_s", c.read_timeout_s, 0.1, 3600)
      .number("long_poll_max_s", c.long_poll_max_s, 0, 600)
      .number("client_timeout_s", c.client_timeout_s, 1, 86400)
      .number("requests_per_second", c.requests_per_second, 0.1, 1e6)
      .text("eval_data_dir", c.eval_data_dir)
      .integer("eval_samples", c.eval_samples)
      .integer("torch_threads", c.torch_threads);
  Status s = r.strict_status();
  if (s.ok()) s = check_range("io_threads", c.io_threads, 1, 64);
  if (s.ok()) s = check_range("max_connections", c.max_connections, 1, 1e7);
  if (s.ok()) s = check_range("max_json_bytes", c.max_json_bytes, 1024, 64 << 20);
  if (s.ok()) s = check_range("max_upload_bytes", c.max_upload_bytes, 1024, 4.0 * (1ull << 30));
  if (s.ok()) s = check_range("eval_samples", c.eval_samples, 1, 1e7);
  if (s.ok()) s = check_range("torch_threads", c.torch_threads, 1, 256);
  if (!s.ok()) throw std::runtime_error(s.message());
  if (const char* env = std::getenv("FEDCASE_ADMIN_TOKEN")) c.admin_token = env;
  if (const char* env = std::getenv("FEDCASE_ENROLLMENT_TOKEN")) c.enrollment_token = env;
  if (c.admin_token.size() < 16 || c.enrollment_token.size() < 16) {
    throw std::runtime_error(
        "admin_token and enrollment_token must be set (config or FEDCASE_ADMIN_TOKEN / "
        "FEDCASE_ENROLLMENT_TOKEN) and at least 16 characters long");
  }
  if (c.admin_token == c.enrollment_token) {
    throw std::runtime_error("admin_token and enrollment_token must differ");
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

Result<JobConfig> parse_job_config(const json& j) {
  JobConfig c;
  json training = json::object(), aggregation = json::object();
  ObjectReader r(j, "job");
  r.text("name", c.name)
      .text("model", c.model)
      .integer("seed", c.seed)
      .integer("rounds", c.rounds)
      .integer("clients_per_round", c.clients_per_round)
      .integer("min_clients", c.min_clients)
      .integer("min_updates", c.min_updates)
      .number("target_accuracy", c.target_accuracy, 0, 1)
      .number("max_update_norm", c.max_update_norm, 0, 1e12)
      .number("dp_delta", c.dp_delta, 1e-12, 0.1);
  // Sections are parsed by the libraries that own them (below).
  for (auto [key, out] : {std::pair<const char*, json*>{"selection", &c.selection},
                          {"training", &training},
                          {"aggregation", &aggregation},
                          {"server_optimizer", &c.server_optimizer}}) {
    if (const json* section = r.member(key)) *out = *section;
  }
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  FEDCASE_RETURN_IF_ERROR(check_range("rounds", c.rounds, 1, 1e6));
  FEDCASE_RETURN_IF_ERROR(check_range("clients_per_round", c.clients_per_round, 1, 1e6));
  FEDCASE_RETURN_IF_ERROR(check_range("min_updates", c.min_updates, 1, 1e6));
  if (c.name.empty()) return invalid_argument("name is required");
  if (c.model != "cnn" && c.model != "mlp") {
    return invalid_argument("model must be \"cnn\" or \"mlp\"");
  }
  if (c.min_clients == 0) c.min_clients = c.clients_per_round;
  if (c.min_updates > c.clients_per_round) {
    return invalid_argument("min_updates must not exceed clients_per_round");
  }
  // Each section is validated by the library that owns it; building the policy and the
  // optimizer once checks their parameters too.
  auto training_params = scheduling::parse_training_params(training);
  if (!training_params.ok()) return training_params.status();
  c.training = std::move(training_params).value();
  auto overcommit = scheduling::selection_overcommit(c.selection);
  if (!overcommit.ok()) return overcommit.status();
  c.overcommit = *overcommit;
  auto policy = scheduling::make_selection_policy(c.selection, c.seed);
  if (!policy.ok()) return policy.status();
  auto aggregation_config = aggregation::parse_aggregator_config(aggregation);
  if (!aggregation_config.ok()) return aggregation_config.status();
  c.aggregation = std::move(aggregation_config).value();
  if (c.aggregation.rule != "fedavg" && c.clients_per_round > c.aggregation.max_buffered_updates) {
    return invalid_argument("clients_per_round exceeds aggregation.max_buffered_updates");
  }
  if (c.aggregation.dp_seed) return invalid_argument("aggregation.dp_seed is set per round");
  auto optimizer = aggregation::make_server_optimizer(c.server_optimizer);
  if (!optimizer.ok()) return invalid_argument("server_optimizer: " + optimizer.status().message());
  return c;
}

}  // namespace fedcase::server
