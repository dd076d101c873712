#include "client_sdk/record_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <thread>

#include "client_sdk/binary_file.h"
#include "common/blob.h"

namespace fedcase::client {
namespace {

constexpr std::string_view kMagic = "FCRECORD";
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 * 2 + 8 * 2 + 4;

std::string header_bytes(uint64_t record_bytes, uint64_t count, uint64_t fingerprint) {
  ByteWriter w;
  w.bytes(kMagic);
  w.u32(kVersion);
  w.u32(static_cast<uint32_t>(record_bytes));
  w.u64(count);
  w.u64(fingerprint);
  w.u32(crc32_of(w.data()));
  return w.data();
}

}  // namespace

Status validate(const StorageEmulation& e) {
  if (!std::isfinite(e.read_bytes_per_s) || e.read_bytes_per_s < 0) {
    return invalid_argument("storage read_bytes_per_s must be a finite number >= 0");
  }
  if (!std::isfinite(e.read_latency_s) || e.read_latency_s < 0) {
    return invalid_argument("storage read_latency_s must be a finite number >= 0");
  }
  return ok_status();
}

Status write_record_file(const std::string& path, SampleSource& source, uint64_t record_bytes) {
  const size_t count = source.count();
  if (record_bytes == 0) {
    for (size_t id = 0; id < count; ++id) {
      record_bytes = std::max(record_bytes, source.sample_bytes(id));
    }
  }
  if (record_bytes == 0 || record_bytes > UINT32_MAX) {
    return invalid_argument("record file records of " + std::to_string(record_bytes) +
                            " bytes are not supported (1 to 2^32 - 1)");
  }
  auto file = AtomicFile::create(path);
  if (!file.ok()) return file.status();
  FEDCASE_RETURN_IF_ERROR(file->append(header_bytes(record_bytes, count, source.fingerprint())));
  // Records go out in chunks of about 1 MiB.
  const size_t per_chunk = std::max<size_t>(1, (1u << 20) / record_bytes);
  std::string chunk, record;
  for (size_t id = 0; id < count; ++id) {
    FEDCASE_RETURN_IF_ERROR(source.read(id, record));
    if (record.size() > record_bytes) {
      return invalid_argument("sample " + std::to_string(id) + " has " +
                              std::to_string(record.size()) + " bytes, more than the " +
                              std::to_string(record_bytes) + "-byte records");
    }
    chunk += record;
    chunk.append(record_bytes - record.size(), '\0');
    if ((id + 1) % per_chunk == 0 || id + 1 == count) {
      FEDCASE_RETURN_IF_ERROR(file->append(chunk));
      chunk.clear();
    }
  }
  return file->commit();
}

Result<std::unique_ptr<RecordFile>> record_file_of(const std::string& path, SampleSource& source,
                                                   uint64_t record_bytes,
                                                   const StorageEmulation& emulation) {
  if (record_bytes == 0) {
    for (size_t id = 0; id < source.count(); ++id) {
      record_bytes = std::max(record_bytes, source.sample_bytes(id));
    }
  }
  auto file = RecordFile::open(path, emulation);
  if (file.ok() && (*file)->fingerprint() == source.fingerprint() &&
      (*file)->record_bytes() == record_bytes && (*file)->count() == source.count()) {
    return file;
  }
  FEDCASE_RETURN_IF_ERROR(write_record_file(path, source, record_bytes));
  return RecordFile::open(path, emulation);
}

RecordFile::RecordFile(int fd, const StorageEmulation& emulation)
    : fd_(fd), emulation_(emulation) {}

RecordFile::~RecordFile() { ::close(fd_); }

Result<std::unique_ptr<RecordFile>> RecordFile::open(const std::string& path,
                                                     const StorageEmulation& emulation) {
  FEDCASE_RETURN_IF_ERROR(validate(emulation));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("record file " + path + " does not exist");
    return internal_error("cannot open record file " + path + ": " + std::strerror(errno));
  }
  std::unique_ptr<RecordFile> file(new RecordFile(fd, emulation));
  auto bad = [&](const std::string& what) {
    return invalid_argument("record file " + path + ": " + what);
  };
  std::string header(kHeaderBytes, '\0');
  if (::pread(fd, header.data(), header.size(), 0) != ssize_t(header.size())) {
    return bad("shorter than its header");
  }
  ByteReader r(header);
  if (r.bytes(kMagic.size()) != kMagic) return bad("not a record file (bad magic)");
  const uint32_t version = r.u32();
  if (version != kVersion) return bad("unsupported version " + std::to_string(version));
  file->record_bytes_ = r.u32();
  const uint64_t count = r.u64();
  file->fingerprint_ = r.u64();
  const size_t checked = r.offset();
  if (r.u32() != crc32_of(std::string_view(header).substr(0, checked))) {
    return bad("header checksum mismatch");
  }
  if (file->record_bytes_ == 0) return bad("records of 0 bytes");
  struct stat st;
  if (::fstat(fd, &st) != 0) return internal_error("cannot stat record file " + path);
  if (count > uint64_t(st.st_size) / file->record_bytes_ ||
      uint64_t(st.st_size) != kHeaderBytes + count * file->record_bytes_) {
    return bad("size " + std::to_string(st.st_size) + " does not match its " +
               std::to_string(count) + " records");
  }
  file->count_ = count;
  return file;
}

Status RecordFile::read(size_t id, std::string& out) {
  if (id >= count_) {
    return invalid_argument("sample " + std::to_string(id) + " is outside a record file of " +
                            std::to_string(count_));
  }
  const Clock::time_point start = Clock::now();
  out.resize(record_bytes_);
  const off_t offset = off_t(kHeaderBytes + uint64_t(id) * record_bytes_);
  size_t done = 0;
  while (done < record_bytes_) {
    ssize_t n = ::pread(fd_, out.data() + done, record_bytes_ - done, offset + off_t(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return internal_error(
          "cannot read sample " + std::to_string(id) + ": " +
          (n == 0 ? std::string("unexpected end of file") : std::strerror(errno)));
    }
    done += size_t(n);
  }
  const Clock::time_point end = Clock::now();
  const double real_s = std::chrono::duration<double>(end - start).count();
  double emulated_s = emulation_.read_latency_s;
  if (emulation_.read_bytes_per_s > 0)
    emulated_s += double(record_bytes_) / emulation_.read_bytes_per_s;
  stats_.reads++;
  stats_.bytes += record_bytes_;
  stats_.io_seconds += std::max(real_s, emulated_s);
  if (emulation_.sleep && emulated_s > real_s) {
    device_free_ = std::max(device_free_, start) + std::chrono::duration_cast<Clock::duration>(
                                                       std::chrono::duration<double>(emulated_s));
    std::this_thread::sleep_until(device_free_);
  }
  return ok_status();
}

}  // namespace fedcase::client
