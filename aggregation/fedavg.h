#pragma once
// Streaming weighted FedAvg over flat float spans: each update is folded in as it arrives, so
// memory is one running sum regardless of how many clients contribute.
// Not thread-safe: callers serialise add() (the server holds the round's lock).

#include <cstddef>
#include <vector>

#include "common/status.h"

namespace fedcase::aggregation {

class StreamingFedAvg {
 public:
  explicit StreamingFedAvg(size_t parameter_count);

  // Folds `values` (parameter_count floats) in with `weight` (> 0, finite; e.g. sample count).
  // Rejects a size mismatch or a bad weight without changing the running sum.
  Status add(const float* values, size_t count, double weight);

  size_t updates() const { return updates_; }
  double total_weight() const { return total_weight_; }
  size_t parameter_count() const { return sum_.size(); }

  // The weighted mean of everything added so far. kConflict when nothing was added.
  Result<std::vector<float>> mean() const;

 private:
  std::vector<double> sum_;  // double: thousands of float updates sum without drift
  double total_weight_ = 0;
  size_t updates_ = 0;
};

}  // namespace fedcase::aggregation
