#pragma once
// Small helpers for the SDK's binary files (record files, client state): little-endian field
// encoding, whole-file reads, and atomic replacement (write a temporary file next to the
// target, flush it to disk, rename it over the target). Not thread-safe per object.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fedcase::client {

// Appends fixed-width little-endian fields to a byte string.
class ByteWriter {
 public:
  void u32(uint32_t v);
  void u64(uint64_t v);
  void f64(double v);
  void bytes(std::string_view b) { out_.append(b); }
  const std::string& data() const { return out_; }

 private:
  std::string out_;
};

// Reads fixed-width little-endian fields from a byte string it does not own. A read past the
// end yields zero and sets truncated(); callers check once at the end.
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}
  uint32_t u32();
  uint64_t u64();
  double f64();
  std::string_view bytes(size_t n);
  size_t offset() const { return pos_; }
  size_t remaining() const { return in_.size() - pos_; }
  bool truncated() const { return truncated_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
  bool truncated_ = false;
};

// A file written under a temporary name and renamed over `path` by commit(), so readers see
// either the old content or the new, never a mix. Destroying it uncommitted removes the
// temporary file and leaves `path` untouched.
class AtomicFile {
 public:
  // kInternal (with the OS error) when the temporary file cannot be created.
  static Result<AtomicFile> create(const std::string& path);
  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  ~AtomicFile();

  // kInternal on a failed write; the file is then unusable and commit() fails too.
  Status append(std::string_view bytes);
  // Flushes to disk, renames over the target and flushes the directory. kInternal on failure.
  Status commit();

 private:
  AtomicFile(std::string path, std::string temp_path, int fd);
  std::string path_, temp_path_;
  int fd_ = -1;
  bool failed_ = false;
};

// Writes `bytes` to `path` through an AtomicFile.
Status write_file_atomically(const std::string& path, std::string_view bytes);

// The whole content of `path`. kNotFound when it does not exist, kInternal on other errors.
Result<std::string> read_whole_file(const std::string& path);

}  // namespace fedcase::client
