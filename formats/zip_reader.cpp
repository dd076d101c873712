#include "formats/zip_reader.h"

#include <zlib.h>

#include <climits>

#include "common/blob.h"
#include "formats/bytes.h"

namespace fedcase::formats {
namespace {

constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kEndSignature = 0x06054b50;
constexpr uint32_t kZip64EndSignature = 0x06064b50;
constexpr uint32_t kZip64LocatorSignature = 0x07064b50;
constexpr uint64_t kLocalHeaderSize = 30;
constexpr uint64_t kCentralHeaderSize = 46;
constexpr uint64_t kEndSize = 22;
constexpr uint64_t kMaxCommentSize = 0xFFFF;
constexpr uint64_t kZip64LocatorSize = 20;
constexpr uint64_t kZip64EndSize = 56;
constexpr uint16_t kZip64ExtraTag = 0x0001;
constexpr uint64_t kZip64Saturated = 0xFFFFFFFF;
constexpr uint16_t kFlagEncrypted = 0x0001;
constexpr uint16_t kMethodStored = 0;
constexpr uint16_t kMethodDeflated = 8;

Status not_a_zip(const std::string& why) { return invalid_argument("not a zip archive: " + why); }

// Where the central directory lies, from the end of central directory record or, when the
// archive has one (torch always writes it), the zip64 record.
struct CentralDirectory {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t entries = 0;
  uint64_t trailer_offset = 0;  // where the records after the central directory start
};

Result<CentralDirectory> find_central_directory(std::string_view bytes) {
  if (bytes.size() < kEndSize) return not_a_zip("too short");
  // The end record closes the archive, followed only by a comment of up to 65535 bytes.
  const uint64_t lowest =
      bytes.size() > kEndSize + kMaxCommentSize ? bytes.size() - kEndSize - kMaxCommentSize : 0;
  uint64_t end = bytes.size() - kEndSize;
  for (;; --end) {
    uint32_t signature = 0;
    uint16_t comment_size = 0;
    if (load(bytes, end, signature) && signature == kEndSignature &&
        load(bytes, end + 20, comment_size) && end + kEndSize + comment_size == bytes.size()) {
      break;
    }
    if (end == lowest) return not_a_zip("no end of central directory record");
  }
  uint16_t disk = 0, directory_disk = 0, disk_entries = 0, entries = 0;
  uint32_t size = 0, offset = 0;
  load(bytes, end + 4, disk);
  load(bytes, end + 6, directory_disk);
  load(bytes, end + 8, disk_entries);
  load(bytes, end + 10, entries);
  load(bytes, end + 12, size);
  load(bytes, end + 16, offset);
  CentralDirectory directory{offset, size, entries, end};
  bool one_disk = disk == 0 && directory_disk == 0 && disk_entries == entries;

  uint32_t locator_signature = 0;
  if (end >= kZip64LocatorSize && load(bytes, end - kZip64LocatorSize, locator_signature) &&
      locator_signature == kZip64LocatorSignature) {
    const uint64_t locator = end - kZip64LocatorSize;
    uint64_t record = 0;
    uint32_t record_signature = 0, disk64 = 0, directory_disk64 = 0;
    uint64_t disk_entries64 = 0;
    load(bytes, locator + 8, record);
    if (record > locator || locator - record < kZip64EndSize ||
        !load(bytes, record, record_signature) || record_signature != kZip64EndSignature) {
      return not_a_zip("bad zip64 end of central directory record");
    }
    load(bytes, record + 16, disk64);
    load(bytes, record + 20, directory_disk64);
    load(bytes, record + 24, disk_entries64);
    load(bytes, record + 32, directory.entries);
    load(bytes, record + 40, directory.size);
    load(bytes, record + 48, directory.offset);
    directory.trailer_offset = record;
    one_disk = disk64 == 0 && directory_disk64 == 0 && disk_entries64 == directory.entries;
  } else if (offset == kZip64Saturated || size == kZip64Saturated) {
    return not_a_zip("zip64 fields without a zip64 end of central directory record");
  }
  if (!one_disk) return not_a_zip("it spans several disks");
  if (directory.offset > directory.trailer_offset ||
      directory.size != directory.trailer_offset - directory.offset) {
    return not_a_zip("the central directory does not end where its end record starts");
  }
  if (directory.entries > directory.size / kCentralHeaderSize) {
    return not_a_zip("the central directory is too small for its entry count");
  }
  return directory;
}

// Replaces the fields of `entry` that the central directory saturated (0xFFFFFFFF) with their
// 64-bit values, which the zip64 extra field holds in this order.
Status apply_zip64_extra(std::string_view extra, ZipEntry& entry) {
  uint64_t* fields[] = {&entry.size, &entry.compressed_size, &entry.local_header_offset};
  bool saturated = false;
  for (const uint64_t* field : fields) saturated = saturated || *field == kZip64Saturated;
  if (!saturated) return ok_status();
  const Status missing = not_a_zip("entry " + quoted(entry.name) + " lacks its zip64 sizes");
  uint64_t at = 0;
  uint16_t tag = 0, length = 0;
  while (load(extra, at, tag) && load(extra, at + 2, length)) {
    const uint64_t data = at + 4;
    if (length > extra.size() - data) break;
    if (tag == kZip64ExtraTag) {
      const std::string_view values = extra.substr(data, length);
      uint64_t next = 0;
      for (uint64_t* field : fields) {
        if (*field != kZip64Saturated) continue;
        if (!load(values, next, *field)) return missing;
        next += sizeof(uint64_t);
      }
      return ok_status();
    }
    at = data + length;
  }
  return missing;
}

Result<std::string> inflate_entry(std::string_view compressed, const ZipEntry& entry) {
  if (compressed.size() > UINT_MAX || entry.size > UINT_MAX) {
    return invalid_argument("zip entry " + quoted(entry.name) + " is too large to inflate");
  }
  std::string inflated(entry.size, '\0');
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) return internal_error("zlib inflateInit2 failed");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  stream.next_out = reinterpret_cast<Bytef*>(inflated.data());
  stream.avail_out = static_cast<uInt>(inflated.size());
  const bool complete = inflate(&stream, Z_FINISH) == Z_STREAM_END && stream.avail_out == 0;
  inflateEnd(&stream);
  if (!complete) {
    return invalid_argument("zip entry " + quoted(entry.name) + " does not inflate to its " +
                            std::to_string(entry.size) + " bytes");
  }
  return inflated;
}

}  // namespace

Status ZipArchive::open(std::string_view bytes) {
  bytes_ = bytes;
  auto directory = find_central_directory(bytes);
  if (!directory.ok()) return directory.status();
  data_end_ = directory->offset;
  entries_.reserve(directory->entries);
  const uint64_t end = directory->offset + directory->size;
  uint64_t at = directory->offset;
  for (uint64_t i = 0; i < directory->entries; ++i) {
    uint32_t signature = 0, compressed_size = 0, size = 0, local_header_offset = 0;
    uint16_t name_size = 0, extra_size = 0, comment_size = 0;
    ZipEntry entry;
    if (end - at < kCentralHeaderSize || !load(bytes, at, signature) ||
        signature != kCentralHeaderSignature) {
      return not_a_zip("bad central directory entry " + std::to_string(i));
    }
    load(bytes, at + 8, entry.flags);
    load(bytes, at + 10, entry.method);
    load(bytes, at + 16, entry.crc);
    load(bytes, at + 20, compressed_size);
    load(bytes, at + 24, size);
    load(bytes, at + 28, name_size);
    load(bytes, at + 30, extra_size);
    load(bytes, at + 32, comment_size);
    load(bytes, at + 42, local_header_offset);
    const uint64_t name_at = at + kCentralHeaderSize;
    if (end - name_at < uint64_t{name_size} + extra_size + comment_size) {
      return not_a_zip("central directory entry " + std::to_string(i) + " is truncated");
    }
    entry.name = bytes.substr(name_at, name_size);
    entry.compressed_size = compressed_size;
    entry.size = size;
    entry.local_header_offset = local_header_offset;
    FEDCASE_RETURN_IF_ERROR(
        apply_zip64_extra(bytes.substr(name_at + name_size, extra_size), entry));
    if (!index_.emplace(entry.name, entries_.size()).second) {
      return invalid_argument("zip archive holds two entries named " + quoted(entry.name));
    }
    entries_.push_back(entry);
    at = name_at + name_size + extra_size + comment_size;
  }
  return ok_status();
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

Result<std::string_view> ZipArchive::read(const ZipEntry& entry, uint64_t max_size) {
  if (entry.size > max_size) {
    return invalid_argument("zip entry " + quoted(entry.name) + " of " +
                            std::to_string(entry.size) + " bytes exceeds the limit of " +
                            std::to_string(max_size));
  }
  auto cached = read_.find(&entry);
  if (cached != read_.end()) return cached->second;
  if (entry.flags & kFlagEncrypted) {
    return invalid_argument("zip entry " + quoted(entry.name) + " is encrypted");
  }
  auto stored = stored_data(entry);
  if (!stored.ok()) return stored.status();
  std::string_view data;
  if (entry.method == kMethodStored) {
    if (stored->size() != entry.size) {
      return invalid_argument("stored zip entry " + quoted(entry.name) +
                              " has different compressed and uncompressed sizes");
    }
    data = *stored;
  } else if (entry.method == kMethodDeflated) {
    if (entry.size > inflate_budget_) {
      return invalid_argument("the archive's entries inflate to more bytes than its limit");
    }
    inflate_budget_ -= entry.size;
    auto inflated = inflate_entry(*stored, entry);
    if (!inflated.ok()) return inflated.status();
    data = inflated_.emplace_back(std::move(*inflated));
  } else {
    return invalid_argument("zip entry " + quoted(entry.name) +
                            " uses unsupported compression method " + std::to_string(entry.method));
  }
  if (crc32_of(data) != entry.crc) {
    return invalid_argument("zip entry " + quoted(entry.name) + " fails its CRC-32 check");
  }
  read_.emplace(&entry, data);
  return data;
}

// The data of `entry` as the archive stores it: after its local header's name and extra
// field (whose lengths can differ from the central directory's), before the directory.
Result<std::string_view> ZipArchive::stored_data(const ZipEntry& entry) const {
  const uint64_t at = entry.local_header_offset;
  uint32_t signature = 0;
  uint16_t name_size = 0, extra_size = 0;
  if (!load(bytes_, at, signature) || signature != kLocalHeaderSignature ||
      !load(bytes_, at + 26, name_size) || !load(bytes_, at + 28, extra_size)) {
    return invalid_argument("zip entry " + quoted(entry.name) + " has no local header");
  }
  const uint64_t data = at + kLocalHeaderSize + name_size + extra_size;
  if (data > data_end_ || entry.compressed_size > data_end_ - data) {
    return invalid_argument("zip entry " + quoted(entry.name) +
                            " extends beyond the archive's data");
  }
  if (bytes_.substr(at + kLocalHeaderSize, name_size) != entry.name) {
    return invalid_argument("the local header of zip entry " + quoted(entry.name) +
                            " names another entry");
  }
  return bytes_.substr(data, entry.compressed_size);
}

}  // namespace fedcase::formats
