#pragma once
// A partial aggregate: what a streaming FedAvg aggregate holds so far (its weighted sum, the
// total weight and the update count), to be merged into another aggregate of the same round.
// Streaming FedAvg is associative, so coordinator replicas each fold the updates they admit
// into their own aggregate, and the round's owner merges the others' partials into its own
// (Aggregator::add_sum) before taking the mean (docs/scaling.md, "Partial aggregates").
//
// Encoded in the saved-state envelope of state_codec.h, kind "partial_sum": the sum as floats,
// the weight as a double, the update count as a u64, with a CRC-32 over all of it.
//
// Pure; no state.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fedcase::aggregation {

struct PartialSum {
  std::vector<float> sum;  // sum_i w_i * clip(delta_i): what the aggregate's mean divides
  double weight = 0;       // sum_i w_i
  size_t updates = 0;
};

std::string encode_partial_sum(const PartialSum& partial);

// Parses a partial of a model of `parameter_count` floats. kInvalidArgument for bytes that are
// not one (bad envelope, checksum or length), another parameter count, no update, or a weight
// or sum value that is not finite (or a weight that is not positive): never half-read.
Result<PartialSum> decode_partial_sum(std::string_view bytes, size_t parameter_count);

}  // namespace fedcase::aggregation
