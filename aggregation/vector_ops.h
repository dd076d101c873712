#pragma once
// Kernels over flat float spans, written so the compiler vectorises them (no aliasing between
// destination and source, fixed-width partial sums for reductions). Sources may be unaligned
// (UnalignedFloat: an update read where it lies in its blob). Results are bit-identical for
// the same inputs on the same build, whatever the thread count, except where noted.

#include <cstddef>
#include <type_traits>

#include "common/blob.h"
#include "common/status.h"

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

// Values that lie outside the process's memory (an upload session's update in its spool
// file), copied out a piece at a time. A read that fails leaves zeros and is remembered: a
// pass over the values is only good when failure() is OK after it.
class ValueReader {
 public:
  virtual ~ValueReader() = default;
  // Writes the values [begin, end) to `out`. Called from several threads at once.
  virtual void read(size_t begin, size_t end, float* out) const = 0;
  // The first failed read's error; OK while none failed.
  virtual Status failure() const = 0;
};

// An update's values to read: `dense` floats where they lie, or, when that is null, the values
// of `compressed` (an 8-bit or sparse blob, common/blob.h) decoded a piece at a time, or those
// `reader` copies out a piece at a time, so no dense copy of the update is ever made. Points
// into data it does not own.
struct UpdateValues {
  const UnalignedFloat* dense = nullptr;
  const BlobView* compressed = nullptr;
  const ValueReader* reader = nullptr;
  // The values of a checked blob, of any encoding.
  static UpdateValues of(const BlobView& view) {
    return view.encoding == ValueEncoding::kFloat32 ? UpdateValues{view.values, nullptr}
                                                    : UpdateValues{nullptr, &view};
  }
  // OK, or the reader's failure: whether a pass over the values read what they hold.
  Status read_status() const { return reader != nullptr ? reader->failure() : ok_status(); }
};

// Values decoded at a time from a compressed update: 16 KiB, in the L1 cache.
inline constexpr size_t kDecodePiece = 4096;

// Calls fn(begin, end, values) over pieces covering [begin, end) of `update`, `values` holding
// the piece's values (the update's own floats when it is dense, else a decoded or read copy).
// An `fn` that returns bool stops the pass by returning false.
template <class Fn>
void for_each_piece(const UpdateValues& update, size_t begin, size_t end, Fn&& fn) {
  if (update.dense != nullptr) {
    fn(begin, end, update.dense + begin);
    return;
  }
  float piece[kDecodePiece];
  for (size_t at = begin; at < end; at += kDecodePiece) {
    const size_t stop = at + kDecodePiece < end ? at + kDecodePiece : end;
    if (update.compressed != nullptr) {
      decode_values(*update.compressed, at, stop, piece);
    } else {
      update.reader->read(at, stop, piece);
    }
    const auto* values = static_cast<const UnalignedFloat*>(piece);
    if constexpr (std::is_same_v<decltype(fn(at, stop, values)), bool>) {
      if (!fn(at, stop, values)) return;
    } else {
      fn(at, stop, values);
    }
  }
}

// squared_norm split across the pool; the partial sums depend on the thread count.
double squared_norm(WorkerPool& pool, const UnalignedFloat* x, size_t n);
// squared_norm of the first n values of `update`, split across the pool.
double squared_norm(WorkerPool& pool, const UpdateValues& update, size_t n);

// Smallest range worth handing to another thread: below it, waking a worker costs more than
// streaming the data.
inline constexpr size_t kMinParallelRange = size_t{1} << 15;

}  // namespace fedcase::aggregation
