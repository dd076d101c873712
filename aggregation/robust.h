#pragma once
// Byzantine-robust aggregation rules over a batch of buffered updates (equal-length flat float
// spans). Every rule here ignores client weights: a weight (sample count) is reported by the
// client, so honouring it would let one attacker outvote the rest.
//
//   coordinate_median   per coordinate, the median (mean of the two middle values for even n)
//   trimmed_mean        per coordinate, drop the k = floor(beta * n) smallest and k largest
//                       values and average the rest (Yin et al. 2018)
//   krum / multi_krum   score(i) = sum of squared distances from update i to its n - f - 2
//                       nearest other updates; return the mean of the m best-scored updates,
//                       m = 1 being Krum (Blanchard et al. 2017). Needs n >= 2f + 3.
//
// Work is split over coordinates on the pool. Median and trimmed mean are exact order
// statistics, so their results do not depend on the thread count; Krum's distances are summed
// per thread range, so their last bits (and, on an exact tie, the choice) may.

#include <cstddef>
#include <vector>

#include "aggregation/worker_pool.h"
#include "common/status.h"

namespace fedcase::aggregation {

// A view of n updates of parameter_count floats each; the pointed-to data must outlive calls.
// Krum compares updates by their first compared_count values (all when 0): a model's
// parameters, not its buffers.
struct UpdateBatch {
  std::vector<const float*> updates;
  size_t parameter_count = 0;
  size_t compared_count = 0;
};

// kConflict for an empty batch.
Result<std::vector<float>> coordinate_median(const UpdateBatch& batch, WorkerPool& pool);

// beta in [0, 0.5) (kInvalidArgument otherwise); kConflict for an empty batch.
Result<std::vector<float>> trimmed_mean(const UpdateBatch& batch, double beta, WorkerPool& pool);

// Squared Euclidean distances between all updates, n x n row-major, zero diagonal.
std::vector<double> pairwise_squared_distances(const UpdateBatch& batch, WorkerPool& pool);

struct KrumSelection {
  std::vector<double> scores;    // one per update, in batch order
  std::vector<size_t> selected;  // the m best-scored indices, best first (ties: lower index)
};

// Scores the batch and selects m updates. kConflict when n < 2f + 3 or n < m;
// kInvalidArgument when m is 0.
Result<KrumSelection> krum_select(const UpdateBatch& batch, size_t byzantine_f, size_t m,
                                  WorkerPool& pool);

// Unweighted mean of the updates krum_select picks; errors as krum_select.
Result<std::vector<float>> multi_krum(const UpdateBatch& batch, size_t byzantine_f, size_t m,
                                      WorkerPool& pool);

}  // namespace fedcase::aggregation
