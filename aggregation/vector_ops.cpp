#include "aggregation/vector_ops.h"

#include <algorithm>
#include <vector>

#include "aggregation/worker_pool.h"

namespace fedcase::aggregation {
namespace {

constexpr size_t kLanes = 16;
constexpr size_t kBlock = 4096;

// Sum over one block of f(i), i < n <= kBlock, in kLanes independent float lanes.
template <class Term>
double lane_sum(size_t n, Term term) {
  float lanes[kLanes] = {};
  size_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (size_t k = 0; k < kLanes; ++k) lanes[k] += term(i + k);
  }
  for (; i < n; ++i) lanes[i % kLanes] += term(i);
  double total = 0;
  for (float lane : lanes) total += lane;
  return total;
}

template <class Term>
double blocked_sum(size_t n, Term term) {
  double total = 0;
  for (size_t b = 0; b < n; b += kBlock) {
    total += lane_sum(std::min(kBlock, n - b), [&](size_t i) { return term(b + i); });
  }
  return total;
}

}  // namespace

void scale_copy(float* __restrict dst, const UnalignedFloat* __restrict src, float a, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = a * src[i];
}

void scale_add(float* __restrict dst, const UnalignedFloat* __restrict src, float a, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] += a * src[i];
}

double squared_norm(const UnalignedFloat* x, size_t n) {
  return blocked_sum(n, [x](size_t i) { return x[i] * x[i]; });
}

double squared_distance(const float* x, const float* y, size_t n) {
  return blocked_sum(n, [x, y](size_t i) {
    const float d = x[i] - y[i];
    return d * d;
  });
}

double squared_norm(WorkerPool& pool, const UnalignedFloat* x, size_t n) {
  return squared_norm(pool, UpdateValues{x, nullptr}, n);
}

double squared_norm(WorkerPool& pool, const UpdateValues& update, size_t n) {
  std::vector<double> partial(pool.threads(), 0.0);
  pool.for_ranges(n, kMinParallelRange, [&](size_t part, size_t begin, size_t end) {
    for_each_piece(update, begin, end, [&](size_t from, size_t to, const UnalignedFloat* x) {
      partial[part] += squared_norm(x, to - from);
    });
  });
  double total = 0;
  for (double p : partial) total += p;
  return total;
}

}  // namespace fedcase::aggregation
