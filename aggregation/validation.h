#pragma once
// Checks an update before it may touch any aggregate: same layout as the round's model,
// every value finite, the L2 norm of its parameters (not its buffers) within the job's bound.

#include "aggregation/vector_ops.h"
#include "common/blob.h"
#include "common/status.h"

namespace fedcase::aggregation {

struct UpdateBounds {
  double max_l2_norm = 0;  // 0 disables the norm check
};

// kUnprocessable with a message naming the first problem found; OK when the update may be used.
Status validate_update(const ModelLayout& expected, const BlobView& update,
                       const UpdateBounds& bounds);
// validate_update's checks of the values, for an update whose layout is known to be the
// model's and whose values are read a piece at a time (`values`: `count` of them, the first
// `parameters` the parameters), in one pass. Errors as validate_update's, or the reader's.
Status validate_values(const UpdateValues& values, size_t count, size_t parameters,
                       const UpdateBounds& bounds);

// The checks every aggregate makes before reading an update: `count` must equal
// `parameter_count` (kUnprocessable) and `weight` must be positive and finite
// (kInvalidArgument).
Status check_update_arguments(size_t count, size_t parameter_count, double weight);

// L2 norm of `n` finite floats (squared_norm of vector_ops.h).
double l2_norm(const UnalignedFloat* values, size_t n);

}  // namespace fedcase::aggregation
