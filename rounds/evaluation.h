#pragma once
// Federated evaluation (docs/protocol.md): before training, a client scores the round's base
// model on its held-out samples and sends the scores inside its update's metadata; a round's
// conclusion combines the reports of its accepted updates into sample-weighted means.
//
// Pure functions over plain values; thread-safe.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace fedcase::rounds {

inline constexpr size_t kMaxEvalMetrics = 16;
inline constexpr size_t kMaxEvalMetricName = 64;
inline constexpr uint64_t kMaxEvalSamples = 1'000'000'000'000;

// One client's scores of one model.
struct EvalReport {
  uint64_t model_version = 0;  // the model scored (must be the round's base version)
  uint64_t samples = 0;        // held-out samples scored, 1 to kMaxEvalSamples: the weight
  double loss = 0;             // mean loss over them, finite and >= 0
  // Mean metrics by name (1 to 64 of [A-Za-z0-9_], at most 16), each finite and >= 0;
  // "accuracy" also <= 1.
  std::map<std::string, double> metrics;
};

// Parses the `evaluation` member of an update's metadata:
// {"model_version", "samples", "loss", "metrics": {name: value}}, `metrics` optional.
// kInvalidArgument naming the field for a missing or mistyped one, a value out of range or not
// finite, or a bad metric name. Unknown keys are ignored, as elsewhere in the metadata.
Result<EvalReport> parse_eval_report(const nlohmann::json& report);

// A round's federated evaluation: {"model_version", "clients", "samples", "loss",
// "metrics": {name: mean}}, where `loss` and each metric are means weighted by the reports'
// samples (a metric over the reports that hold it). Null when `reports` is empty.
// `model_version`: the model all reports scored.
nlohmann::json federated_evaluation_json(uint64_t model_version,
                                         const std::vector<EvalReport>& reports);

// The accuracy a round's metrics hold for an evaluation `target`: for "server" the test-set
// accuracy of the model the round committed (`test_accuracy`), for "federated" the federated
// accuracy of the round's base model (`federated_evaluation.metrics.accuracy`). nullopt when
// the metrics hold none.
std::optional<double> recorded_accuracy(const nlohmann::json& round_metrics,
                                        const std::string& target);

}  // namespace fedcase::rounds
