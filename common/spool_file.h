#pragma once
// A file with no name from its creation on (O_TMPFILE, or created and unlinked at once), so
// that nothing of it outlives the object or the process, used in one of two ways:
//  - written once, a piece at a time, then read a piece at a time (append, then read) or in
//    place (map): an upload session's update assembled from its chunks for its checks and its
//    fold (docs/protocol.md, "Uploads in chunks"), so that no allocation ever holds a whole
//    update, and a float32 one is never resident whole either;
//  - as memory (map_writable): a buffered aggregation rule's copy of an update
//    (docs/aggregation.md, "Memory"), which the kernel may write to the file and drop under
//    memory pressure.
// Its pages are the kernel's page cache, not the process's heap.
//
// Not thread-safe: one user at a time. Errors are kInternal naming the directory and why.

#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fedcase {

class SpoolFile {
 public:
  // A new empty file in `dir` (empty: the system's temporary directory).
  static Result<std::unique_ptr<SpoolFile>> create(const std::string& dir);
  ~SpoolFile();  // unmaps and closes: the file is gone
  SpoolFile(const SpoolFile&) = delete;
  SpoolFile& operator=(const SpoolFile&) = delete;

  // Appends `bytes`; not after map().
  Status append(std::string_view bytes);
  // Everything appended, mapped read-only; valid until the object is destroyed.
  Result<std::string_view> map();
  // Copies the `n` bytes at `offset` of what was appended to `out` (kInternal past the end).
  // Unlike map(), nothing of the file stays resident in the process. May be called from
  // several threads at once (and only then: no append meanwhile).
  Status read(uint64_t offset, size_t n, char* out) const;
  uint64_t size() const { return size_; }
  // `bytes` of zeros, mapped readable and writable; valid until the object is destroyed. Only
  // on a new file, instead of append() and map(). The file's blocks are reserved first (an
  // error when the disk is full, never a fault on a later write); the file then holds no
  // open descriptor.
  Result<char*> map_writable(size_t bytes);

 private:
  SpoolFile(int fd, std::string dir) : fd_(fd), dir_(std::move(dir)) {}
  int fd_;
  std::string dir_;
  size_t size_ = 0;
  void* mapped_ = nullptr;
};

}  // namespace fedcase
