#include "common/spool_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace fedcase {
namespace {

Status failed(const std::string& what, const std::string& dir) {
  return internal_error("cannot " + what + " a spool file in " + dir + ": " +
                        std::strerror(errno));
}

}  // namespace

Result<std::unique_ptr<SpoolFile>> SpoolFile::create(const std::string& dir_config) {
  std::error_code error;
  const std::string dir =
      dir_config.empty() ? std::filesystem::temp_directory_path(error).string() : dir_config;
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR)) {
    // A file system without O_TMPFILE: a named file, unlinked at once.
    std::string name = dir + "/fedcase-spool-XXXXXX";
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.c_str());
  }
  if (fd < 0) return failed("create", dir);
  return std::unique_ptr<SpoolFile>(new SpoolFile(fd, dir));
}

SpoolFile::~SpoolFile() {
  if (mapped_ != nullptr) ::munmap(mapped_, size_);
  if (fd_ >= 0) ::close(fd_);
}

Status SpoolFile::append(std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return failed("write", dir_);
    bytes.remove_prefix(size_t(n));
    size_ += size_t(n);
  }
  return ok_status();
}

Result<char*> SpoolFile::map_writable(size_t bytes) {
  if (size_ != 0 || mapped_ != nullptr) return internal_error("a spool file is mapped once");
  if (bytes == 0) return nullptr;
  // The blocks are taken now: writing to a sparse file's mapping on a full disk kills the
  // process (SIGBUS), where a full disk here is an error.
  if (const int error = ::posix_fallocate(fd_, 0, static_cast<off_t>(bytes)); error != 0) {
    errno = error;
    return failed("reserve " + std::to_string(bytes) + " bytes for", dir_);
  }
  void* mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (mapped == MAP_FAILED) return failed("map", dir_);
  size_ = bytes;
  mapped_ = mapped;
  // The mapping keeps the file; the descriptor is not needed any more (one per buffered
  // update would count against the process's open files).
  ::close(fd_);
  fd_ = -1;
  return static_cast<char*>(mapped);
}

Status SpoolFile::read(uint64_t offset, size_t n, char* out) const {
  if (offset > size_ || n > size_ - offset) {
    return internal_error("a spool file of " + std::to_string(size_) + " bytes has no bytes " +
                          std::to_string(offset) + " to " + std::to_string(offset + n));
  }
  while (n > 0) {
    const ssize_t got = ::pread(fd_, out, n, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return failed("read", dir_);
    if (got == 0) {
      return internal_error("a spool file in " + dir_ + " ended at byte " +
                            std::to_string(offset) + " of the " + std::to_string(size_) +
                            " written to it");
    }
    out += got;
    offset += uint64_t(got);
    n -= size_t(got);
  }
  return ok_status();
}

Result<std::string_view> SpoolFile::map() {
  if (size_ == 0) return std::string_view();
  if (mapped_ == nullptr) {
    void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd_, 0);
    if (mapped == MAP_FAILED) return failed("map", dir_);
    ::madvise(mapped, size_, MADV_SEQUENTIAL);
    mapped_ = mapped;
  }
  return std::string_view(static_cast<const char*>(mapped_), size_);
}

}  // namespace fedcase
