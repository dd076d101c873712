#include "client_sdk/binary_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

namespace fedcase::client {
namespace {

std::string os_error(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

// Flushes the directory holding `path`, so a rename into it survives a crash.
void sync_parent_dir(const std::string& path) {
  std::string dir = std::filesystem::path(path).parent_path().string();
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void ByteWriter::u32(uint32_t v) {
  for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void ByteWriter::u64(uint64_t v) {
  for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void ByteWriter::f64(double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  u64(bits);
}

std::string_view ByteReader::bytes(size_t n) {
  if (truncated_ || remaining() < n) {
    truncated_ = true;
    pos_ = in_.size();
    return {};
  }
  std::string_view out = in_.substr(pos_, n);
  pos_ += n;
  return out;
}

uint32_t ByteReader::u32() {
  std::string_view b = bytes(4);
  uint32_t v = 0;
  for (size_t i = 0; i < b.size(); ++i) v |= uint32_t(uint8_t(b[i])) << (8 * i);
  return v;
}

uint64_t ByteReader::u64() {
  std::string_view b = bytes(8);
  uint64_t v = 0;
  for (size_t i = 0; i < b.size(); ++i) v |= uint64_t(uint8_t(b[i])) << (8 * i);
  return v;
}

double ByteReader::f64() {
  uint64_t bits = u64();
  double v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

Result<AtomicFile> AtomicFile::create(const std::string& path) {
  std::random_device rd;
  std::string temp = path + ".tmp-" + std::to_string(rd());
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return internal_error(os_error("cannot create", temp));
  return AtomicFile(path, std::move(temp), fd);
}

AtomicFile::AtomicFile(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : path_(std::move(other.path_)),
      temp_path_(std::move(other.temp_path_)),
      fd_(other.fd_),
      failed_(other.failed_) {
  other.fd_ = -1;
  other.temp_path_.clear();
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
}

Status AtomicFile::append(std::string_view bytes) {
  if (failed_ || fd_ < 0) return internal_error("write to " + temp_path_ + " after a failure");
  while (!bytes.empty()) {
    ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      failed_ = true;
      return internal_error(os_error("cannot write", temp_path_));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return ok_status();
}

Status AtomicFile::commit() {
  if (failed_ || fd_ < 0) return internal_error("cannot commit " + path_ + " after a failure");
  if (::fsync(fd_) != 0) return internal_error(os_error("cannot flush", temp_path_));
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    return internal_error(os_error("cannot rename " + temp_path_ + " to", path_));
  }
  temp_path_.clear();
  sync_parent_dir(path_);
  return ok_status();
}

Status write_file_atomically(const std::string& path, std::string_view bytes) {
  auto file = AtomicFile::create(path);
  if (!file.ok()) return file.status();
  FEDCASE_RETURN_IF_ERROR(file->append(bytes));
  return file->commit();
}

Result<std::string> read_whole_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found(path + " does not exist");
    return internal_error(os_error("cannot open", path));
  }
  std::string out;
  char buffer[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = internal_error(os_error("cannot read", path));
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace fedcase::client
