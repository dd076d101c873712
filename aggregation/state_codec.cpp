#include "aggregation/state_codec.h"

#include <cstring>

#include "common/blob.h"

namespace fedcase::aggregation {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "saved state is little-endian");
constexpr char kMagic[4] = {'F', 'C', 'A', 'S'};
constexpr size_t kMaxKindBytes = 64;

template <class T>
void put(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <class T>
void put_span(std::string& out, const T* values, size_t count) {
  put(out, static_cast<uint64_t>(count));
  out.append(reinterpret_cast<const char*>(values), count * sizeof(T));
}

Status bad_state(std::string_view kind, const std::string& why) {
  return invalid_argument("saved " + std::string(kind) + " state " + why);
}

}  // namespace

StateWriter::StateWriter(std::string_view kind) {
  out_.append(kMagic, sizeof(kMagic));
  put(out_, kStateFormatVersion);
  put(out_, static_cast<uint16_t>(kind.size()));
  out_.append(kind);
}

void StateWriter::put_u64(uint64_t value) { put(out_, value); }
void StateWriter::put_floats(const std::vector<float>& values) {
  put_span(out_, values.data(), values.size());
}
void StateWriter::put_floats(const float* values, size_t count) { put_span(out_, values, count); }
void StateWriter::put_doubles(const std::vector<double>& values) {
  put_span(out_, values.data(), values.size());
}

std::string StateWriter::finish() {
  put(out_, crc32_of(out_));
  return std::move(out_);
}

Result<StateReader> StateReader::open(std::string_view bytes, std::string_view kind) {
  constexpr size_t kFixed = sizeof(kMagic) + sizeof(uint32_t) + sizeof(uint16_t);
  if (bytes.size() < kFixed + sizeof(uint32_t)) return bad_state(kind, "is truncated");
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return bad_state(kind, "has a bad magic number");
  }
  uint32_t version = 0;
  std::memcpy(&version, bytes.data() + sizeof(kMagic), sizeof(version));
  if (version != kStateFormatVersion) {
    return bad_state(kind, "has unsupported format version " + std::to_string(version));
  }
  uint16_t kind_size = 0;
  std::memcpy(&kind_size, bytes.data() + sizeof(kMagic) + sizeof(version), sizeof(kind_size));
  if (kind_size > kMaxKindBytes || bytes.size() < kFixed + kind_size + sizeof(uint32_t)) {
    return bad_state(kind, "is truncated");
  }
  const std::string_view stored_kind = bytes.substr(kFixed, kind_size);
  if (stored_kind != kind) {
    return bad_state(kind, "belongs to '" + std::string(stored_kind) + "'");
  }
  const size_t body = bytes.size() - sizeof(uint32_t);
  uint32_t crc = 0;
  std::memcpy(&crc, bytes.data() + body, sizeof(crc));
  if (crc != crc32_of(bytes.substr(0, body))) return bad_state(kind, "fails its checksum");
  return StateReader(bytes.substr(kFixed + kind_size, body - kFixed - kind_size));
}

Status StateReader::get_raw(void* out, size_t bytes) {
  if (payload_.size() - pos_ < bytes) return invalid_argument("saved state is truncated");
  if (bytes == 0) return ok_status();  // `out` may be the null data() of an empty vector
  std::memcpy(out, payload_.data() + pos_, bytes);
  pos_ += bytes;
  return ok_status();
}

template <class T>
Status StateReader::get_vector(std::vector<T>& values) {
  uint64_t count = 0;
  FEDCASE_RETURN_IF_ERROR(get_raw(&count, sizeof(count)));
  if (count > (payload_.size() - pos_) / sizeof(T)) {
    return invalid_argument("saved state is truncated");
  }
  values.resize(count);
  return get_raw(values.data(), count * sizeof(T));
}

Status StateReader::get_u64(uint64_t& value) { return get_raw(&value, sizeof(value)); }
Status StateReader::get_floats(std::vector<float>& values) { return get_vector(values); }
Status StateReader::get_doubles(std::vector<double>& values) { return get_vector(values); }

Status StateReader::finish() const {
  if (pos_ != payload_.size()) return invalid_argument("saved state has trailing bytes");
  return ok_status();
}

}  // namespace fedcase::aggregation
