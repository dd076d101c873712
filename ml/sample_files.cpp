#include "ml/sample_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace fedcase::ml {

Result<std::vector<SampleFile>> list_sample_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("sample folder " + dir + " is not a folder");
  std::vector<SampleFile> files;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::end(it);
       it.increment(ec)) {
    if (!it->is_regular_file(ec) || it->is_symlink(ec)) continue;
    const uint64_t bytes = it->file_size(ec);
    if (ec) break;
    files.push_back({it->path().string(), fs::relative(it->path(), dir, ec).string(), bytes});
  }
  if (ec) return internal_error("cannot list sample folder " + dir + ": " + ec.message());
  if (files.empty()) return invalid_argument("sample folder " + dir + " holds no files");
  std::sort(files.begin(), files.end(),
            [](const SampleFile& a, const SampleFile& b) { return a.relative < b.relative; });
  return files;
}

Status read_sample_file(const SampleFile& file, std::string& out) {
  std::ifstream in(file.path, std::ios::binary);
  out.resize(file.bytes);
  if (!in.read(out.data(), std::streamsize(file.bytes)) || in.peek() != EOF) {
    return internal_error("cannot read sample file " + file.path +
                          " (missing, unreadable or resized since the folder was listed)");
  }
  return ok_status();
}

}  // namespace fedcase::ml
