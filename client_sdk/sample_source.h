#pragma once
// An app's local data, as the SDK sees it: samples 0..count()-1, each an opaque record of
// bytes that the app's Trainer knows how to read (for TorchScriptTrainer: float32 values,
// docs/client_sdk.md "Sample records"). The SDK reads samples through its importance sampler
// and cache: a source is asked only for the records the cache does not hold.
//
// Implement SampleSource over your own storage, or use a ready one: MemorySource (records in
// memory), FolderSource (one file a sample), RecordFile (record_file.h: fixed-size records in
// one file, with an optional emulated slow device).
//
// Thread safety: a source is used by one session thread at a time; it need not be
// thread-safe. The SDK never keeps a reference to a record beyond the read.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "ml/sample_files.h"

namespace fedcase::client {

class SampleSource {
 public:
  virtual ~SampleSource() = default;

  // The number of samples; constant for the life of the source.
  virtual size_t count() const = 0;
  // The size of sample `id`'s record in bytes (what the cache is charged for it).
  // Precondition: id < count().
  virtual uint64_t sample_bytes(size_t id) const = 0;
  // Reads sample `id`'s whole record into `out` (resized to fit). kInvalidArgument for
  // id >= count(); kInternal on an I/O error.
  virtual Status read(size_t id, std::string& out) = 0;

  // Identifies the data, so that state the SDK saved for it (the sampler's weights) is reused
  // only for the same samples. The default hashes count() and every sample_bytes(id); a
  // source whose records can change at equal sizes should hash more.
  virtual uint64_t fingerprint() const;
  // The device seconds all reads so far took, for a source that emulates or measures its
  // device; a negative value (the default) lets the SDK time the reads itself.
  virtual double device_seconds() const { return -1; }
};

// Records held in memory, read by copying.
class MemorySource final : public SampleSource {
 public:
  explicit MemorySource(std::vector<std::string> records) : records_(std::move(records)) {}
  size_t count() const override { return records_.size(); }
  uint64_t sample_bytes(size_t id) const override { return records_[id].size(); }
  Status read(size_t id, std::string& out) override;
  uint64_t fingerprint() const override;  // hashes the records' bytes

 private:
  std::vector<std::string> records_;
};

// Every regular file under a folder (sub-folders included, symbolic links not followed), in
// path order, one sample a file.
class FolderSource final : public SampleSource {
 public:
  // Lists `dir`. kNotFound when it is not a folder; kInvalidArgument when it holds no files.
  static Result<std::unique_ptr<FolderSource>> open(const std::string& dir);

  size_t count() const override { return files_.size(); }
  uint64_t sample_bytes(size_t id) const override { return files_[id].bytes; }
  // kInternal when the file cannot be read or its size changed since open().
  Status read(size_t id, std::string& out) override;
  uint64_t fingerprint() const override;  // hashes the relative paths and sizes

 private:
  explicit FolderSource(std::vector<ml::SampleFile> files) : files_(std::move(files)) {}
  std::vector<ml::SampleFile> files_;
};

}  // namespace fedcase::client
