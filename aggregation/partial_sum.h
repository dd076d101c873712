#pragma once
// Partial aggregates: what one coordinator replica's aggregate of a round holds, to be merged
// into the round owner's aggregate (Aggregator::partial / merge_partial; docs/scaling.md,
// "Partial aggregates"). Two encodings, both in the saved-state envelope of state_codec.h
// (with a CRC-32 over all of it):
//
//   partial_sum      streaming FedAvg is associative, so a replica's partial is its weighted
//                    sum (floats), the total weight (a double) and the update count (a u64):
//                    one model's size whatever the count
//   partial_updates  the buffered rules (median, trimmed mean, Krum) need every update, so a
//                    replica's partial is each update it holds, clipped: the update count (a
//                    u64), then each update's floats
//
// Pure; no state.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fedcase::aggregation {

// A partial ready to store: its encoding, and the weight and update count it holds.
struct EncodedPartial {
  std::string bytes;
  double weight = 0;
  size_t updates = 0;
};

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

// Encodes `updates`, each of `parameter_count` floats (which must outlive the call).
std::string encode_partial_updates(const std::vector<const float*>& updates,
                                   size_t parameter_count);

// Parses the updates of a model of `parameter_count` floats, returned one after another
// (their count is size / parameter_count). kInvalidArgument for bytes that are not such a
// partial (bad envelope, checksum or length), an update of another parameter count, no
// update, or a non-finite value: never half-read.
Result<std::vector<float>> decode_partial_updates(std::string_view bytes, size_t parameter_count);

}  // namespace fedcase::aggregation
