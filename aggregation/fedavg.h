#pragma once
// Streaming weighted FedAvg over flat float spans: each update is folded in as it arrives, so
// memory is one running sum (parameter_count floats) regardless of how many clients contribute;
// mean() allocates the output (one more model).
//
// Accuracy: the running sum is float32, not double. Folding is memory-bound, and a double sum
// moves twice the bytes per parameter (measured here: 0.63x of memcpy bandwidth against about
// 1.0x for float). Each fold rounds once per parameter, so the error is bounded by
// updates * 2^-24 relative to the weighted mean of |values|; measured over 1000 random updates
// it is 1.9e-7 of that mean (tests/aggregation/fedavg_test.cpp). Results do not depend on the
// thread count.
//
// Thread safety: not thread-safe; callers serialise add() (the server holds the round's lock).
// Each call is itself split across the object's worker threads.

#include <cstddef>
#include <memory>
#include <vector>

#include "aggregation/partial_sum.h"
#include "aggregation/vector_ops.h"
#include "aggregation/worker_pool.h"
#include "common/blob.h"
#include "common/status.h"

namespace fedcase::aggregation {

class StreamingFedAvg {
 public:
  // `threads` worker threads (including the caller's) split every fold.
  explicit StreamingFedAvg(size_t parameter_count, size_t threads = kDefaultThreads);
  // Shares `pool` (not null) with other users, e.g. an Aggregator that also clips and adds noise.
  StreamingFedAvg(size_t parameter_count, std::shared_ptr<WorkerPool> pool);

  // Folds `values` (parameter_count floats) in with `weight` (> 0, finite; e.g. sample count).
  // Rejects a size mismatch (kUnprocessable) or a bad weight (kInvalidArgument) without
  // changing the running sum; kResourceExhausted when the first add cannot allocate the sum.
  Status add(const UnalignedFloat* values, size_t count, double weight);

  // Folds an update in with `weight`: it counts for `weight` in total_weight() while its
  // values [0, scaled) are scaled by `scale` (finite, >= 0), e.g. the factor of norm clipping,
  // and the rest by `rest_scale` (a model's buffers, which clipping leaves alone).
  // `values` may be a compressed update, decoded a piece at a time into the sum.
  Status add_scaled(const UpdateValues& values, size_t count, double weight, double scale,
                    size_t scaled, double rest_scale);

  // Folds in a sum of `updates` updates already weighted (and clipped) by their senders, with
  // their total weight: what secure aggregation unmasks (sum_i w_i delta_i, sum_i w_i). Errors
  // as add().
  Status add_sum(const UnalignedFloat* sum, size_t count, double total_weight, size_t updates);

  size_t updates() const { return updates_; }
  double total_weight() const { return total_weight_; }
  size_t parameter_count() const { return parameter_count_; }

  // The weighted mean of everything added so far. kConflict when nothing was added.
  Result<std::vector<float>> mean() const;
  // The running sum with its weight and update count (a copy), for another aggregate to merge
  // with add_sum(). kConflict when nothing was added.
  Result<PartialSum> partial_sum() const;

 private:
  // sum += coefficient * values over [0, split) and rest_coefficient * values after it; the
  // fold counts `updates` updates of total `weight`.
  Status fold(const UpdateValues& values, size_t count, double coefficient, size_t split,
              double rest_coefficient, double weight, size_t updates);

  size_t parameter_count_;
  std::shared_ptr<WorkerPool> pool_;
  std::unique_ptr<float[]> sum_;  // sum of weight * scale * values; allocated by the first add
  double total_weight_ = 0;
  size_t updates_ = 0;
};

}  // namespace fedcase::aggregation
