#include "formats/npz_writer.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "formats/bytes.h"

namespace fedcase::formats {
namespace {

template <class T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));
  out.append(bytes, sizeof(T));
}

// An NPY 1.0 header for an array of `descr` ('<f4', '<i8') and `shape`, padded with spaces
// and a final newline so that the data starts at a multiple of 64 bytes, as numpy writes it.
std::string npy_header(const char* descr, const std::vector<uint64_t>& shape) {
  std::string dict = std::string("{'descr': '") + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    dict += std::to_string(shape[i]);
    if (i + 1 < shape.size() || shape.size() == 1) dict += ",";
    if (i + 1 < shape.size()) dict += " ";
  }
  dict += "), }";
  constexpr size_t kPreamble = 10;  // magic (6), version (2), header length (2)
  const size_t unpadded = kPreamble + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::string header = "\x93NUMPY";
  header += '\x01';
  header += '\x00';
  put<uint16_t>(header, uint16_t(dict.size()));
  return header + dict;
}

Status check_name(const std::string& name) {
  if (name.empty()) return invalid_argument("a tensor without a name cannot be written to npz");
  for (unsigned char c : name) {
    if (c < 0x20 || c == 0x7f || c == '/' || c == '\\') {
      return invalid_argument("tensor name " + quoted(name) + " cannot name an npz entry");
    }
  }
  return ok_status();
}

constexpr uint32_t kLocalHeader = 0x04034b50, kCentralHeader = 0x02014b50, kEnd = 0x06054b50;
constexpr uint16_t kVersion = 20;                       // 2.0: what STORED entries need
constexpr uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;  // 1980-01-01: a reproducible file

// The fields a local header and its central directory entry share, from "version needed".
void put_entry_fields(std::string& out, uint32_t crc, uint32_t size, uint16_t name_size) {
  put<uint16_t>(out, kVersion);
  put<uint16_t>(out, 0);  // flags
  put<uint16_t>(out, 0);  // method: STORED
  put<uint16_t>(out, 0);  // time
  put<uint16_t>(out, kDosDate);
  put<uint32_t>(out, crc);
  put<uint32_t>(out, size);  // compressed
  put<uint32_t>(out, size);
  put<uint16_t>(out, name_size);
  put<uint16_t>(out, 0);  // extra field
}

}  // namespace

Result<std::string> write_npz(const ModelLayout& layout, const std::vector<float>& values) {
  if (layout.element_count() != values.size()) {
    return invalid_argument("npz: " + std::to_string(values.size()) + " values for a layout of " +
                            std::to_string(layout.element_count()));
  }
  if (layout.tensors.size() > 0xffff) return too_large("too many tensors for an npz archive");
  constexpr uint64_t kZipLimit = std::numeric_limits<uint32_t>::max();
  std::string archive, directory;
  uint64_t offset = 0;  // of the tensor's first value in `values`
  for (const TensorSpec& tensor : layout.tensors) {
    FEDCASE_RETURN_IF_ERROR(check_name(tensor.name));
    const std::string name = tensor.name + ".npy";
    const uint64_t count = tensor.element_count();
    const bool integer = tensor.kind == TensorKind::kIntegerBuffer;
    std::string data = npy_header(integer ? "<i8" : "<f4", tensor.shape);
    if (count * sizeof(int64_t) + data.size() > kZipLimit) {
      return too_large("tensor " + quoted(tensor.name) + " is too large for an npz archive");
    }
    if (integer) {
      for (uint64_t i = 0; i < count; ++i) {
        put<int64_t>(data, static_cast<int64_t>(std::llround(values[offset + i])));
      }
    } else {
      data.append(reinterpret_cast<const char*>(values.data() + offset), count * sizeof(float));
    }
    offset += count;
    const uint32_t crc = crc32_of(data);
    if (archive.size() + data.size() + name.size() + 30 > kZipLimit) {
      return too_large("the model is too large for an npz archive (4 GiB)");
    }
    put<uint32_t>(directory, kCentralHeader);
    put<uint16_t>(directory, kVersion);  // made by
    put_entry_fields(directory, crc, uint32_t(data.size()), uint16_t(name.size()));
    put<uint16_t>(directory, 0);  // comment
    put<uint16_t>(directory, 0);  // disk
    put<uint16_t>(directory, 0);  // internal attributes
    put<uint32_t>(directory, 0);  // external attributes
    put<uint32_t>(directory, uint32_t(archive.size()));
    directory += name;

    put<uint32_t>(archive, kLocalHeader);
    put_entry_fields(archive, crc, uint32_t(data.size()), uint16_t(name.size()));
    archive += name;
    archive += data;
  }
  const uint16_t entries = uint16_t(layout.tensors.size());
  const uint32_t directory_offset = uint32_t(archive.size());
  archive += directory;
  put<uint32_t>(archive, kEnd);
  put<uint16_t>(archive, 0);  // this disk
  put<uint16_t>(archive, 0);  // the directory's disk
  put<uint16_t>(archive, entries);
  put<uint16_t>(archive, entries);
  put<uint32_t>(archive, uint32_t(directory.size()));
  put<uint32_t>(archive, directory_offset);
  put<uint16_t>(archive, 0);  // comment
  return archive;
}

}  // namespace fedcase::formats
