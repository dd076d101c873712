// Fuzzes read_torchscript_model (formats/torchscript_reader.h), the reader of uploaded
// TorchScript models. Each input is read twice:
//  - as an archive, so mutations reach the zip layer (central directory, zip64, local headers,
//    inflation, CRC-32 checks);
//  - as a list of entries that the harness packs into a valid zip archive (STORED, with the
//    right CRC-32s), so mutations of data.pkl, the code and the storages get past the zip
//    layer. The list: per entry a u16 name length, the name, a u16 data length, the data
//    (little-endian); it ends at the first entry that does not fit.
// Parameters that read must be within the limits, finite, and make a model blob that decodes
// back to the same bytes.

#include <cmath>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "common/blob.h"
#include "formats/torchscript_reader.h"
#include "fuzz/fuzz_target.h"

namespace {

fedcase::formats::TorchScriptLimits fuzz_limits() {
  fedcase::formats::TorchScriptLimits limits;
  limits.max_bytes = 1 << 20;
  limits.max_tensors = 64;
  limits.max_elements = 1 << 16;
  limits.max_pickle_bytes = 1 << 16;
  limits.max_code_bytes = 1 << 16;
  limits.max_module_depth = 8;
  return limits;
}

void read_and_check(std::string_view archive) {
  static const fedcase::formats::TorchScriptLimits limits = fuzz_limits();
  auto blob = fedcase::formats::read_torchscript_model(archive, limits);
  if (!blob.ok()) return;
  const size_t tensors = blob->layout.tensors.size();
  if (tensors == 0 || tensors > limits.max_tensors) {
    fedcase::fuzz::fuzz_fail("a module read with a tensor count outside the limits");
  }
  if (blob->data.size() != blob->layout.element_count() ||
      blob->data.size() > limits.max_elements) {
    fedcase::fuzz::fuzz_fail("parameter data that does not fit the layout or the limits");
  }
  for (float value : blob->data) {
    if (!std::isfinite(value)) fedcase::fuzz::fuzz_fail("a non-finite parameter value read");
  }
  const std::string encoded = fedcase::encode_blob(*blob);
  auto decoded = fedcase::decode_blob(encoded, encoded.size());
  if (!decoded.ok() || fedcase::encode_blob(*decoded) != encoded) {
    fedcase::fuzz::fuzz_fail("parameters read that do not make a valid model blob");
  }
}

template <class T>
void put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

struct Entry {
  std::string_view name;
  std::string_view data;
};

// Takes `size` bytes after a u16 length from `bytes` at `at`; false when they do not fit.
bool take_field(std::string_view bytes, size_t& at, std::string_view& field) {
  uint16_t size = 0;
  if (bytes.size() - at < sizeof(size)) return false;
  std::memcpy(&size, bytes.data() + at, sizeof(size));
  at += sizeof(size);
  if (bytes.size() - at < size) return false;
  field = bytes.substr(at, size);
  at += size;
  return true;
}

std::vector<Entry> split_entries(std::string_view bytes) {
  std::vector<Entry> entries;
  size_t at = 0;
  Entry entry;
  while (entries.size() < UINT16_MAX && take_field(bytes, at, entry.name) &&
         take_field(bytes, at, entry.data)) {
    entries.push_back(entry);
  }
  return entries;
}

// The fields a local header and a central directory header share, from the version needed to
// the extra field's length, for a STORED entry.
void put_entry_fields(std::string& out, const Entry& entry) {
  const auto size = static_cast<uint32_t>(entry.data.size());
  put<uint16_t>(out, 20);  // version needed
  put<uint16_t>(out, 0);   // flags
  put<uint16_t>(out, 0);   // STORED
  put<uint32_t>(out, 0);   // time and date
  put<uint32_t>(out, fedcase::crc32_of(entry.data));
  put<uint32_t>(out, size);  // compressed
  put<uint32_t>(out, size);
  put<uint16_t>(out, static_cast<uint16_t>(entry.name.size()));
  put<uint16_t>(out, 0);  // extra field
}

// A zip archive of `entries`, STORED, laid out as a minimal zip writer does.
std::string zip_stored(const std::vector<Entry>& entries) {
  std::string archive, directory;
  for (const Entry& entry : entries) {
    const auto offset = static_cast<uint32_t>(archive.size());
    put<uint32_t>(archive, 0x04034b50);  // local header
    put_entry_fields(archive, entry);
    archive.append(entry.name).append(entry.data);
    put<uint32_t>(directory, 0x02014b50);  // central directory header
    put<uint16_t>(directory, 20);          // version made by
    put_entry_fields(directory, entry);
    put<uint16_t>(directory, 0);  // comment
    put<uint16_t>(directory, 0);  // disk
    put<uint16_t>(directory, 0);  // internal attributes
    put<uint32_t>(directory, 0);  // external attributes
    put<uint32_t>(directory, offset);
    directory.append(entry.name);
  }
  const auto directory_offset = static_cast<uint32_t>(archive.size());
  const auto count = static_cast<uint16_t>(entries.size());
  archive.append(directory);
  put<uint32_t>(archive, 0x06054b50);  // end of central directory
  put<uint16_t>(archive, 0);           // disk
  put<uint16_t>(archive, 0);           // disk of the central directory
  put<uint16_t>(archive, count);       // entries on this disk
  put<uint16_t>(archive, count);
  put<uint32_t>(archive, static_cast<uint32_t>(directory.size()));
  put<uint32_t>(archive, directory_offset);
  put<uint16_t>(archive, 0);  // comment
  return archive;
}

}  // namespace

FEDCASE_FUZZ_TARGET(torchscript) {
  const std::string_view bytes = fedcase::fuzz::as_text(data, size);
  read_and_check(bytes);
  const std::vector<Entry> entries = split_entries(bytes);
  if (!entries.empty()) read_and_check(zip_stored(entries));
  return 0;
}
