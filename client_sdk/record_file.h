#pragma once
// Fixed-size sample records in one file, read through an optionally emulated slow device: a
// SampleSource for apps whose samples are small and many, and the emulated edge storage of
// the demo fleet and the benchmarks.
//
// File format (little-endian):
//   header   magic "FCRECORD", u32 version (1), u32 record_bytes, u64 count,
//            u64 fingerprint (of the source it was written from), u32 CRC-32 of the header
//            bytes before it
//   records  count x record_bytes, record i at offset header + i * record_bytes
// A record shorter than record_bytes is written zero-padded, and read back padded: the
// format suits records whose reader ignores trailing bytes (the built-in trainer's).

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "client_sdk/sample_source.h"
#include "common/status.h"

namespace fedcase::client {

// How slow the emulated device is. Each read of `n` bytes costs
// read_latency_s + n / read_bytes_per_s seconds of device time.
struct StorageEmulation {
  double read_bytes_per_s = 0;  // 0 = no bandwidth limit
  double read_latency_s = 0;    // per read
  // Whether reads also take that long in wall-clock time (sleeping out the difference), or
  // only account for it. Accounting alone keeps benchmarks short; the figures are the same.
  bool sleep = true;
};

// kInvalidArgument when a speed or the latency is negative or not finite.
Status validate(const StorageEmulation& emulation);

// Writes every record of `source` to a record file at `path` (atomically: a reader sees the
// old file or the new one), each padded to `record_bytes` (0: the largest record). The file
// keeps source.fingerprint(). kInvalidArgument for a record longer than record_bytes or
// record_bytes above 2^32 - 1; kInternal on I/O failure.
Status write_record_file(const std::string& path, SampleSource& source, uint64_t record_bytes);

class RecordFile;

// The record file at `path` holding `source`'s records padded to `record_bytes` (0: the
// largest record), opened with `emulation`: the file there is reused when it already holds
// them (same fingerprint, count and record size), else it is written first. Errors as
// write_record_file and RecordFile::open.
Result<std::unique_ptr<RecordFile>> record_file_of(const std::string& path, SampleSource& source,
                                                   uint64_t record_bytes,
                                                   const StorageEmulation& emulation);

struct ReadStats {
  uint64_t reads = 0;
  uint64_t bytes = 0;
  // Device time of the reads: per read, the emulated cost or the time the real read took,
  // whichever is longer. Without emulation, the real time.
  double io_seconds = 0;
};

// An open record file. Not thread-safe: one reader per client thread.
class RecordFile final : public SampleSource {
 public:
  // kNotFound when `path` does not exist; kInvalidArgument naming the problem for a file that
  // is not a valid record file (magic, version, checksum, size) or a bad emulation;
  // kInternal on I/O errors.
  static Result<std::unique_ptr<RecordFile>> open(const std::string& path,
                                                  const StorageEmulation& emulation = {});
  ~RecordFile() override;
  RecordFile(const RecordFile&) = delete;
  RecordFile& operator=(const RecordFile&) = delete;

  size_t count() const override { return count_; }
  uint64_t sample_bytes(size_t) const override { return record_bytes_; }
  size_t record_bytes() const { return record_bytes_; }
  // The fingerprint of the source the file was written from.
  uint64_t fingerprint() const override { return fingerprint_; }
  // Reads record `id`, taking the emulated time. kInvalidArgument when id >= count();
  // kInternal on an I/O error.
  Status read(size_t id, std::string& out) override;
  double device_seconds() const override { return stats_.io_seconds; }
  const ReadStats& stats() const { return stats_; }

 private:
  using Clock = std::chrono::steady_clock;
  RecordFile(int fd, const StorageEmulation& emulation);

  int fd_;
  StorageEmulation emulation_;
  size_t count_ = 0, record_bytes_ = 0;
  uint64_t fingerprint_ = 0;
  ReadStats stats_;
  // When the emulated device is next idle: reads queue behind each other, so sleep overshoot
  // on one read is absorbed by the next instead of accumulating.
  Clock::time_point device_free_{};
};

}  // namespace fedcase::client
