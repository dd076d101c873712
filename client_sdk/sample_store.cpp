#include "client_sdk/sample_store.h"

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

constexpr std::string_view kMagic = "FCSAMPLE";
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 8 + 4 * 4 + 8 * 2 + 4 * 2;

uint64_t fnv1a(uint64_t h, uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    h ^= (v >> (8 * i)) & 0xff;
    h *= 1099511628211ull;
  }
  return h;
}

std::string header_bytes(size_t rows, size_t cols, uint64_t record_bytes, uint64_t count,
                         uint64_t fingerprint, uint32_t labels_crc) {
  ByteWriter w;
  w.bytes(kMagic);
  w.u32(kVersion);
  w.u32(static_cast<uint32_t>(rows));
  w.u32(static_cast<uint32_t>(cols));
  w.u32(static_cast<uint32_t>(record_bytes));
  w.u64(count);
  w.u64(fingerprint);
  w.u32(labels_crc);
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

uint64_t partition_fingerprint(const ml::Dataset& data, const std::vector<size_t>& indices) {
  uint64_t h = 14695981039346656037ull;
  h = fnv1a(h, data.rows);
  h = fnv1a(h, data.cols);
  h = fnv1a(h, indices.size());
  for (size_t i : indices) {
    h = fnv1a(h, i);
    h = fnv1a(h, i < data.size() ? data.labels[i] : 0xff);
  }
  return h;
}

Status write_sample_store(const std::string& path, const ml::Dataset& data,
                          const std::vector<size_t>& indices, uint64_t record_bytes) {
  const size_t image = data.image_bytes();
  if (record_bytes == 0) record_bytes = image;
  if (record_bytes < image || record_bytes > UINT32_MAX) {
    return invalid_argument("sample store records of " + std::to_string(record_bytes) +
                            " bytes cannot hold " + std::to_string(image) + "-byte images");
  }
  std::string labels;
  labels.reserve(indices.size());
  for (size_t i : indices) {
    if (i >= data.size()) {
      return invalid_argument("sample index " + std::to_string(i) + " is outside a dataset of " +
                              std::to_string(data.size()));
    }
    labels.push_back(static_cast<char>(data.labels[i]));
  }
  auto file = AtomicFile::create(path);
  if (!file.ok()) return file.status();
  FEDCASE_RETURN_IF_ERROR(
      file->append(header_bytes(data.rows, data.cols, record_bytes, indices.size(),
                                partition_fingerprint(data, indices), crc32_of(labels))));
  FEDCASE_RETURN_IF_ERROR(file->append(labels));
  // Records go out in chunks of about 1 MiB.
  const size_t per_chunk = std::max<size_t>(1, (1u << 20) / record_bytes);
  std::string chunk;
  for (size_t k = 0; k < indices.size(); ++k) {
    const char* pixels = reinterpret_cast<const char*>(data.pixels.data()) + indices[k] * image;
    chunk.append(pixels, image);
    chunk.append(record_bytes - image, '\0');
    if ((k + 1) % per_chunk == 0 || k + 1 == indices.size()) {
      FEDCASE_RETURN_IF_ERROR(file->append(chunk));
      chunk.clear();
    }
  }
  return file->commit();
}

SampleStore::SampleStore(int fd, const StorageEmulation& emulation)
    : fd_(fd), emulation_(emulation) {}

SampleStore::~SampleStore() { ::close(fd_); }

Result<std::unique_ptr<SampleStore>> SampleStore::open(const std::string& path,
                                                       const StorageEmulation& emulation) {
  FEDCASE_RETURN_IF_ERROR(validate(emulation));
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return not_found("sample store " + path + " does not exist");
    return internal_error("cannot open sample store " + path + ": " + std::strerror(errno));
  }
  std::unique_ptr<SampleStore> store(new SampleStore(fd, emulation));
  auto bad = [&](const std::string& what) {
    return invalid_argument("sample store " + path + ": " + what);
  };
  std::string header(kHeaderBytes, '\0');
  if (::pread(fd, header.data(), header.size(), 0) != ssize_t(header.size())) {
    return bad("shorter than its header");
  }
  ByteReader r(header);
  if (r.bytes(kMagic.size()) != kMagic) return bad("not a sample store (bad magic)");
  const uint32_t version = r.u32();
  if (version != kVersion) return bad("unsupported version " + std::to_string(version));
  store->rows_ = r.u32();
  store->cols_ = r.u32();
  store->record_bytes_ = r.u32();
  const uint64_t count = r.u64();
  store->fingerprint_ = r.u64();
  const uint32_t labels_crc = r.u32();
  const size_t checked = r.offset();
  if (r.u32() != crc32_of(std::string_view(header).substr(0, checked))) {
    return bad("header checksum mismatch");
  }
  if (store->record_bytes_ == 0 || store->record_bytes_ < store->image_bytes()) {
    return bad("records of " + std::to_string(store->record_bytes_) + " bytes cannot hold " +
               std::to_string(store->image_bytes()) + "-byte images");
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) return internal_error("cannot stat sample store " + path);
  store->data_offset_ = kHeaderBytes + count;
  if (uint64_t(st.st_size) != store->data_offset_ + count * store->record_bytes_) {
    return bad("size " + std::to_string(st.st_size) + " does not match its " +
               std::to_string(count) + " records");
  }
  store->labels_.resize(count);
  if (::pread(fd, store->labels_.data(), count, kHeaderBytes) != ssize_t(count)) {
    return internal_error("cannot read the labels of sample store " + path);
  }
  std::string_view labels(reinterpret_cast<const char*>(store->labels_.data()), count);
  if (crc32_of(labels) != labels_crc) return bad("label checksum mismatch");
  return store;
}

Status SampleStore::read(size_t id, std::string& out) {
  if (id >= size()) {
    return invalid_argument("sample " + std::to_string(id) + " is outside a store of " +
                            std::to_string(size()));
  }
  const Clock::time_point start = Clock::now();
  out.resize(record_bytes_);
  const off_t offset = off_t(data_offset_ + uint64_t(id) * record_bytes_);
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
