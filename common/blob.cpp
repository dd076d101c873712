#include "common/blob.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/crypto.h"

namespace fedcase {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the blob format is little-endian");
constexpr char kMagic[4] = {'F', 'C', 'M', 'B'};

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Bounds-checked sequential reader over the input bytes.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  template <class T>
  bool get(T& value) {
    if (remaining() < sizeof(T)) return false;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool get_bytes(size_t n, std::string_view& out) {
    if (remaining() < n) return false;
    out = bytes_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return bytes_.size() - pos_; }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

Status truncated() { return invalid_argument("model blob is truncated"); }

// Reads the values of a kQuantized8 or kSparse blob of blob.count values into `blob` and
// finds its first non-finite value.
Status view_compressed(Reader& in, BlobView& blob) {
  const size_t n = blob.count;
  std::string_view part;
  if (blob.encoding == ValueEncoding::kQuantized8) {
    if (!in.get(blob.block)) return truncated();
    if (blob.block == 0 || blob.block > (1u << 16)) {
      return invalid_argument("8-bit block size " + std::to_string(blob.block) + " out of range");
    }
    const size_t blocks = (n + blob.block - 1) / blob.block;
    if (!in.get_bytes(blocks * 2 * sizeof(float), part)) return truncated();
    blob.block_scales = reinterpret_cast<const UnalignedFloat*>(part.data());
    if (!in.get_bytes(n, part)) return truncated();
    blob.codes = reinterpret_cast<const uint8_t*>(part.data());
    for (size_t b = 0; b < blocks; ++b) {
      const float low = blob.block_scales[2 * b], step = blob.block_scales[2 * b + 1];
      if (!std::isfinite(low) || !std::isfinite(step) || !std::isfinite(low + step * 255.0f)) {
        blob.first_non_finite = b * blob.block;
        break;
      }
    }
    return ok_status();
  }
  uint64_t stored = 0;
  if (!in.get(stored)) return truncated();
  if (stored > n) return invalid_argument("sparse blob stores more values than it holds");
  if (!in.get_bytes(stored * sizeof(uint32_t), part)) return truncated();
  blob.indices = part.data();
  if (!in.get_bytes(stored * sizeof(float), part)) return truncated();
  blob.stored_values = reinterpret_cast<const UnalignedFloat*>(part.data());
  blob.stored = stored;
  for (size_t k = 0; k < stored; ++k) {
    uint32_t index;
    std::memcpy(&index, blob.indices + k * sizeof(index), sizeof(index));
    uint32_t previous = 0;
    if (k > 0) std::memcpy(&previous, blob.indices + (k - 1) * sizeof(index), sizeof(index));
    if (index >= n || (k > 0 && index <= previous)) {
      return invalid_argument("sparse blob index " + std::to_string(index) +
                              " is past the end or not above the one before");
    }
    if (blob.first_non_finite == n && !std::isfinite(blob.stored_values[k])) {
      blob.first_non_finite = index;
    }
  }
  return ok_status();
}

}  // namespace

uint64_t TensorSpec::element_count() const {
  uint64_t n = 1;
  for (uint64_t d : shape) n *= d;
  return n;
}

uint64_t ModelLayout::element_count() const {
  uint64_t n = 0;
  for (const auto& t : tensors) n += t.element_count();
  return n;
}

uint64_t ModelLayout::parameter_count() const {
  uint64_t n = 0;
  for (const auto& t : tensors) {
    if (t.kind == TensorKind::kParameter) n += t.element_count();
  }
  return n;
}

const char* tensor_kind_name(TensorKind kind) {
  switch (kind) {
    case TensorKind::kParameter:
      return "parameter";
    case TensorKind::kFloatBuffer:
      return "float buffer";
    case TensorKind::kIntegerBuffer:
      return "integer buffer";
  }
  return "unknown";
}

namespace {
std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}
}  // namespace

std::string ModelLayout::first_difference(const ModelLayout& other) const {
  const size_t common = std::min(tensors.size(), other.tensors.size());
  for (size_t i = 0; i < common; ++i) {
    const TensorSpec &here = tensors[i], &there = other.tensors[i];
    if (here.name != there.name) {
      return "tensor '" + there.name + "' comes where '" + here.name + "' is here";
    }
    if (here.shape != there.shape) {
      return "tensor '" + here.name + "' is " + shape_text(here.shape) + " here and " +
             shape_text(there.shape) + " there";
    }
    if (here.kind != there.kind) {
      return "tensor '" + here.name + "' is a " + tensor_kind_name(here.kind) + " here and a " +
             tensor_kind_name(there.kind) + " there";
    }
  }
  if (tensors.size() > common) return "there is no tensor '" + tensors[common].name + "'";
  if (other.tensors.size() > common)
    return "tensor '" + other.tensors[common].name + "' is only there";
  return std::string();
}

std::string ModelLayout::describe() const {
  std::string out;
  for (const auto& t : tensors) {
    if (!out.empty()) out += ", ";
    out += t.name + shape_text(t.shape);
  }
  return out;
}

// Whole blocks are tested on the exponent bits alone, a loop the compiler vectorises (with
// AVX2 where the CPU has it); the block holding a non-finite value, and the tail, are scanned
// one value at a time.
__attribute__((target_clones("avx2", "default"))) size_t first_non_finite(
    const UnalignedFloat* values, size_t n) {
  constexpr size_t kBlock = 1024;
  constexpr uint32_t kExponent = 0x7f800000u;  // all ones: infinity or NaN
  size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    uint32_t non_finite = 0;
    for (size_t k = 0; k < kBlock; ++k) {
      uint32_t bits;
      std::memcpy(&bits, values + i + k, sizeof(bits));
      non_finite |= uint32_t((bits & kExponent) == kExponent);
    }
    if (non_finite) break;
  }
  for (; i < n; ++i) {
    if (!std::isfinite(values[i])) return i;
  }
  return n;
}

// ISA-L's folding CRC (carry-less multiplication) is about 13x zlib's here, and the same
// function (reflected IEEE polynomial, as zlib and gzip): every upload is checked with it.
uint32_t crc32_of(std::string_view bytes, uint32_t crc) {
  return crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

std::string blob_checksum(std::string_view encoded) { return sha256_hex(encoded); }

namespace {

// The header of a blob of `layout` at `model_version` whose `count` values are `encoding`, up
// to and including the element count; `values_bytes` is what the caller will append.
std::string blob_header(const ModelLayout& layout, uint64_t model_version,
                        ValueEncoding encoding, uint64_t count, size_t values_bytes) {
  std::string out;
  out.reserve(64 + layout.tensors.size() * 64 + values_bytes);
  out.append(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kBlobFormatVersion);
  put<uint64_t>(out, model_version);
  put<uint32_t>(out, static_cast<uint32_t>(encoding));
  put<uint32_t>(out, static_cast<uint32_t>(layout.tensors.size()));
  for (const auto& t : layout.tensors) {
    put<uint16_t>(out, static_cast<uint16_t>(t.name.size()));
    out.append(t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) put<uint64_t>(out, d);
    put<uint8_t>(out, static_cast<uint8_t>(t.kind));
  }
  put<uint64_t>(out, count);
  return out;
}

std::string blob_header(const ModelBlob& blob, ValueEncoding encoding, size_t values_bytes) {
  return blob_header(blob.layout, blob.model_version, encoding, blob.data.size(), values_bytes);
}

void seal(std::string& out) { put<uint32_t>(out, crc32_of(out)); }

// A uniform draw in [0, 1) for value `i`: SplitMix64 of the seed and the index.
float uniform_draw(uint64_t seed, uint64_t i) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

uint32_t index_at(const char* indices, size_t k) {
  uint32_t index;
  std::memcpy(&index, indices + k * sizeof(index), sizeof(index));
  return index;
}

}  // namespace

uint64_t blob_values_offset(const ModelLayout& layout) {
  // magic, format, version, encoding, tensor count; per tensor its name's length and bytes,
  // rank, dims and kind; then the element count.
  uint64_t bytes = 4 + 4 + 8 + 4 + 4 + 8;
  for (const TensorSpec& t : layout.tensors) bytes += 2 + t.name.size() + 4 + 8 * t.shape.size() + 1;
  return bytes;
}

std::string float_blob_header(const ModelLayout& layout, uint64_t model_version) {
  return blob_header(layout, model_version, ValueEncoding::kFloat32, layout.element_count(), 0);
}

std::string encode_blob(const ModelBlob& blob) {
  std::string out =
      blob_header(blob, ValueEncoding::kFloat32, blob.data.size() * sizeof(float));
  out.append(reinterpret_cast<const char*>(blob.data.data()), blob.data.size() * sizeof(float));
  seal(out);
  return out;
}

std::string encode_blob_quantized(const ModelBlob& blob, uint32_t block, uint64_t seed) {
  const size_t n = blob.data.size();
  const size_t blocks = (n + block - 1) / block;
  std::string out = blob_header(blob, ValueEncoding::kQuantized8,
                                sizeof(uint32_t) + blocks * 2 * sizeof(float) + n);
  put<uint32_t>(out, block);
  std::string codes(n, '\0');
  for (size_t b = 0; b < blocks; ++b) {
    const size_t first = b * block, last = std::min(n, first + block);
    const auto [low_at, high_at] =
        std::minmax_element(blob.data.begin() + first, blob.data.begin() + last);
    const float low = *low_at;
    const float step = (*high_at - low) / 255.0f;
    put<float>(out, low);
    put<float>(out, step);
    for (size_t i = first; step > 0 && i < last; ++i) {
      const float level = std::floor((blob.data[i] - low) / step + uniform_draw(seed, i));
      codes[i] = static_cast<char>(static_cast<uint8_t>(std::clamp(level, 0.0f, 255.0f)));
    }
  }
  out += codes;
  seal(out);
  return out;
}

std::string encode_blob_sparse(const ModelBlob& blob, const std::vector<uint32_t>& indices) {
  std::string out = blob_header(blob, ValueEncoding::kSparse,
                                sizeof(uint64_t) + indices.size() * 2 * sizeof(float));
  put<uint64_t>(out, indices.size());
  for (uint32_t index : indices) put<uint32_t>(out, index);
  for (uint32_t index : indices) put<float>(out, blob.data[index]);
  seal(out);
  return out;
}

void decode_values(const BlobView& view, size_t begin, size_t end, float* out) {
  switch (view.encoding) {
    case ValueEncoding::kFloat32:
      std::memcpy(out, view.values + begin, (end - begin) * sizeof(float));
      return;
    case ValueEncoding::kQuantized8:
      for (size_t i = begin; i < end;) {
        const size_t b = i / view.block;
        const size_t stop = std::min(end, (b + 1) * size_t{view.block});
        const float low = view.block_scales[2 * b], step = view.block_scales[2 * b + 1];
        for (; i < stop; ++i) out[i - begin] = low + step * float(view.codes[i]);
      }
      return;
    case ValueEncoding::kSparse: {
      std::fill(out, out + (end - begin), 0.0f);
      size_t lo = 0, hi = view.stored;  // the first stored index >= begin
      while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (index_at(view.indices, mid) < begin) lo = mid + 1; else hi = mid;
      }
      for (size_t k = lo; k < view.stored && index_at(view.indices, k) < end; ++k) {
        out[index_at(view.indices, k) - begin] = view.stored_values[k];
      }
      return;
    }
  }
}

Status view_blob(std::string_view bytes, size_t max_bytes, BlobView& blob) {
  if (bytes.size() > max_bytes) {
    return too_large("model blob of " + std::to_string(bytes.size()) +
                     " bytes exceeds the limit of " + std::to_string(max_bytes));
  }
  if (bytes.size() < sizeof(kMagic) + sizeof(uint32_t)) return truncated();
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return invalid_argument("not a model blob (bad magic)");
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + bytes.size() - sizeof(uint32_t), sizeof(uint32_t));
  std::string_view body = bytes.substr(0, bytes.size() - sizeof(uint32_t));

  Reader in(body.substr(sizeof(kMagic)));
  uint32_t format = 0, dtype = 0, tensor_count = 0;
  if (!in.get(format)) return truncated();
  if (format != kBlobFormatVersion && format != 1) {
    return invalid_argument("unsupported model blob format version " + std::to_string(format));
  }
  if (!in.get(blob.model_version) || !in.get(dtype) || !in.get(tensor_count)) return truncated();
  if (dtype < static_cast<uint32_t>(ValueEncoding::kFloat32) ||
      dtype > static_cast<uint32_t>(ValueEncoding::kSparse) ||
      (format == 1 && dtype != static_cast<uint32_t>(ValueEncoding::kFloat32))) {
    return invalid_argument("unsupported value encoding " + std::to_string(dtype));
  }
  blob.encoding = static_cast<ValueEncoding>(dtype);
  if (tensor_count == 0 || tensor_count > kMaxTensors) {
    return invalid_argument("tensor count " + std::to_string(tensor_count) + " out of range");
  }
  // Shapes that need more data than the blob holds make it malformed (400), like a truncated
  // one; checked before anything is allocated. A sparse blob's values are bounded by its
  // u32 indices instead.
  const uint64_t max_elements = blob.encoding == ValueEncoding::kFloat32 ? bytes.size() / sizeof(float)
                                : blob.encoding == ValueEncoding::kQuantized8
                                    ? bytes.size()
                                    : uint64_t{std::numeric_limits<uint32_t>::max()};
  uint64_t expected_elements = 0;
  blob.layout.tensors.resize(tensor_count);
  for (auto& t : blob.layout.tensors) {
    uint16_t name_len = 0;
    uint32_t rank = 0;
    std::string_view name;
    if (!in.get(name_len)) return truncated();
    if (name_len == 0 || name_len > kMaxTensorNameBytes) {
      return invalid_argument("tensor name length out of range");
    }
    if (!in.get_bytes(name_len, name) || !in.get(rank)) return truncated();
    if (rank > kMaxTensorRank) return invalid_argument("tensor rank out of range");
    t.name.assign(name);
    t.shape.resize(rank);
    uint64_t count = 1;
    for (auto& d : t.shape) {
      if (!in.get(d)) return truncated();
      if (d != 0 && count > max_elements / d) {
        return invalid_argument("tensor " + t.name + " declares more elements than the blob holds");
      }
      count *= d;
    }
    uint8_t kind = 0;  // format 1 holds parameters only
    if (format >= 2 && !in.get(kind)) return truncated();
    if (kind > static_cast<uint8_t>(TensorKind::kIntegerBuffer)) {
      return invalid_argument("tensor " + t.name + " has unknown kind " + std::to_string(kind));
    }
    t.kind = static_cast<TensorKind>(kind);
    if (t.kind == TensorKind::kParameter && &t != &blob.layout.tensors.front() &&
        (&t - 1)->kind != TensorKind::kParameter) {
      return invalid_argument("parameter " + t.name + " comes after a buffer");
    }
    expected_elements += count;
    if (expected_elements > max_elements) {
      return invalid_argument("model blob declares more elements than it holds");
    }
  }
  uint64_t element_count = 0;
  if (!in.get(element_count)) return truncated();
  if (element_count != expected_elements) {
    return invalid_argument("element count " + std::to_string(element_count) +
                            " does not match the tensor shapes (" +
                            std::to_string(expected_elements) + ")");
  }
  blob.count = element_count;
  blob.first_non_finite = element_count;
  blob.values = nullptr;
  if (blob.encoding != ValueEncoding::kFloat32) {
    FEDCASE_RETURN_IF_ERROR(view_compressed(in, blob));
    if (in.remaining() != 0) return invalid_argument("model blob has trailing bytes");
    if (crc32_of(body) != stored_crc) return invalid_argument("model blob checksum mismatch");
    return ok_status();
  }
  std::string_view data;
  if (!in.get_bytes(element_count * sizeof(float), data)) return truncated();
  if (in.remaining() != 0) return invalid_argument("model blob has trailing bytes");
  // One pass over the values, block by block: the checksum and the finite check of a block
  // run while it is in cache (the values are the blob's bulk).
  const auto* bytes_in = reinterpret_cast<const unsigned char*>(body.data());
  uint32_t crc = crc32_gzip_refl(0, bytes_in, body.size() - data.size());
  blob.values = reinterpret_cast<const UnalignedFloat*>(data.data());
  constexpr size_t kBlockValues = 4096;
  for (size_t i = 0; i < element_count; i += kBlockValues) {
    const size_t n = std::min<size_t>(kBlockValues, element_count - i);
    crc = crc32_gzip_refl(crc, reinterpret_cast<const unsigned char*>(blob.values + i),
                          n * sizeof(float));
    if (blob.first_non_finite == element_count) {
      const size_t bad = first_non_finite(blob.values + i, n);
      if (bad != n) blob.first_non_finite = i + bad;
    }
  }
  if (crc != stored_crc) return invalid_argument("model blob checksum mismatch");
  return ok_status();
}

Result<ModelBlob> decode_blob(std::string_view bytes, size_t max_bytes) {
  BlobView view;
  FEDCASE_RETURN_IF_ERROR(view_blob(bytes, max_bytes, view));
  std::vector<float> values(view.count);
  if (view.count > 0) decode_values(view, 0, view.count, values.data());
  return ModelBlob{view.model_version, std::move(view.layout), std::move(values)};
}

}  // namespace fedcase
