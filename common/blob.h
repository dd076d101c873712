#pragma once
// The wire and storage format of a model or a model update: a flat, versioned binary blob.
//
//   offset  field
//   0       magic "FCMB"
//   4       u32 format version (kBlobFormatVersion)
//   8       u64 model version
//   16      u32 value encoding (ValueEncoding; 1 = float32)
//   20      u32 tensor count
//   24      per tensor: u16 name length, name bytes, u32 rank, rank x u64 dims, u8 kind
//   ...     u64 element count (must equal the sum of the tensors' products)
//   ...     the values, as their encoding says: element count x float32, or an update's
//           compressed values (8-bit blocks, or the non-zero values with their indices)
//   end-4   u32 CRC-32 of every preceding byte
//
// All integers are little-endian. Reading needs no torch: the server validates, aggregates
// and stores blobs as flat float spans. A tensor's kind (TensorKind) says whether it is a
// parameter or a buffer; the parameters come first. Format version 1, which had no kinds
// (every tensor a parameter), is still read.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fedcase {

inline constexpr uint32_t kBlobFormatVersion = 2;
// How a blob's values are stored. A model is always kFloat32; an update may be compressed
// (docs/aggregation.md, "Compressed updates"). With n the element count:
enum class ValueEncoding : uint32_t {
  kFloat32 = 1,     // n x float32
  kQuantized8 = 2,  // u32 block size B (1 to 2^16); per block of B values (the last may be
                    // shorter) float32 low, float32 step; then n x u8 code. Value i is
                    // low + step * code[i] of its block i / B.
  kSparse = 3,      // u64 stored count m <= n (n < 2^32); m x u32 index, strictly increasing
                    // and < n; m x float32 value. The values at other indices are zero.
};
inline constexpr size_t kMaxTensors = 4096;
inline constexpr size_t kMaxTensorNameBytes = 256;
inline constexpr size_t kMaxTensorRank = 8;

// What a tensor of a model is. A parameter is trained by gradients; a buffer is state the
// model updates itself (BatchNorm's running_mean and running_var: kFloatBuffer; its
// num_batches_tracked, an int64 counter carried as float32, exact up to 2^24: kIntegerBuffer).
// Buffers are averaged, never stepped by a server optimizer (docs/aggregation.md, "Buffers").
enum class TensorKind : uint8_t { kParameter = 0, kFloatBuffer = 1, kIntegerBuffer = 2 };

// "parameter", "float buffer", "integer buffer".
const char* tensor_kind_name(TensorKind kind);

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> shape;
  TensorKind kind = TensorKind::kParameter;
  uint64_t element_count() const;
  bool operator==(const TensorSpec& other) const {
    return name == other.name && shape == other.shape && kind == other.kind;
  }
};

// The names, shapes and kinds of a model's tensors, in order: its parameters, then its
// buffers. Two blobs can be combined only when their layouts are equal.
struct ModelLayout {
  std::vector<TensorSpec> tensors;
  uint64_t element_count() const;
  // The values of the parameters, which come first: element_count() when there are no buffers.
  uint64_t parameter_count() const;
  bool operator==(const ModelLayout& other) const { return tensors == other.tensors; }
  bool operator!=(const ModelLayout& other) const { return !(*this == other); }
  std::string describe() const;  // "conv1.weight[16,1,5,5], ..." for error messages
  // The first way `other` differs from this layout, for people: "tensor 'fc1.weight' is
  // [128,784] here and [64,1568] there", "there is no tensor 'fc2.bias'", "tensor 'x' is only
  // there", "tensor 'b' comes where 'a' is here"; empty when the layouts are equal.
  std::string first_difference(const ModelLayout& other) const;
};

struct ModelBlob {
  uint64_t model_version = 0;
  ModelLayout layout;
  std::vector<float> data;  // layout.element_count() values, tensors concatenated in order
};

// One float32 of a blob's values where it lies in the encoded bytes, at any alignment (a GCC
// and Clang type attribute). Kernels that take `const UnalignedFloat*` read such values in
// place, and any float array too.
typedef float UnalignedFloat __attribute__((aligned(1), may_alias));

// A checked blob whose values stay in the encoded bytes: no copy, valid while they live.
// Read the values of any encoding with decode_values; a kFloat32 blob's also lie at `values`.
struct BlobView {
  uint64_t model_version = 0;
  ModelLayout layout;
  ValueEncoding encoding = ValueEncoding::kFloat32;
  const UnalignedFloat* values = nullptr;  // kFloat32: the values; null for other encodings
  size_t count = 0;             // layout.element_count()
  size_t first_non_finite = 0;  // index of the first NaN or infinite value; count when none
  // kQuantized8: the block size, the (low, step) pairs and the codes.
  uint32_t block = 0;
  const UnalignedFloat* block_scales = nullptr;
  const uint8_t* codes = nullptr;
  // kSparse: the stored values and their indices (u32, at any alignment).
  size_t stored = 0;
  const char* indices = nullptr;
  const UnalignedFloat* stored_values = nullptr;
};

// Writes the values [begin, end) of `view` (end <= view.count) to `out`, whatever their
// encoding. Reads only where view_blob checked.
void decode_values(const BlobView& view, size_t begin, size_t end, float* out);

// Serialises `blob`. Precondition: blob.data.size() == blob.layout.element_count().
std::string encode_blob(const ModelBlob& blob);
// The byte at which the values of a blob of `layout` start in format kBlobFormatVersion (the
// size of its header, up to and including the element count), whatever its encoding.
uint64_t blob_values_offset(const ModelLayout& layout);
// The first bytes of a float32 blob of `layout` at `model_version` in format
// kBlobFormatVersion, up to its values (blob_values_offset(layout) of them): what an update
// read a piece at a time is checked against instead of view_blob's parse.
std::string float_blob_header(const ModelLayout& layout, uint64_t model_version);

// Serialises `blob` with its values quantised to 8 bits (kQuantized8) in blocks of `block`
// (1 to 2^16; 256 makes 0.26x the float32 bytes): each value rounds, at random, to one of the
// two neighbouring of 256 levels evenly spaced between its block's smallest and largest
// value, the upper with probability equal to its distance from the lower in steps. The
// rounding is unbiased (the expected decoded value is the value) and errs by less than one
// step, (max - min) / 255; its variance is at most step^2 / 4 per value. The draws come from
// `seed` (the same seed, the same bytes). Preconditions as encode_blob, finite values.
std::string encode_blob_quantized(const ModelBlob& blob, uint32_t block, uint64_t seed);

// Serialises the values of `blob` at `indices` (strictly increasing, each < blob.data.size()
// < 2^32) as kSparse: the others decode as zero. Preconditions as encode_blob.
std::string encode_blob_sparse(const ModelBlob& blob, const std::vector<uint32_t>& indices);

// Parses `bytes` strictly. Rejects (kInvalidArgument) bad magic, unknown format version or
// value encoding, an unknown tensor kind or a parameter after a buffer, truncated or trailing
// bytes, inconsistent counts, a block size out of range, sparse indices that are not strictly
// increasing or past the end, and a wrong checksum; rejects
// (kTooLarge) input longer than `max_bytes`. Never reads outside `bytes`. The checksum and
// the finite check run in one pass over the values, block by block while a block is in
// cache; `into`'s layout storage is reused. An 8-bit block whose low, step or top level
// (low + 255 step) is not finite counts as non-finite from its first value. On an error
// `into` holds no meaningful view.
Status view_blob(std::string_view bytes, size_t max_bytes, BlobView& into);
// The same, with the values decoded (any encoding) and copied out.
Result<ModelBlob> decode_blob(std::string_view bytes, size_t max_bytes);

// The index of the first value of `values[0, n)` that is NaN or infinite; n when all are finite.
size_t first_non_finite(const UnalignedFloat* values, size_t n);
inline bool all_finite(const std::vector<float>& values) {
  return first_non_finite(values.data(), values.size()) == values.size();
}

// CRC-32 (zlib polynomial) of `bytes`, continuing `crc` (the CRC of the bytes before them).
uint32_t crc32_of(std::string_view bytes, uint32_t crc = 0);

// Content checksum of an encoded blob (lower-case hex SHA-256), the identity of a stored model.
std::string blob_checksum(std::string_view encoded);

}  // namespace fedcase
