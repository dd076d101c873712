#pragma once
// A fresh directory under the system temp dir, removed with everything in it on destruction.
// Not copyable; its methods may be called from any thread.

#include <filesystem>
#include <string>

namespace fedcase::testing {

class TempDir {
 public:
  // Creates the directory (fedcase-test-<random> under temp_directory_path()). Throws
  // std::filesystem::filesystem_error when it cannot.
  TempDir();
  // Removes the directory and its contents; errors are ignored.
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` in the directory (nothing is created).
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace fedcase::testing
