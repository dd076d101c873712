#include "rounds/evaluation.h"

#include <map>

namespace fedcase::rounds {

using nlohmann::json;

json federated_evaluation_json(uint64_t model_version,
                               const std::vector<protocol::EvalReport>& reports) {
  if (reports.empty()) return nullptr;
  uint64_t samples = 0;
  double loss = 0;
  std::map<std::string, std::pair<double, double>> metrics;  // name -> (weighted sum, weight)
  for (const protocol::EvalReport& r : reports) {
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
