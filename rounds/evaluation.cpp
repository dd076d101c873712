#include "rounds/evaluation.h"

#include <cmath>
#include <limits>

namespace fedcase::rounds {
namespace {

using nlohmann::json;

std::string field(const std::string& name) { return "update metadata 'evaluation." + name + "'"; }

// A non-negative integer in [min, max], or an error naming `name`.
Status read_count(const json& value, const std::string& name, uint64_t min, uint64_t max,
                  uint64_t& out) {
  const bool integer =
      value.is_number_unsigned() || (value.is_number_integer() && value.get<int64_t>() >= 0);
  if (!integer || value.get<uint64_t>() < min || value.get<uint64_t>() > max) {
    return invalid_argument(field(name) + " must be an integer in [" + std::to_string(min) + ", " +
                            std::to_string(max) + "]");
  }
  out = value.get<uint64_t>();
  return ok_status();
}

// A finite number in [0, max], or an error naming `name`.
Status read_score(const json& value, const std::string& name, double max, double& out) {
  const double x = value.is_number() ? value.get<double>() : std::nan("");
  if (!std::isfinite(x) || x < 0 || x > max) {
    return invalid_argument(field(name) + " must be a finite number >= 0" +
                            (max == 1 ? std::string(" and <= 1") : std::string(" and <= 10^12")));
  }
  out = x;
  return ok_status();
}

bool valid_metric_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxEvalMetricName) return false;
  for (char ch : name) {
    const bool word = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '_';
    if (!word) return false;
  }
  return true;
}

}  // namespace

Result<EvalReport> parse_eval_report(const json& j) {
  if (!j.is_object()) return invalid_argument("update metadata 'evaluation' must be an object");
  EvalReport report;
  for (const char* required : {"model_version", "samples", "loss"}) {
    if (!j.contains(required)) return invalid_argument(field(required) + " is required");
  }
  FEDCASE_RETURN_IF_ERROR(read_count(j["model_version"], "model_version", 0,
                                     std::numeric_limits<int64_t>::max(), report.model_version));
  FEDCASE_RETURN_IF_ERROR(read_count(j["samples"], "samples", 1, kMaxEvalSamples, report.samples));
  // Losses and metrics up to 10^12: their sums over reports stay finite.
  const double unbounded = 1e12;
  FEDCASE_RETURN_IF_ERROR(read_score(j["loss"], "loss", unbounded, report.loss));
  auto metrics = j.find("metrics");
  if (metrics == j.end()) return report;
  if (!metrics->is_object()) return invalid_argument(field("metrics") + " must be an object");
  if (metrics->size() > kMaxEvalMetrics) {
    return invalid_argument(field("metrics") + " may hold at most " +
                            std::to_string(kMaxEvalMetrics) + " metrics");
  }
  for (const auto& [name, value] : metrics->items()) {
    if (!valid_metric_name(name)) {
      return invalid_argument(field("metrics") + " names must be 1 to 64 of A-Z, a-z, 0-9, _");
    }
    const double max = name == "accuracy" ? 1.0 : unbounded;
    FEDCASE_RETURN_IF_ERROR(read_score(value, "metrics." + name, max, report.metrics[name]));
  }
  return report;
}

json federated_evaluation_json(uint64_t model_version, const std::vector<EvalReport>& reports) {
  if (reports.empty()) return nullptr;
  uint64_t samples = 0;
  double loss = 0;
  std::map<std::string, std::pair<double, double>> metrics;  // name -> (weighted sum, weight)
  for (const EvalReport& r : reports) {
    const double weight = double(r.samples);
    samples += r.samples;
    loss += weight * r.loss;
    for (const auto& [name, value] : r.metrics) {
      metrics[name].first += weight * value;
      metrics[name].second += weight;
    }
  }
  json means = json::object();
  for (const auto& [name, sums] : metrics) means[name] = sums.first / sums.second;
  return {{"model_version", model_version},
          {"clients", reports.size()},
          {"samples", samples},
          {"loss", loss / double(samples)},
          {"metrics", means}};
}

std::optional<double> recorded_accuracy(const json& metrics, const std::string& target) {
  // The path to the accuracy, one object member at a time.
  const std::vector<const char*> path =
      target == "server" ? std::vector<const char*>{"test_accuracy"}
                         : std::vector<const char*>{"federated_evaluation", "metrics", "accuracy"};
  const json* value = &metrics;
  for (const char* key : path) {
    if (!value->is_object()) return std::nullopt;
    auto it = value->find(key);
    if (it == value->end()) return std::nullopt;
    value = &*it;
  }
  if (!value->is_number()) return std::nullopt;
  return value->get<double>();
}

}  // namespace fedcase::rounds
