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
uint32_t crc32_of(std::string_view bytes) {
  return crc32_gzip_refl(0, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

std::string blob_checksum(std::string_view encoded) { return sha256_hex(encoded); }

std::string encode_blob(const ModelBlob& blob) {
  std::string out;
  out.reserve(64 + blob.layout.tensors.size() * 64 + blob.data.size() * sizeof(float));
  out.append(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kBlobFormatVersion);
  put<uint64_t>(out, blob.model_version);
  put<uint32_t>(out, kDtypeFloat32);
  put<uint32_t>(out, static_cast<uint32_t>(blob.layout.tensors.size()));
  for (const auto& t : blob.layout.tensors) {
    put<uint16_t>(out, static_cast<uint16_t>(t.name.size()));
    out.append(t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (uint64_t d : t.shape) put<uint64_t>(out, d);
    put<uint8_t>(out, static_cast<uint8_t>(t.kind));
  }
  put<uint64_t>(out, static_cast<uint64_t>(blob.data.size()));
  out.append(reinterpret_cast<const char*>(blob.data.data()), blob.data.size() * sizeof(float));
  put<uint32_t>(out, crc32_of(out));
  return out;
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
  if (dtype != kDtypeFloat32) return invalid_argument("unsupported dtype " + std::to_string(dtype));
  if (tensor_count == 0 || tensor_count > kMaxTensors) {
    return invalid_argument("tensor count " + std::to_string(tensor_count) + " out of range");
  }
  // Shapes that need more data than the blob holds make it malformed (400), like a truncated
  // one; checked before anything is allocated.
  const uint64_t max_elements = bytes.size() / sizeof(float);
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
  std::string_view data;
  if (!in.get_bytes(element_count * sizeof(float), data)) return truncated();
  if (in.remaining() != 0) return invalid_argument("model blob has trailing bytes");
  // One pass over the values, block by block: the checksum and the finite check of a block
  // run while it is in cache (the values are the blob's bulk).
  const auto* bytes_in = reinterpret_cast<const unsigned char*>(body.data());
  uint32_t crc = crc32_gzip_refl(0, bytes_in, body.size() - data.size());
  blob.values = reinterpret_cast<const UnalignedFloat*>(data.data());
  blob.count = element_count;
  blob.first_non_finite = element_count;
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
  return ModelBlob{view.model_version, std::move(view.layout),
                   std::vector<float>(view.values, view.values + view.count)};
}

}  // namespace fedcase
