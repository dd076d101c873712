#pragma once
// Writes a model's named tensors as a NumPy .npz archive: a zip archive of STORED entries, one
// "<name>.npy" file each (NPY format version 1.0, C order; little-endian '<f4', or '<i8' for
// an integer buffer), which numpy.load reads without any other package and any zip tool
// lists; model.load_state_dict({k: torch.from_numpy(v)}) takes it back. Pure; thread-safe.

#include <string>

#include "common/blob.h"
#include "common/status.h"

namespace fedcase::formats {

// The archive of `values` (layout.element_count() floats, in layout order) under the tensors'
// names. kInvalidArgument when `values` does not fit the layout or a tensor's name is empty or
// holds a '/', '\\' or a control character; kTooLarge when an entry or the archive would pass
// the 4 GiB of a zip archive without zip64 records.
Result<std::string> write_npz(const ModelLayout& layout, const std::vector<float>& values);

}  // namespace fedcase::formats
