#pragma once
// Helpers the readers of formats/ share (not for use outside formats/): little-endian loads
// that never read past their bytes, and quoting for messages.

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace fedcase::formats {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "zip fields, pickle arguments and torch storages are little-endian");

// Reads the little-endian T at `offset` of `bytes`; false when it does not fit.
template <class T>
bool load(std::string_view bytes, uint64_t offset, T& value) {
  if (offset > bytes.size() || bytes.size() - offset < sizeof(T)) return false;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return true;
}

inline std::string quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

}  // namespace fedcase::formats
