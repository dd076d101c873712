#pragma once
// Folders of sample files, one sample a file: the layout of an app's FolderSource
// (client_sdk/sample_source.h) and of the coordinator's server datasets. No torch here.

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"

namespace fedcase::ml {

struct SampleFile {
  std::string path;      // as opened
  std::string relative;  // to the folder: the sort key
  uint64_t bytes = 0;    // size when listed
};

// Every regular file under `dir` (sub-folders included, symbolic links not followed), in
// relative path order. kNotFound when `dir` is not a folder; kInvalidArgument when it holds no
// files; kInternal when it cannot be listed.
Result<std::vector<SampleFile>> list_sample_files(const std::string& dir);

// Reads `file` whole into `out`. kInternal when it cannot be read or its size is no longer
// file.bytes.
Status read_sample_file(const SampleFile& file, std::string& out);

}  // namespace fedcase::ml
