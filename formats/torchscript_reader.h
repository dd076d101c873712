#pragma once
// Reads the parameters and buffers of a TorchScript module (a file written by torch.jit.save or
// torch::jit::Module::save) without torch, so the coordinator can validate an uploaded model
// and take its initial parameters from it. The archive goes through formats/zip_reader.h, its
// data.pkl through formats/pickle_reader.h; this reader walks the module tree they give.
//
// The format, as torch 1.13 writes it:
//  - A zip archive whose entries all lie under one folder <root>/ (the saved file's stem);
//    data and pickles are STORED, code is DEFLATEd (formats/zip_reader.h).
//  - <root>/data.pkl: the module object as a pickle of protocol 2. An object is
//    GLOBAL '<module> <Class>', EMPTY_TUPLE, NEWOBJ, a dict of its attributes in slot order
//    (parameters, buffers, the other attributes, then submodules, which are objects the same
//    way), BUILD. A tensor is REDUCE of GLOBAL 'torch._utils _rebuild_tensor_v2' over
//    (storage, storage_offset, sizes, strides, requires_grad, hooks), where storage is a
//    BINPERSID of ('storage', GLOBAL 'torch <Type>Storage', key, device, element count) naming
//    the entry <root>/data/<key> that holds the storage's raw little-endian elements.
//  - <root>/code/: the TorchScript source of the classes. Class '__torch__.a.b C' is defined
//    in <root>/code/__torch__/a/b.py (a file may define several classes) as
//    `class C(Module):` with a line `  __parameters__ = ["weight", "bias", ]` naming the
//    attributes that are parameters and a line `  __buffers__ = ["running_mean", ...]` naming
//    those that are buffers.
//
// The parameters come first, in the order and under the names of
// torch::jit::Module::named_parameters(/*recurse=*/true): depth-first over each module's
// attributes in slot order, a submodule's parameters ("fc1.weight") in place of the submodule;
// then the buffers, the same way (named_buffers). A tensor that is None (nn.Linear's bias with
// bias=False) is skipped, like torch skips it; a tensor that two modules share is returned
// under each name, like torch returns it. A float32 buffer is a TensorKind::kFloatBuffer, an
// int64 one (BatchNorm's num_batches_tracked) a kIntegerBuffer converted to float32.

#include <cstddef>
#include <string_view>

#include "common/blob.h"
#include "common/status.h"

namespace fedcase::formats {

// Bounds on what reading one archive may take; the defaults admit models of up to 16M
// parameters.
struct TorchScriptLimits {
  // The archive's size, and the size its compressed entries inflate to, together.
  size_t max_bytes = size_t{64} << 20;
  // The parameters and buffers returned, and their values together.
  size_t max_tensors = kMaxTensors;
  size_t max_elements = size_t{16} << 20;
  // The size of <root>/data.pkl. Decoding it takes up to about 70 bytes of memory per byte.
  size_t max_pickle_bytes = size_t{2} << 20;
  // The size of the class sources the module's classes need, together, inflated.
  size_t max_code_bytes = size_t{4} << 20;
  // How deep submodules may nest below the root module; reading recurses once per level.
  size_t max_module_depth = 32;
};

// The float32 parameters and the buffers of the TorchScript module in `archive`, as a
// ModelBlob of model_version 0 whose layout has torch's names, shapes and kinds and whose data
// holds the values concatenated in that order.
//
// Pure: keeps no state and may be called from any thread. Never reads outside `archive`,
// never recurses deeper than limits.max_module_depth, and allocates memory bounded by the
// limits: the pickle's stack, memo and values are bounded by its size. Throws nothing but
// std::bad_alloc.
//
// Errors:
//  - kTooLarge: `archive` is longer than limits.max_bytes.
//  - kUnprocessable: a parameter or buffer holds NaN or infinity, or an int64 buffer a value
//    past 2^24 (the message names it).
//  - kInvalidArgument, with a message that names the entry, opcode, class or parameter at
//    fault, for anything else: not a zip archive (or a multi-disk, encrypted or otherwise
//    unsupported one); not a TorchScript archive (no <root>/data.pkl or no <root>/code/); a
//    corrupt entry (CRC-32); an unsupported pickle protocol or opcode, or a malformed pickle;
//    a module whose class has no code, whose state is custom (__getstate__), or that is met
//    twice (a shared or cyclic submodule); a parameter that is not a dense float32 tensor or a
//    buffer that is not a dense float32 or int64 one (the message names its dtype); strides that are not contiguous (row-major); a storage entry
//    whose size differs from its element count, or a view beyond its storage; a module with
//    no parameters; anything over a limit (more parameters or values, a larger data.pkl or
//    code, deeper submodules, more inflated bytes) or over what a model blob can hold (a rank
//    over kMaxTensorRank, a name over kMaxTensorNameBytes).
Result<ModelBlob> read_torchscript_model(std::string_view archive,
                                         const TorchScriptLimits& limits);

}  // namespace fedcase::formats
