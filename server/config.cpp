#include "server/config.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <stdexcept>

#include "aggregation/server_optimizer.h"
#include "scheduling/selection.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// Reads optional fields of one JSON object into typed values, collecting the first error.
class FieldReader {
 public:
  FieldReader(const json& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {
    if (!object_.is_object()) fail(prefix_.empty() ? "config must be a JSON object"
                                                   : prefix_ + " must be a JSON object");
  }

  void text(const char* key, std::string& out) {
    if (const json* v = find(key)) {
      if (v->is_string()) out = v->get<std::string>();
      else fail(name(key) + " must be a string");
    }
  }
  void number(const char* key, double& out, double min, double max) {
    if (const json* v = find(key)) {
      if (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < min ||
          v->get<double>() > max) {
        fail(name(key) + " must be a number in [" + format(min) + ", " + format(max) + "]");
      } else {
        out = v->get<double>();
      }
    }
  }
  template <class Int>
  void integer(const char* key, Int& out, double min, double max) {
    if (const json* v = find(key)) {
      if (!v->is_number_integer() || v->get<double>() < min || v->get<double>() > max) {
        fail(name(key) + " must be an integer in [" + format(min) + ", " + format(max) + "]");
      } else {
        out = v->get<Int>();
      }
    }
  }
  void object(const char* key, json& out) {
    if (const json* v = find(key)) {
      if (v->is_object()) out = *v;
      else fail(name(key) + " must be a JSON object");
    }
  }
  const Status& status() const { return status_; }
  void fail(const std::string& message) {
    if (status_.ok()) status_ = invalid_argument(message);
  }

 private:
  const json* find(const char* key) const {
    if (!object_.is_object()) return nullptr;
    auto it = object_.find(key);
    return it == object_.end() ? nullptr : &*it;
  }
  std::string name(const char* key) const { return prefix_.empty() ? key : prefix_ + "." + key; }
  static std::string format(double v) {
    std::string s = std::to_string(v);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }
  const json& object_;
  std::string prefix_;
  Status status_;
};

}  // namespace

CoordinatorConfig parse_coordinator_config(const json& j) {
  CoordinatorConfig c;
  FieldReader r(j, "");
  r.text("listen_address", c.listen_address);
  r.integer("port", c.port, 0, 65535);
  r.text("port_file", c.port_file);
  r.text("database", c.database);
  r.text("admin_token", c.admin_token);
  r.text("enrollment_token", c.enrollment_token);
  r.integer("io_threads", c.io_threads, 1, 64);
  r.integer("max_connections", c.max_connections, 1, 1e7);
  r.integer("max_json_bytes", c.max_json_bytes, 1024, 64 << 20);
  r.integer("max_upload_bytes", c.max_upload_bytes, 1024, 4.0 * (1ull << 30));
  r.number("read_timeout_s", c.read_timeout_s, 0.1, 3600);
  r.number("long_poll_max_s", c.long_poll_max_s, 0, 600);
  r.number("client_timeout_s", c.client_timeout_s, 1, 86400);
  r.number("requests_per_second", c.requests_per_second, 0.1, 1e6);
  r.text("eval_data_dir", c.eval_data_dir);
  r.integer("eval_samples", c.eval_samples, 1, 1e7);
  r.integer("torch_threads", c.torch_threads, 1, 256);
  if (!r.status().ok()) throw std::runtime_error(r.status().message());
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
  FieldReader r(j, "");
  r.text("name", c.name);
  r.text("model", c.model);
  r.integer("seed", c.seed, 0, 9.0e18);
  r.integer("rounds", c.rounds, 1, 1e6);
  r.integer("clients_per_round", c.clients_per_round, 1, 1e6);
  r.integer("min_clients", c.min_clients, 0, 1e7);
  r.integer("min_updates", c.min_updates, 1, 1e6);
  r.number("target_accuracy", c.target_accuracy, 0, 1);
  r.number("max_update_norm", c.max_update_norm, 0, 1e12);
  r.number("dp_delta", c.dp_delta, 1e-12, 0.1);
  r.object("selection", c.selection);
  r.object("server_optimizer", c.server_optimizer);
  json training = json::object(), aggregation = json::object();
  r.object("training", training);
  r.object("aggregation", aggregation);
  static const std::set<std::string> known = {
      "name", "model", "seed", "rounds", "clients_per_round", "min_clients", "min_updates",
      "target_accuracy", "max_update_norm", "dp_delta", "selection", "training",
      "aggregation", "server_optimizer"};
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!known.count(it.key())) r.fail("unknown job config key '" + it.key() + "'");
    }
  }
  FEDCASE_RETURN_IF_ERROR(r.status());
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
