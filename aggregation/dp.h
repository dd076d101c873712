#pragma once
// Norm clipping (used by every aggregation rule when configured) and the Gaussian noise of
// central differential privacy: each client update is clipped to L2 norm C, the clipped
// updates are summed with equal weights, and N(0, (z * C)^2) noise is added to every
// coordinate of the sum (z: the noise multiplier). rdp_accountant.h turns (z, sampling rate,
// rounds) into the epsilon spent.
//
// The generator is counter-based SplitMix64 with Box-Muller transforms, chosen for speed and
// reproducibility across platforms; it is not a cryptographic generator, and the noise is
// rounded to float32 when added. Both are documented limits (docs/aggregation.md).

#include <cstddef>
#include <cstdint>

#include "aggregation/vector_ops.h"
#include "aggregation/worker_pool.h"
#include "common/blob.h"
#include "common/status.h"

namespace fedcase::aggregation {

// min(1, clip_norm / ||values||_2): the factor that brings the update within L2 norm
// clip_norm; 1 when clip_norm is 0 (clipping off) or the update is zero. kUnprocessable when
// the norm is not finite.
Result<double> clip_factor(const UpdateValues& values, size_t n, double clip_norm,
                           WorkerPool& pool);

// Adds independent N(0, stddev^2) noise to data[0..n). The noise at each coordinate is a pure
// function of (seed, index) (counter-based draws), so it does not depend on the thread count,
// and a second call with the same seed adds the same noise. Callers must use a fresh seed for
// every release.
void add_gaussian_noise(float* data, size_t n, double stddev, uint64_t seed, WorkerPool& pool);

}  // namespace fedcase::aggregation
