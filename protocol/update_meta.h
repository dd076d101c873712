#pragma once
// The statistics a client sends with its update, as the JSON of the X-Fedcase-Meta header
// (docs/protocol.md): the update's FedAvg weight, its losses for the utility, its times and
// cache figures for the client's profile, and optionally its federated evaluation.
//
// Pure functions over plain values; thread-safe. Untrusted input gives a Status, never an
// exception.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/status.h"
#include "protocol/eval_report.h"

namespace fedcase::protocol {

struct UpdateMeta {
  uint64_t samples = 0;  // required, > 0: the update's FedAvg weight
  // Every number below is finite and >= 0; absent members read as 0.
  double loss_sum = 0;  // of the per-sample training losses
  double loss_sq_sum = 0;
  double compute_s = 0;   // training time, reads excluded
  double io_s = 0;        // reading local data
  double download_s = 0;  // downloading the model
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t bytes_read = 0;  // from local storage
  // The client's federated evaluation of the round's base model, when it sent one.
  std::optional<EvalReport> evaluation;

  bool operator==(const UpdateMeta& o) const {
    return samples == o.samples && loss_sum == o.loss_sum && loss_sq_sum == o.loss_sq_sum &&
           compute_s == o.compute_s && io_s == o.io_s && download_s == o.download_s &&
           cache_hits == o.cache_hits && cache_misses == o.cache_misses &&
           bytes_read == o.bytes_read && evaluation == o.evaluation;
  }
  bool operator!=(const UpdateMeta& o) const { return !(*this == o); }
};

// kInvalidArgument naming the field for a missing `samples` or one of 0, a negative or
// non-finite number, a count that is not a non-negative integer, or a bad `evaluation`
// (read_eval_report). Unknown keys are ignored (newer SDKs).
Result<UpdateMeta> read_update_meta(const nlohmann::json& meta);
nlohmann::json write_update_meta(const UpdateMeta& meta);

}  // namespace fedcase::protocol
