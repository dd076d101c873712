#include "client_sdk/sample_source.h"

namespace fedcase::client {
namespace {

constexpr uint64_t kFnvOffset = 14695981039346656037ull;

uint64_t fnv1a(uint64_t h, std::string_view bytes) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

uint64_t fnv1a(uint64_t h, uint64_t v) {
  const char bytes[8] = {char(v),       char(v >> 8),  char(v >> 16), char(v >> 24),
                         char(v >> 32), char(v >> 40), char(v >> 48), char(v >> 56)};
  return fnv1a(h, std::string_view(bytes, 8));
}

Status out_of_range(size_t id, size_t count) {
  return invalid_argument("sample " + std::to_string(id) + " is outside a source of " +
                          std::to_string(count));
}

}  // namespace

uint64_t SampleSource::fingerprint() const {
  uint64_t h = fnv1a(kFnvOffset, uint64_t(count()));
  for (size_t id = 0; id < count(); ++id) h = fnv1a(h, sample_bytes(id));
  return h;
}

Status MemorySource::read(size_t id, std::string& out) {
  if (id >= records_.size()) return out_of_range(id, records_.size());
  out = records_[id];
  return ok_status();
}

uint64_t MemorySource::fingerprint() const {
  uint64_t h = fnv1a(kFnvOffset, uint64_t(records_.size()));
  for (const std::string& r : records_) h = fnv1a(fnv1a(h, uint64_t(r.size())), r);
  return h;
}

Result<std::unique_ptr<FolderSource>> FolderSource::open(const std::string& dir) {
  auto files = ml::list_sample_files(dir);
  if (!files.ok()) return files.status();
  return std::unique_ptr<FolderSource>(new FolderSource(std::move(files).value()));
}

Status FolderSource::read(size_t id, std::string& out) {
  if (id >= files_.size()) return out_of_range(id, files_.size());
  return ml::read_sample_file(files_[id], out);
}

uint64_t FolderSource::fingerprint() const {
  uint64_t h = fnv1a(kFnvOffset, uint64_t(files_.size()));
  for (const ml::SampleFile& f : files_) h = fnv1a(fnv1a(h, f.relative), f.bytes);
  return h;
}

}  // namespace fedcase::client
