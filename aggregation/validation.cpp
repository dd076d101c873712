#include "aggregation/validation.h"

#include <algorithm>
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

namespace {

Status not_finite(size_t index) {
  return unprocessable("update value " + std::to_string(index) + " is not finite");
}

Status check_norm(double squares, const UpdateBounds& bounds) {
  const double norm = std::sqrt(squares);
  if (bounds.max_l2_norm > 0 && norm > bounds.max_l2_norm) {
    return unprocessable("update L2 norm " + std::to_string(norm) + " exceeds the bound " +
                         std::to_string(bounds.max_l2_norm));
  }
  return ok_status();
}

}  // namespace

Status validate_update(const ModelLayout& expected, const BlobView& update,
                       const UpdateBounds& bounds) {
  if (update.layout != expected) {
    return unprocessable("update layout [" + update.layout.describe() +
                         "] does not match the model [" + expected.describe() + "]");
  }
  if (update.first_non_finite < update.count) return not_finite(update.first_non_finite);
  if (bounds.max_l2_norm <= 0) return ok_status();
  double squares = 0;
  for_each_piece(UpdateValues::of(update), 0, update.layout.parameter_count(),
                 [&](size_t from, size_t to, const UnalignedFloat* x) {
                   squares += squared_norm(x, to - from);
                 });
  return check_norm(squares, bounds);
}

Status validate_values(const UpdateValues& values, size_t count, size_t parameters,
                       const UpdateBounds& bounds) {
  size_t bad = count;
  double squares = 0;
  for_each_piece(values, 0, count, [&](size_t from, size_t to, const UnalignedFloat* x) {
    const size_t at = first_non_finite(x, to - from);
    if (at < to - from) {
      bad = from + at;
      return false;  // nothing after it changes the answer
    }
    if (from < parameters) squares += squared_norm(x, std::min(to, parameters) - from);
    return true;
  });
  FEDCASE_RETURN_IF_ERROR(values.read_status());
  if (bad < count) return not_finite(bad);
  return check_norm(squares, bounds);
}

}  // namespace fedcase::aggregation
