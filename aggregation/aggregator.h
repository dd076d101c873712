#pragma once
// One interface over every aggregation rule, so a job's config picks the rule:
//
//   fedavg        streaming weighted mean (fedavg.h): no buffering, memory one model, plus
//                 optional central DP (equal weights, clipping, Gaussian noise; dp.h)
//   median        coordinate-wise median                  } buffered (robust.h): memory is
//   trimmed_mean  coordinate-wise beta-trimmed mean       } one model per update received,
//   krum          Krum                                    } at most max_buffered_updates;
//   multi_krum    Multi-Krum                              } the next add is refused
//
// Every rule can clip each update to L2 norm clip_norm before it is used. Robust rules
// ignore client weights (see robust.h); fedavg with DP counts each client once.
//
// An update may end with the deltas of the model's buffers (BatchNorm's running statistics;
// common/blob.h, TensorKind), which are not trained by gradients: clipping measures and
// scales the parameters only, DP noise is added to the parameters only, Krum compares the
// parameters only, and every rule averages the buffers as it averages the parameters (fedavg:
// the weighted mean; median and trimmed mean: per coordinate; Krum: the chosen updates').
//
// Thread safety: not thread-safe; callers serialise calls (the server holds the round's lock).
// Each call is itself split across the aggregator's worker threads.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "aggregation/partial_sum.h"
#include "aggregation/vector_ops.h"
#include "aggregation/worker_pool.h"
#include "common/blob.h"
#include "common/status.h"

namespace fedcase::aggregation {

// The values of each update: `values` floats, of which the first `parameters` are the
// model's parameters and the rest its buffers. Converts from a count of parameters alone.
struct UpdateShape {
  UpdateShape(size_t values) : values(values), parameters(values) {}  // NOLINT: implicit
  UpdateShape(size_t values, size_t parameters) : values(values), parameters(parameters) {}
  size_t values;
  size_t parameters;
};

class Aggregator {
 public:
  virtual ~Aggregator() = default;
  virtual std::string name() const = 0;  // the config's rule
  virtual size_t parameter_count() const = 0;
  virtual size_t updates() const = 0;  // updates accepted so far

  // Takes in one update that passed validate_update() (finite values), of parameter_count
  // floats at any alignment (read, never kept), with its weight (> 0, finite; e.g. sample count).
  // Refuses it, leaving the aggregate unchanged: kUnprocessable for a size mismatch or a non-finite
  // norm, kInvalidArgument for a bad weight, kResourceExhausted when a buffered rule already holds
  // max_buffered_updates.
  Status add(const UnalignedFloat* values, size_t count, double weight) {
    return add(values, count, weight, 1.0);
  }
  // As add(), with the update's values scaled by `discount` (in (0, 1]): it still counts for
  // its whole weight in the mean, so a discount shrinks its part of the step (an asynchronous
  // update's staleness weight, FedBuff). Only fedavg takes a discount below 1; the buffered
  // rules refuse one (kInvalidArgument), as does every rule a discount outside (0, 1].
  Status add(const UnalignedFloat* values, size_t count, double weight, double discount) {
    return add(UpdateValues{values, nullptr}, count, weight, discount);
  }
  // As add(), with the update as it arrived: a checked blob of any encoding (common/blob.h),
  // whose compressed values are decoded a piece at a time into the fold (fedavg) or into the
  // buffered copy (the other rules): no dense copy is made of a compressed update otherwise.
  Status add(const BlobView& update, double weight, double discount) {
    return add(UpdateValues::of(update), update.count, weight, discount);
  }
  // As add(), with the values where they lie: in memory, compressed, or copied out a piece at a
  // time by a reader (vector_ops.h). A read that fails refuses the update with its error,
  // leaving the aggregate unchanged, except when it fails while fedavg folds the update in:
  // the sum then holds part of it, and every later call answers kInternal (the round cannot
  // use this aggregate).
  virtual Status add(const UpdateValues& values, size_t count, double weight,
                     double discount) = 0;

  // Takes in a sum of `updates` updates that their senders weighted and clipped themselves
  // (secure aggregation's unmasked sum_i w_i clip(delta_i), of parameter_count floats), with
  // their total weight sum_i w_i: the coordinator never held the updates, so nothing is
  // clipped here. Only fedavg takes one (kInvalidArgument for the other rules, which need each
  // update); with DP every sender must have weighed 1 (total_weight == updates), so the noise
  // stays calibrated to a clip_norm sensitivity. Other errors as add().
  virtual Status add_sum(const UnalignedFloat* sum, size_t count, double total_weight,
                         size_t updates) {
    return invalid_argument("aggregation.rule " + name() +
                            " needs each update: it cannot take a secure aggregate's sum");
  }

  // What has been added so far as a partial aggregate (partial_sum.h), for an aggregate of the
  // same config and model to take in with merge_partial(): merging the partials of disjoint
  // sets of updates gives the aggregate of their union (fedavg: up to float rounding, the sum's
  // order changes). fedavg's partial is its clipped, weighted sum before any DP noise (one
  // model's size); a buffered rule's holds each update, clipped (one model per update).
  // kConflict when nothing was added.
  virtual Result<EncodedPartial> partial() const = 0;

  // Takes in a partial that partial() wrote, holding exactly `updates` updates. Refuses it,
  // leaving the aggregate unchanged: kInvalidArgument for bytes that are not this rule's
  // partial of this model (see partial_sum.h), another update count, or (fedavg with DP) a
  // weight that is not one per update; kResourceExhausted when a buffered rule would hold more
  // than max_buffered_updates.
  virtual Status merge_partial(std::string_view bytes, size_t updates) = 0;

  // The aggregate of every update added so far; calling it again gives the same values (the
  // DP noise comes from the configured seed). kConflict when nothing was added or when the
  // rule needs more updates than it has (Krum: 2f + 3; Multi-Krum: also m).
  virtual Result<std::vector<float>> result() const = 0;
};

// A parsed aggregation config. JSON keys are the member names; every rule accepts "rule",
// "clip_norm" and "threads", plus the keys listed against it. Unknown or inapplicable keys
// are rejected.
struct AggregatorConfig {
  std::string rule = "fedavg";
  double clip_norm = 0;                // L2 bound per update; 0: no clipping
  uint64_t threads = kDefaultThreads;  // 1..64, including the calling thread
  // median, trimmed_mean, krum, multi_krum: refuse the update after this many (>= 1).
  uint64_t max_buffered_updates = 1000;
  double trim_beta = 0.1;          // trimmed_mean: fraction trimmed at each end, [0, 0.5)
  uint64_t byzantine_f = 0;        // krum, multi_krum: Byzantine updates tolerated, < max_buffered
  uint64_t multi_krum_m = 0;       // multi_krum: updates averaged, <= max_buffered; 0: n - f
  double dp_noise_multiplier = 0;  // fedavg: z > 0 turns on central DP; needs clip_norm > 0
  // fedavg with DP: the noise seed. Set a fresh one every round (for example derived from the
  // job's seed and the round index) to replay a round exactly; absent, the OS RNG picks one.
  std::optional<uint64_t> dp_seed;
  // median, trimmed_mean, krum, multi_krum: the folder of the files that hold their copies of
  // the updates, one file with no name per update (common/spool_file.h); empty: the system's
  // temporary folder. Never read from JSON: the coordinator sets its spool_dir.
  std::string buffer_dir;
};

// kInvalidArgument, naming the key, for a malformed config.
Result<AggregatorConfig> parse_aggregator_config(const nlohmann::json& config);

// Builds the aggregator for one round of a model whose updates have `shape`. kInvalidArgument
// for a shape with more parameters than values.
Result<std::unique_ptr<Aggregator>> make_aggregator(const AggregatorConfig& config,
                                                    UpdateShape shape);
Result<std::unique_ptr<Aggregator>> make_aggregator(const nlohmann::json& config,
                                                    UpdateShape shape);

}  // namespace fedcase::aggregation
