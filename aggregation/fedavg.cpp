#include "aggregation/fedavg.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>

#include "aggregation/validation.h"
#include "aggregation/vector_ops.h"

namespace fedcase::aggregation {

StreamingFedAvg::StreamingFedAvg(size_t parameter_count, size_t threads)
    : StreamingFedAvg(parameter_count, std::make_shared<WorkerPool>(threads)) {}

StreamingFedAvg::StreamingFedAvg(size_t parameter_count, std::shared_ptr<WorkerPool> pool)
    : parameter_count_(parameter_count), pool_(std::move(pool)) {}

Status StreamingFedAvg::add(const UnalignedFloat* values, size_t count, double weight) {
  return add_scaled(UpdateValues{values, nullptr}, count, weight, 1.0, count, 1.0);
}

Status StreamingFedAvg::add_scaled(const UpdateValues& values, size_t count, double weight,
                                   double scale, size_t scaled, double rest_scale) {
  FEDCASE_RETURN_IF_ERROR(check_update_arguments(count, parameter_count_, weight));
  return fold(values, count, weight * scale, scaled, weight * rest_scale, weight, 1);
}

Status StreamingFedAvg::add_sum(const UnalignedFloat* sum, size_t count, double total_weight,
                                size_t updates) {
  FEDCASE_RETURN_IF_ERROR(check_update_arguments(count, parameter_count_, total_weight));
  if (updates == 0) return invalid_argument("a sum of no updates");
  return fold(UpdateValues{sum, nullptr}, count, 1.0, count, 1.0, total_weight, updates);
}

Status StreamingFedAvg::fold(const UpdateValues& values, size_t count, double coefficient,
                             size_t split, double rest_coefficient, double weight,
                             size_t updates) {
  for (double c : {coefficient, rest_coefficient}) {
    if (!(c >= 0) || c > std::numeric_limits<float>::max()) {
      return invalid_argument("update weight times scale must be finite and non-negative");
    }
  }
  const float a = static_cast<float>(coefficient);
  const float rest = static_cast<float>(rest_coefficient);
  const bool first = sum_ == nullptr;
  // The first update is written rather than added: no pass to zero the sum.
  if (first) {
    sum_.reset(new (std::nothrow) float[parameter_count_]);
    if (sum_ == nullptr) return resource_exhausted("no memory for the running sum");
  }
  float* sum = sum_.get();
  // sum[begin, end) (+)= c * x, x holding the values from `begin`.
  auto apply = [&](size_t begin, size_t end, const UnalignedFloat* x, float c) {
    if (first) {
      scale_copy(sum + begin, x, c, end - begin);
    } else {
      scale_add(sum + begin, x, c, end - begin);
    }
  };
  pool_->for_ranges(count, kMinParallelRange, [&](size_t, size_t begin, size_t end) {
    for_each_piece(values, begin, end, [&](size_t from, size_t to, const UnalignedFloat* x) {
      const size_t middle = std::clamp(split, from, to);
      apply(from, middle, x, a);
      apply(middle, to, x + (middle - from), rest);
    });
  });
  total_weight_ += weight;
  updates_ += updates;
  return ok_status();
}

Result<std::vector<float>> StreamingFedAvg::mean() const {
  if (updates_ == 0) return conflict("no update was aggregated");
  std::vector<float> out(parameter_count_);
  const float inv = static_cast<float>(1.0 / total_weight_);
  const float* sum = sum_.get();
  pool_->for_ranges(parameter_count_, kMinParallelRange, [&](size_t, size_t begin, size_t end) {
    scale_copy(out.data() + begin, sum + begin, inv, end - begin);
  });
  return out;
}

Result<PartialSum> StreamingFedAvg::partial_sum() const {
  if (updates_ == 0) return conflict("no update was aggregated");
  return PartialSum{std::vector<float>(sum_.get(), sum_.get() + parameter_count_), total_weight_,
                    updates_};
}

}  // namespace fedcase::aggregation
