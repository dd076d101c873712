#pragma once
// A client's local training samples on disk, read through an emulated slow device.
//
// File format (little-endian), one file per client partition:
//   header   magic "FCSAMPLE", u32 version (1), u32 rows, u32 cols, u32 record_bytes,
//            u64 count, u64 fingerprint (of the partition it was written from),
//            u32 CRC-32 of the label table, u32 CRC-32 of the header bytes before it
//   labels   count bytes, the class of each sample
//   records  count x record_bytes: the rows*cols image bytes of sample i, zero-padded to
//            record_bytes, at offset header + count + i * record_bytes
// Sample i of the store is sample indices[i] of the dataset it was written from. Labels are
// small and loaded at open; reading a sample reads its whole record, which is what the
// emulated device charges for.

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "ml/dataset.h"

namespace fedcase::client {

// How slow the emulated storage is. Each read of `n` bytes costs
// read_latency_s + n / read_bytes_per_s seconds of device time.
struct StorageEmulation {
  uint64_t sample_bytes = 0;    // bytes per stored sample (>= image bytes); 0 = the image size
  double read_bytes_per_s = 0;  // 0 = no bandwidth limit
  double read_latency_s = 0;    // per read
  // Whether reads also take that long in wall-clock time (sleeping out the difference), or
  // only account for it. Accounting alone keeps benchmarks short; the figures are the same.
  bool sleep = true;
};

// kInvalidArgument when a speed or the latency is negative or not finite.
Status validate(const StorageEmulation& emulation);

// A 64-bit fingerprint of the partition `indices` of `data` (image size, indices, labels), to
// tell whether a store or a saved client state describes this partition.
uint64_t partition_fingerprint(const ml::Dataset& data, const std::vector<size_t>& indices);

// Writes the samples `indices` of `data` to a store at `path` (atomically: a reader sees the
// old file or the new one). `record_bytes` = 0 means the image size. kInvalidArgument for an
// index out of range or record_bytes smaller than an image; kInternal on I/O failure.
Status write_sample_store(const std::string& path, const ml::Dataset& data,
                          const std::vector<size_t>& indices, uint64_t record_bytes);

struct ReadStats {
  uint64_t reads = 0;
  uint64_t bytes = 0;
  // Device time of the reads: per read, the emulated cost or the time the real read took,
  // whichever is longer. Without emulation, the real time.
  double io_seconds = 0;
};

// An open store. Not thread-safe: one reader per client thread.
class SampleStore {
 public:
  // kNotFound when `path` does not exist; kInvalidArgument naming the problem for a file that
  // is not a valid store (magic, version, checksums, size); kInternal on I/O errors.
  static Result<std::unique_ptr<SampleStore>> open(const std::string& path,
                                                   const StorageEmulation& emulation);
  ~SampleStore();
  SampleStore(const SampleStore&) = delete;
  SampleStore& operator=(const SampleStore&) = delete;

  size_t size() const { return labels_.size(); }
  size_t rows() const { return rows_; }
  size_t cols() const { return cols_; }
  size_t image_bytes() const { return rows_ * cols_; }
  size_t record_bytes() const { return record_bytes_; }
  uint64_t fingerprint() const { return fingerprint_; }
  uint8_t label(size_t id) const { return labels_[id]; }

  // Reads the record of sample `id` into `out` (resized to record_bytes()), taking the
  // emulated time. kInvalidArgument when id >= size(); kInternal on an I/O error.
  Status read(size_t id, std::string& out);
  const ReadStats& stats() const { return stats_; }

 private:
  using Clock = std::chrono::steady_clock;
  SampleStore(int fd, const StorageEmulation& emulation);

  int fd_;
  StorageEmulation emulation_;
  size_t rows_ = 0, cols_ = 0, record_bytes_ = 0;
  uint64_t fingerprint_ = 0;
  uint64_t data_offset_ = 0;
  std::vector<uint8_t> labels_;
  ReadStats stats_;
  // When the emulated device is next idle: reads queue behind each other, so sleep overshoot
  // on one read is absorbed by the next instead of accumulating.
  Clock::time_point device_free_{};
};

}  // namespace fedcase::client
