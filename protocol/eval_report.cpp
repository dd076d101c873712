#include "protocol/eval_report.h"

#include <cmath>
#include <limits>

#include "protocol/internal.h"

namespace fedcase::protocol {
namespace {

bool valid_metric_name(const std::string& name) {
  if (name.empty() || name.size() > kMaxEvalMetricName) return false;
  for (char ch : name) {
    const bool word = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                      (ch >= '0' && ch <= '9') || ch == '_';
    if (!word) return false;
  }
  return true;
}

Status read_metrics(const nlohmann::json& metrics, const std::string& where,
                    std::map<std::string, double>& out) {
  if (!metrics.is_object()) return invalid_argument(where + " must be an object");
  if (metrics.size() > kMaxEvalMetrics) {
    return invalid_argument(where + " may hold at most " + std::to_string(kMaxEvalMetrics) +
                            " metrics");
  }
  ObjectReader r(metrics, where);
  for (const auto& item : metrics.items()) {
    const std::string& name = item.key();
    if (!valid_metric_name(name)) {
      return invalid_argument(where + " names must be 1 to 64 of A-Z, a-z, 0-9, _");
    }
    double value = 0;
    r.number(name.c_str(), value, 0, name == "accuracy" ? 1.0 : kMaxEvalScore);
    FEDCASE_RETURN_IF_ERROR(r.status());
    out[name] = value;
  }
  return ok_status();
}

}  // namespace

namespace internal {

Status read(const nlohmann::json& value, const std::string& where, EvalReport& out, Keys* keys) {
  ObjectReader r(value, where);
  r.require("model_version")
      .integer("model_version", out.model_version, 0, std::numeric_limits<int64_t>::max())
      .require("samples")
      .integer("samples", out.samples, 1, kMaxEvalSamples)
      .require("loss")
      .number("loss", out.loss, 0, kMaxEvalScore);
  if (const nlohmann::json* metrics = r.member("metrics"); metrics != nullptr && r.status().ok()) {
    r.merge(read_metrics(*metrics, r.path("metrics"), out.metrics));
  }
  return finish(r, keys);
}

}  // namespace internal

Result<EvalReport> read_eval_report(const nlohmann::json& report, const std::string& where) {
  return internal::read_message<EvalReport>(report, where);
}

nlohmann::json write_eval_report(const EvalReport& r) {
  nlohmann::json metrics = nlohmann::json::object();
  for (const auto& [name, value] : r.metrics) metrics[name] = value;
  return {{"model_version", r.model_version},
          {"samples", r.samples},
          {"loss", r.loss},
          {"metrics", metrics}};
}

Status validate_eval_report(const EvalReport& report) {
  return read_eval_report(write_eval_report(report)).status();
}

}  // namespace fedcase::protocol
