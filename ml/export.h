#pragma once
// A job's trained model as a file its users take away: a TorchScript archive that
// torch.jit.load reads (docs/protocol.md, "Model export"). torch stays behind this header.

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fedcase::ml {

// The parameters `params` (in layout order) of a model of `kind`, as a TorchScript archive:
// for "torchscript", the job's `module` (the archive its clients run) with these parameters;
// for a built-in kind ("cnn", "mlp"), Model::to_torchscript. Errors: kInvalidArgument for an
// unknown kind or a module that does not load, kUnprocessable when `params` does not fit the
// model, kInternal when libtorch fails to write it. Thread-safe (nothing shared).
Result<std::string> export_torchscript(const std::string& kind, std::string_view module,
                                       const std::vector<float>& params);

}  // namespace fedcase::ml
