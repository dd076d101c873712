#include "aggregation/fedavg.h"

#include <cmath>
#include <string>

namespace fedcase::aggregation {

StreamingFedAvg::StreamingFedAvg(size_t parameter_count) : sum_(parameter_count, 0.0) {}

Status StreamingFedAvg::add(const float* values, size_t count, double weight) {
  if (count != sum_.size()) {
    return unprocessable("update has " + std::to_string(count) + " parameters, expected " +
                         std::to_string(sum_.size()));
  }
  if (!(weight > 0) || !std::isfinite(weight)) {
    return invalid_argument("update weight must be positive and finite");
  }
  for (size_t i = 0; i < count; ++i) sum_[i] += weight * values[i];
  total_weight_ += weight;
  ++updates_;
  return ok_status();
}

Result<std::vector<float>> StreamingFedAvg::mean() const {
  if (updates_ == 0) return conflict("no update was aggregated");
  std::vector<float> out(sum_.size());
  const double inv = 1.0 / total_weight_;
  for (size_t i = 0; i < sum_.size(); ++i) out[i] = static_cast<float>(sum_[i] * inv);
  return out;
}

}  // namespace fedcase::aggregation
