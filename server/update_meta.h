#pragma once
// The statistics a client sends with its update (header X-Fedcase-Meta, docs/protocol.md).

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>

#include "common/status.h"
#include "rounds/evaluation.h"

namespace fedcase::server {

struct UpdateMeta {
  uint64_t samples = 0;  // required, > 0: the update's FedAvg weight
  double loss_sum = 0;
  double loss_sq_sum = 0;
  double compute_s = 0;
  double io_s = 0;
  double download_s = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t bytes_read = 0;  // from local storage
  // The client's federated evaluation of the base model (`evaluation`), when it sent one.
  std::optional<rounds::EvalReport> evaluation;
};

// kInvalidArgument naming the field for a missing `samples`, a negative or non-finite number,
// a count that is not a non-negative integer, or a bad `evaluation` (rounds::parse_eval_report).
// Unknown keys are ignored (newer SDKs).
Result<UpdateMeta> parse_update_meta(const nlohmann::json& meta);

}  // namespace fedcase::server
