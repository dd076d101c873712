#include "aggregation/validation.h"

#include <cmath>
#include <string>

#include "aggregation/vector_ops.h"

namespace fedcase::aggregation {

double l2_norm(const UnalignedFloat* values, size_t n) {
  return std::sqrt(squared_norm(values, n));
}

Status check_update_arguments(size_t count, size_t parameter_count, double weight) {
  if (count != parameter_count) {
    return unprocessable("update has " + std::to_string(count) + " parameters, expected " +
                         std::to_string(parameter_count));
  }
  if (!(weight > 0) || !std::isfinite(weight)) {
    return invalid_argument("update weight must be positive and finite");
  }
  return ok_status();
}

Status validate_update(const ModelLayout& expected, const BlobView& update,
                       const UpdateBounds& bounds) {
  if (update.layout != expected) {
    return unprocessable("update layout [" + update.layout.describe() +
                         "] does not match the model [" + expected.describe() + "]");
  }
  if (update.first_non_finite < update.count) {
    return unprocessable("update value " + std::to_string(update.first_non_finite) +
                         " is not finite");
  }
  if (bounds.max_l2_norm > 0) {
    double squares = 0;
    for_each_piece(UpdateValues::of(update), 0, update.layout.parameter_count(),
                   [&](size_t from, size_t to, const UnalignedFloat* x) {
                     squares += squared_norm(x, to - from);
                   });
    const double norm = std::sqrt(squares);
    if (norm > bounds.max_l2_norm) {
      return unprocessable("update L2 norm " + std::to_string(norm) + " exceeds the bound " +
                           std::to_string(bounds.max_l2_norm));
    }
  }
  return ok_status();
}

}  // namespace fedcase::aggregation
