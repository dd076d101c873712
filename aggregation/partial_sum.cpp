#include "aggregation/partial_sum.h"

#include <cmath>

#include "aggregation/state_codec.h"

namespace fedcase::aggregation {
namespace {

constexpr std::string_view kSumKind = "partial_sum";
constexpr std::string_view kUpdatesKind = "partial_updates";

bool all_finite(const std::vector<float>& values) {
  for (float v : values) {
    if (!std::isfinite(v)) return false;
  }
  return true;
}

}  // namespace

std::string encode_partial_sum(const PartialSum& partial) {
  StateWriter writer(kSumKind);
  writer.put_floats(partial.sum);
  writer.put_doubles({partial.weight});
  writer.put_u64(partial.updates);
  return writer.finish();
}

Result<PartialSum> decode_partial_sum(std::string_view bytes, size_t parameter_count) {
  auto reader = StateReader::open(bytes, kSumKind);
  if (!reader.ok()) return reader.status();
  PartialSum partial;
  std::vector<double> weight;
  uint64_t updates = 0;
  FEDCASE_RETURN_IF_ERROR(reader->get_floats(partial.sum));
  FEDCASE_RETURN_IF_ERROR(reader->get_doubles(weight));
  FEDCASE_RETURN_IF_ERROR(reader->get_u64(updates));
  FEDCASE_RETURN_IF_ERROR(reader->finish());
  if (partial.sum.size() != parameter_count) {
    return invalid_argument("a partial aggregate of " + std::to_string(partial.sum.size()) +
                            " values, for a model of " + std::to_string(parameter_count));
  }
  if (weight.size() != 1 || !std::isfinite(weight[0]) || !(weight[0] > 0)) {
    return invalid_argument("a partial aggregate's weight must be one finite positive number");
  }
  if (updates == 0) return invalid_argument("a partial aggregate of no update");
  if (!all_finite(partial.sum)) {
    return invalid_argument("a partial aggregate holds non-finite values");
  }
  partial.weight = weight[0];
  partial.updates = static_cast<size_t>(updates);
  return partial;
}

std::string encode_partial_updates(const std::vector<const float*>& updates,
                                   size_t parameter_count) {
  StateWriter writer(kUpdatesKind);
  writer.put_u64(updates.size());
  for (const float* update : updates) writer.put_floats(update, parameter_count);
  return writer.finish();
}

Result<std::vector<float>> decode_partial_updates(std::string_view bytes, size_t parameter_count) {
  auto reader = StateReader::open(bytes, kUpdatesKind);
  if (!reader.ok()) return reader.status();
  uint64_t updates = 0;
  FEDCASE_RETURN_IF_ERROR(reader->get_u64(updates));
  if (updates == 0) return invalid_argument("a partial of no update");
  // The reads are bounds-checked, so a forged count fails at the first update that is not there.
  std::vector<float> values;
  std::vector<float> update;
  for (uint64_t i = 0; i < updates; ++i) {
    FEDCASE_RETURN_IF_ERROR(reader->get_floats(update));
    if (update.size() != parameter_count) {
      return invalid_argument("a partial holds an update of " + std::to_string(update.size()) +
                              " values, for a model of " + std::to_string(parameter_count));
    }
    if (!all_finite(update)) return invalid_argument("a partial holds non-finite values");
    values.insert(values.end(), update.begin(), update.end());
  }
  FEDCASE_RETURN_IF_ERROR(reader->finish());
  return values;
}

}  // namespace fedcase::aggregation
