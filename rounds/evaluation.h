#pragma once
// Federated evaluation (docs/protocol.md): before training, a client scores the round's base
// model on its held-out samples and sends the scores inside its update's metadata
// (protocol/eval_report.h); a round's conclusion combines the reports of its accepted updates
// into sample-weighted means.
//
// Pure functions over plain values; thread-safe.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "protocol/eval_report.h"

namespace fedcase::rounds {

// A round's federated evaluation: {"model_version", "clients", "samples", "loss",
// "metrics": {name: mean}}, where `loss` and each metric are means weighted by the reports'
// samples (a metric over the reports that hold it). Null when `reports` is empty.
// `model_version`: the model all reports scored.
nlohmann::json federated_evaluation_json(uint64_t model_version,
                                         const std::vector<protocol::EvalReport>& reports);

// The accuracy a round's metrics hold for an evaluation `target`: for "server" the test-set
// accuracy of the model the round committed (`test_accuracy`), for "federated" the federated
// accuracy of the round's base model (`federated_evaluation.metrics.accuracy`). nullopt when
// the metrics hold none.
std::optional<double> recorded_accuracy(const nlohmann::json& round_metrics,
                                        const std::string& target);

}  // namespace fedcase::rounds
