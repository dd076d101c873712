#include "aggregation/dp.h"

#include <cmath>
#include <string>

#include "aggregation/vector_ops.h"

namespace fedcase::aggregation {
namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

// The SplitMix64 output function: draw k of the stream keyed by `key` is mix(key + k * kGamma),
// so any coordinate's draws are computed directly, without walking the stream.
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in (0, 1]: never 0, so its logarithm is finite.
double open_unit(uint64_t bits) { return static_cast<double>((bits >> 11) + 1) * 0x1.0p-53; }

// Coordinates i and i + 1 (i even) take the two normals of one Box-Muller pair, made from
// draws i + 1 and i + 2 of the stream. `begin` is even.
void add_noise_range(float* data, size_t begin, size_t end, double stddev, uint64_t key) {
  for (size_t i = begin; i < end; i += 2) {
    const double u1 = open_unit(mix(key + (i + 1) * kGamma));
    const double u2 = open_unit(mix(key + (i + 2) * kGamma));
    const double radius = stddev * std::sqrt(-2.0 * std::log(u1));
    const double angle = kTwoPi * u2;
    data[i] += static_cast<float>(radius * std::cos(angle));
    if (i + 1 < end) data[i + 1] += static_cast<float>(radius * std::sin(angle));
  }
}

}  // namespace

Result<double> clip_factor(const UpdateValues& values, size_t n, double clip_norm,
                           WorkerPool& pool) {
  if (clip_norm <= 0) return 1.0;
  const double norm = std::sqrt(squared_norm(pool, values, n));
  if (!std::isfinite(norm)) return unprocessable("update L2 norm is not finite");
  return norm > clip_norm ? clip_norm / norm : 1.0;
}

void add_gaussian_noise(float* data, size_t n, double stddev, uint64_t seed, WorkerPool& pool) {
  const uint64_t key = mix(seed + kGamma);
  pool.for_ranges(n, kMinParallelRange / 8, [&](size_t, size_t begin, size_t end) {
    add_noise_range(data, begin, end, stddev, key);
  });
}

}  // namespace fedcase::aggregation
