#include "aggregation/robust.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "aggregation/vector_ops.h"

namespace fedcase::aggregation {
namespace {

// Bytes of one tile of the batch: tile_width coordinates from every update, small enough to
// stay in a core's L2 cache while its columns are reduced.
constexpr size_t kTileBytes = 256 * 1024;
// Coordinates per block when summing pairwise distances (4 KiB of each update).
constexpr size_t kDistanceBlock = 1024;

// out[j] = reduce(column j, n): the values of coordinate j across the batch, in scratch memory
// the reducer may reorder. Transposes tile by tile so every update is read sequentially.
template <class Reduce>
std::vector<float> reduce_columns(const UpdateBatch& batch, WorkerPool& pool, Reduce reduce) {
  const size_t n = batch.updates.size();
  const size_t tile_width = std::max<size_t>(16, kTileBytes / sizeof(float) / n) & ~size_t{15};
  std::vector<float> out(batch.parameter_count);
  std::vector<std::vector<float>> tiles(pool.threads(), std::vector<float>(n * tile_width));
  std::vector<std::vector<float>> columns(pool.threads(), std::vector<float>(n));
  pool.for_ranges(batch.parameter_count, tile_width, [&](size_t part, size_t begin, size_t end) {
    float* tile = tiles[part].data();
    float* column = columns[part].data();
    for (size_t t = begin; t < end; t += tile_width) {
      const size_t width = std::min(tile_width, end - t);
      for (size_t u = 0; u < n; ++u) {
        std::memcpy(tile + u * width, batch.updates[u] + t, width * sizeof(float));
      }
      for (size_t j = 0; j < width; ++j) {
        for (size_t u = 0; u < n; ++u) column[u] = tile[u * width + j];
        out[t + j] = reduce(column, n);
      }
    }
  });
  return out;
}

Status empty_batch() { return conflict("no update was aggregated"); }

// Ranges this short are finished by std::nth_element.
constexpr size_t kSmallSelect = 16;

float median_of_three(float a, float b, float c) {
  return std::max(std::min(a, b), std::min(std::max(a, b), c));
}

// Moves the values of a[lo, hi) that satisfy `goes_left` to its front, keeping the order
// otherwise unspecified; returns the end of that front part. No data-dependent branch: each
// value is swapped into place and the boundary advances by the comparison's result.
template <class GoesLeft>
size_t partition_branch_free(float* a, size_t lo, size_t hi, GoesLeft goes_left) {
  size_t boundary = lo;
  for (size_t i = lo; i < hi; ++i) {
    const float x = a[i];
    const size_t left = goes_left(x) ? 1 : 0;
    a[i] = a[boundary];
    a[boundary] = x;
    boundary += left;
  }
  return boundary;
}

// Like std::nth_element(a, a + k, a + n): a quickselect with branch-free partitions, which
// on the random-looking columns of a batch is two to three times as fast as
// std::nth_element with its mispredicted branches. Values equal to the pivot are split off, so
// duplicates cannot stall it, and after 2 * log2(n) rounds it hands the rest to std::nth_element,
// so hostile values cannot make it quadratic.
void select_kth(float* a, size_t n, size_t k) {
  size_t lo = 0, hi = n;
  int rounds_left = 0;
  for (size_t m = n; m > 0; m >>= 1) rounds_left += 2;
  while (hi - lo > kSmallSelect && rounds_left-- > 0) {
    const float pivot = median_of_three(a[lo], a[lo + (hi - lo) / 2], a[hi - 1]);
    const size_t less_end =
        partition_branch_free(a, lo, hi, [pivot](float x) { return x < pivot; });
    if (k < less_end) {
      hi = less_end;
      continue;
    }
    const size_t equal_end =
        partition_branch_free(a, less_end, hi, [pivot](float x) { return x <= pivot; });
    if (k < equal_end) return;  // a[k] == pivot, smaller values before it, larger after
    lo = equal_end;
  }
  std::nth_element(a + lo, a + k, a + hi);
}

}  // namespace

Result<std::vector<float>> coordinate_median(const UpdateBatch& batch, WorkerPool& pool) {
  if (batch.updates.empty()) return empty_batch();
  return reduce_columns(batch, pool, [](float* column, size_t count) {
    const size_t mid = count / 2;
    select_kth(column, count, mid);
    if (count % 2 == 1) return column[mid];
    float lower = column[0];
    for (size_t u = 1; u < mid; ++u) lower = std::max(lower, column[u]);
    return static_cast<float>((double{lower} + column[mid]) / 2);
  });
}

Result<std::vector<float>> trimmed_mean(const UpdateBatch& batch, double beta, WorkerPool& pool) {
  if (!(beta >= 0 && beta < 0.5)) return invalid_argument("trim_beta must be in [0, 0.5)");
  if (batch.updates.empty()) return empty_batch();
  const size_t n = batch.updates.size();
  const size_t k = static_cast<size_t>(std::floor(beta * static_cast<double>(n)));
  return reduce_columns(batch, pool, [k](float* column, size_t count) {
    if (k > 0) {
      select_kth(column, count, k);
      select_kth(column + k, count - k, count - 2 * k);
    }
    double sum = 0;
    for (size_t u = k; u < count - k; ++u) sum += column[u];
    return static_cast<float>(sum / static_cast<double>(count - 2 * k));
  });
}

std::vector<double> pairwise_squared_distances(const UpdateBatch& batch, WorkerPool& pool) {
  const size_t n = batch.updates.size();
  std::vector<std::vector<double>> partial(pool.threads(), std::vector<double>(n * n, 0.0));
  const size_t compared = batch.compared_count > 0 ? batch.compared_count : batch.parameter_count;
  pool.for_ranges(
      compared, kMinParallelRange, [&](size_t part, size_t begin, size_t end) {
        double* d = partial[part].data();
        for (size_t b = begin; b < end; b += kDistanceBlock) {
          const size_t width = std::min(kDistanceBlock, end - b);
          for (size_t i = 0; i < n; ++i) {
            for (size_t j = i + 1; j < n; ++j) {
              d[i * n + j] += squared_distance(batch.updates[i] + b, batch.updates[j] + b, width);
            }
          }
        }
      });
  std::vector<double> dist(n * n, 0.0);
  for (const auto& p : partial) {
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = i + 1; j < n; ++j) dist[i * n + j] += p[i * n + j];
    }
  }
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) dist[j * n + i] = dist[i * n + j];
  }
  return dist;
}

Result<KrumSelection> krum_select(const UpdateBatch& batch, size_t byzantine_f, size_t m,
                                  WorkerPool& pool) {
  const size_t n = batch.updates.size();
  if (n < 2 * byzantine_f + 3) {
    return conflict("krum with byzantine_f=" + std::to_string(byzantine_f) + " needs at least " +
                    std::to_string(2 * byzantine_f + 3) + " updates, got " + std::to_string(n));
  }
  if (m == 0) return invalid_argument("multi_krum_m must be at least 1");
  if (n < m) {
    return conflict("multi_krum_m=" + std::to_string(m) + " exceeds the " + std::to_string(n) +
                    " updates received");
  }
  const std::vector<double> dist = pairwise_squared_distances(batch, pool);
  const size_t neighbours = n - byzantine_f - 2;
  KrumSelection selection;
  selection.scores.resize(n);
  std::vector<double> others;
  for (size_t i = 0; i < n; ++i) {
    others.clear();
    for (size_t j = 0; j < n; ++j) {
      if (j != i) others.push_back(dist[i * n + j]);
    }
    std::nth_element(others.begin(), others.begin() + (neighbours - 1), others.end());
    selection.scores[i] = std::accumulate(others.begin(), others.begin() + neighbours, 0.0);
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return selection.scores[a] < selection.scores[b]; });
  selection.selected.assign(order.begin(), order.begin() + m);
  return selection;
}

Result<std::vector<float>> multi_krum(const UpdateBatch& batch, size_t byzantine_f, size_t m,
                                      WorkerPool& pool) {
  auto selection = krum_select(batch, byzantine_f, m, pool);
  if (!selection.ok()) return selection.status();
  std::vector<float> out(batch.parameter_count);
  const float inv = 1.0f / static_cast<float>(m);
  pool.for_ranges(batch.parameter_count, kMinParallelRange, [&](size_t, size_t begin, size_t end) {
    const std::vector<size_t>& picked = selection->selected;
    scale_copy(out.data() + begin, batch.updates[picked[0]] + begin, inv, end - begin);
    for (size_t s = 1; s < picked.size(); ++s) {
      scale_add(out.data() + begin, batch.updates[picked[s]] + begin, inv, end - begin);
    }
  });
  return out;
}

}  // namespace fedcase::aggregation
