#pragma once
// Kernels over flat float spans, written so the compiler vectorises them (no aliasing between
// destination and source, fixed-width partial sums for reductions). Sources may be unaligned
// (UnalignedFloat: an update read where it lies in its blob). Results are bit-identical for
// the same inputs on the same build, whatever the thread count, except where noted.

#include <cstddef>

#include "common/blob.h"

namespace fedcase::aggregation {

class WorkerPool;

// dst[i] = a * src[i]
void scale_copy(float* dst, const UnalignedFloat* src, float a, size_t n);
// dst[i] += a * src[i]
void scale_add(float* dst, const UnalignedFloat* src, float a, size_t n);

// Sum of squares and squared Euclidean distance: float differences and squares accumulated in
// 16 float lanes per 4096-element block, blocks summed in double.
double squared_norm(const UnalignedFloat* x, size_t n);
double squared_distance(const float* x, const float* y, size_t n);

// squared_norm split across the pool; the partial sums depend on the thread count.
double squared_norm(WorkerPool& pool, const UnalignedFloat* x, size_t n);

// Smallest range worth handing to another thread: below it, waking a worker costs more than
// streaming the data.
inline constexpr size_t kMinParallelRange = size_t{1} << 15;

}  // namespace fedcase::aggregation
