#pragma once
// A client's federated evaluation of a round's base model: its scores on held-out samples,
// sent inside its update's metadata (update_meta.h, member `evaluation`). The rules below are
// the reader's; the SDK checks a report with validate_eval_report before it sends one, so an
// honest client never has its update refused for its report.
//
// Pure functions over plain values; thread-safe. Untrusted input gives a Status, never an
// exception.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace fedcase::protocol {

inline constexpr size_t kMaxEvalMetrics = 16;
inline constexpr size_t kMaxEvalMetricName = 64;
inline constexpr uint64_t kMaxEvalSamples = 1'000'000'000'000;
// The largest loss or metric a report may hold: sums over a round's reports stay finite.
inline constexpr double kMaxEvalScore = 1e12;

// One client's scores of one model.
struct EvalReport {
  uint64_t model_version = 0;  // the model scored, at most 2^63 - 1
  uint64_t samples = 0;        // held-out samples scored, 1 to kMaxEvalSamples: the weight
  double loss = 0;             // mean loss over them, finite, in [0, kMaxEvalScore]
  // Mean metrics by name (1 to 64 of [A-Za-z0-9_], at most 16), each finite, in
  // [0, kMaxEvalScore]; "accuracy" also <= 1.
  std::map<std::string, double> metrics;

  bool operator==(const EvalReport& o) const {
    return model_version == o.model_version && samples == o.samples && loss == o.loss &&
           metrics == o.metrics;
  }
  bool operator!=(const EvalReport& o) const { return !(*this == o); }
};

// {"model_version", "samples", "loss", "metrics": {name: value}}, `metrics` optional.
// kInvalidArgument naming the field (under `where`) for a missing or mistyped one, a value out
// of range or not finite, or a bad metric name. Unknown keys are ignored.
Result<EvalReport> read_eval_report(const nlohmann::json& report,
                                    const std::string& where = "evaluation");
nlohmann::json write_eval_report(const EvalReport& report);
// The reader's verdict on `report`: what read_eval_report(write_eval_report(report)) says.
Status validate_eval_report(const EvalReport& report);

}  // namespace fedcase::protocol
