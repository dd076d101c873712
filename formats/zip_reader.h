#pragma once
// Reads the entries of a zip archive held in memory, as torch writes TorchScript archives
// (torch 1.13): entries are found through the central directory (with its zip64 records,
// which torch writes even for small files); sizes come from the central directory, since
// torch sets the data-descriptor flag and leaves the local headers' sizes at zero; data starts
// after the local header's own name and extra field (which torch pads so that data is
// aligned). Entries are STORED or DEFLATEd, and every entry read is checked against its
// CRC-32, as libtorch does. Multi-disk and encrypted archives are refused.
//
// Never reads outside the archive's bytes; inflates at most the budget it is given.

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/status.h"

namespace fedcase::formats {

// One entry of the central directory. `name` views the archive's bytes.
struct ZipEntry {
  std::string_view name;
  uint16_t flags = 0;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed_size = 0;
  uint64_t size = 0;
  uint64_t local_header_offset = 0;
};

// The entries of one archive, and the data of those read so far. Not thread-safe; keeps views
// of the bytes given to open(), which must outlive it. Not copyable (it hands out views of
// what it inflated).
class ZipArchive {
 public:
  // Inflates at most `max_inflated_bytes`, all entries together.
  explicit ZipArchive(uint64_t max_inflated_bytes) : inflate_budget_(max_inflated_bytes) {}
  ZipArchive(const ZipArchive&) = delete;
  ZipArchive& operator=(const ZipArchive&) = delete;

  // Indexes the central directory of `bytes`. kInvalidArgument ("not a zip archive: ...",
  // or naming the entry at fault) for a missing or malformed end record or directory, an
  // archive over several disks, zip64 fields without their records, or two entries of one
  // name.
  Status open(std::string_view bytes);

  // In the central directory's order.
  const std::vector<ZipEntry>& entries() const { return entries_; }
  // The entry named `name`; null when there is none.
  const ZipEntry* find(std::string_view name) const;

  // The data of `entry` (one of entries()), inflated if it is compressed and checked against
  // its CRC-32. The view lives as long as the archive and its bytes; reading an entry again
  // returns the same view. kInvalidArgument, naming the entry, when it is larger than
  // `max_size` bytes or than what is left of the inflation budget, encrypted, compressed
  // with a method other than STORED or DEFLATE, lies outside the archive's data, has no
  // matching local header, does not inflate to its size, or fails its CRC-32 check.
  Result<std::string_view> read(const ZipEntry& entry, uint64_t max_size);

 private:
  Result<std::string_view> stored_data(const ZipEntry& entry) const;

  std::string_view bytes_;
  uint64_t data_end_ = 0;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string_view, size_t> index_;
  std::unordered_map<const ZipEntry*, std::string_view> read_;
  uint64_t inflate_budget_;
  std::deque<std::string> inflated_;
};

}  // namespace fedcase::formats
