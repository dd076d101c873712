#include "secagg/quantize.h"

#include <cmath>

namespace fedcase::secagg {

Result<double> l2_clip_factor(const float* values, size_t count, double clip) {
  double sum = 0;
  for (size_t i = 0; i < count; ++i) sum += double(values[i]) * double(values[i]);
  if (!std::isfinite(sum)) return unprocessable("the update holds a non-finite value");
  const double norm = std::sqrt(sum);
  return norm > clip ? clip / norm : 1.0;
}

Status quantize(const float* values, size_t count, double multiplier, const PrgKey& rounding,
                uint64_t offset, PrgExpander& expander, uint64_t* out) {
  // The draws first (into out), then each value replaces its draw.
  FEDCASE_RETURN_IF_ERROR(expander.apply(rounding, offset, count, 4, PrgExpander::Op::kStore, out));
  constexpr double kUnit = 1.0 / 4294967296.0;  // 2^-32: a 32-bit draw as a fraction of 1
  for (size_t i = 0; i < count; ++i) {
    const double x = double(values[i]) * multiplier;
    const double low = std::floor(x);
    const double q = low + ((double(out[i]) * kUnit) < (x - low) ? 1.0 : 0.0);
    out[i] = static_cast<uint64_t>(static_cast<int64_t>(q));
  }
  return ok_status();
}

int64_t to_signed(uint64_t word, uint32_t bits) {
  if (bits >= 64) return static_cast<int64_t>(word);
  const uint64_t modulus = uint64_t(1) << bits;
  word &= modulus - 1;
  return word >= modulus / 2 ? static_cast<int64_t>(word) - static_cast<int64_t>(modulus)
                             : static_cast<int64_t>(word);
}

}  // namespace fedcase::secagg
