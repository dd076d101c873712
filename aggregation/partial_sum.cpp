#include "aggregation/partial_sum.h"

#include <cmath>

#include "aggregation/state_codec.h"

namespace fedcase::aggregation {
namespace {

constexpr std::string_view kKind = "partial_sum";

}  // namespace

std::string encode_partial_sum(const PartialSum& partial) {
  StateWriter writer(kKind);
  writer.put_floats(partial.sum);
  writer.put_doubles({partial.weight});
  writer.put_u64(partial.updates);
  return writer.finish();
}

Result<PartialSum> decode_partial_sum(std::string_view bytes, size_t parameter_count) {
  auto reader = StateReader::open(bytes, kKind);
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
  for (float v : partial.sum) {
    if (!std::isfinite(v)) return invalid_argument("a partial aggregate holds non-finite values");
  }
  partial.weight = weight[0];
  partial.updates = static_cast<size_t>(updates);
  return partial;
}

}  // namespace fedcase::aggregation
