#include "formats/torchscript_reader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "formats/bytes.h"
#include "formats/pickle_reader.h"
#include "formats/zip_reader.h"

namespace fedcase::formats {
namespace {

using pickle::global_dotted;
using pickle::global_module;
using pickle::global_name;
using pickle::Kind;
using pickle::kind_name;
using pickle::kNoValue;
using pickle::Unpickled;
using pickle::Value;
using pickle::ValueId;

// What a class's source declares: whether it is a module, and its parameters' and buffers'
// names.
struct ClassDeclaration {
  bool is_module = false;
  std::set<std::string_view> parameters;
  std::set<std::string_view> buffers;
};

// Parses the list after `__parameters__ = ` or `__buffers__ = `, as torch prints it:
// ["weight", "bias", ].
Result<std::set<std::string_view>> parse_name_list(std::string_view list) {
  const Status malformed = invalid_argument("malformed name list: " + std::string(list));
  std::set<std::string_view> names;
  if (list.empty() || list[0] != '[') return malformed;
  size_t at = 1;
  for (;;) {
    while (at < list.size() && list[at] == ' ') ++at;
    if (at == list.size()) return malformed;
    if (list[at] == ']') return names;
    if (list[at] != '"') return malformed;
    const size_t close = list.find('"', at + 1);
    if (close == std::string_view::npos) return malformed;
    const std::string_view name = list.substr(at + 1, close - at - 1);
    if (name.find('\\') != std::string_view::npos) return malformed;
    names.insert(name);
    at = close + 1;
    while (at < list.size() && list[at] == ' ') ++at;
    if (at < list.size() && list[at] == ',') ++at;
  }
}

// Finds `class <name>` in `source`, a code file as torch prints it: the class line at the
// start of a line, its body indented.
Result<ClassDeclaration> parse_class(std::string_view source, std::string_view name,
                                     const std::string& file) {
  constexpr std::string_view kParametersLine = "  __parameters__ = ";
  constexpr std::string_view kBuffersLine = "  __buffers__ = ";
  const std::string header = "class " + std::string(name);
  bool in_class = false, found_parameters = false;
  ClassDeclaration declaration;
  for (size_t at = 0; at < source.size();) {
    const size_t end = std::min(source.find('\n', at), source.size());
    const std::string_view line = source.substr(at, end - at);
    at = end + 1;
    if (in_class) {
      if (!line.empty() && line[0] != ' ') break;  // the class's body has ended
      if (line.substr(0, kParametersLine.size()) == kParametersLine) {
        auto names = parse_name_list(line.substr(kParametersLine.size()));
        if (!names.ok()) return invalid_argument(file + ": " + names.status().message());
        declaration.parameters = std::move(*names);
        found_parameters = true;
      } else if (line.substr(0, kBuffersLine.size()) == kBuffersLine) {
        auto names = parse_name_list(line.substr(kBuffersLine.size()));
        if (!names.ok()) return invalid_argument(file + ": " + names.status().message());
        declaration.buffers = std::move(*names);
      }
    } else if (line.substr(0, header.size()) == header && line.size() > header.size() &&
               (line[header.size()] == '(' || line[header.size()] == ':')) {
      in_class = true;
      declaration.is_module = line.substr(header.size()) == "(Module):";
    }
  }
  if (!in_class) return invalid_argument(file + " defines no class " + quoted(name));
  if (declaration.is_module && !found_parameters) {
    return invalid_argument(file + ": module class " + quoted(name) +
                            " declares no __parameters__");
  }
  return declaration;
}

// ---- Tensors --------------------------------------------------------------------------------

constexpr std::string_view kTorchScriptPrefix = "__torch__";

// The dtype torch names a storage type after, for messages.
std::string dtype_of_storage(std::string_view storage) {
  static constexpr std::pair<std::string_view, std::string_view> kDtypes[] = {
      {"FloatStorage", "float32"},
      {"DoubleStorage", "float64"},
      {"HalfStorage", "float16"},
      {"BFloat16Storage", "bfloat16"},
      {"LongStorage", "int64"},
      {"IntStorage", "int32"},
      {"ShortStorage", "int16"},
      {"CharStorage", "int8"},
      {"ByteStorage", "uint8"},
      {"BoolStorage", "bool"},
      {"ComplexFloatStorage", "complex64"},
      {"ComplexDoubleStorage", "complex128"},
  };
  for (const auto& [name, dtype] : kDtypes) {
    if (name == storage) return std::string(dtype);
  }
  return "of torch." + std::string(storage);
}

// A parameter or buffer found, and its elements in the archive (float32, or int64 for an
// integer buffer).
struct FoundTensor {
  TensorSpec spec;
  std::string_view elements;
  size_t count() const {
    return elements.size() / (spec.kind == TensorKind::kIntegerBuffer ? sizeof(int64_t)
                                                                      : sizeof(float));
  }
};

// Walks the module tree the pickle built, in named_parameters (named_buffers) order, and finds
// each parameter's (buffer's) storage in the archive.
class TensorFinder {
 public:
  TensorFinder(ZipArchive& archive, const Unpickled& pickle, std::string root,
                  const TorchScriptLimits& limits)
      : archive_(archive), pickle_(pickle), root_(std::move(root)), limits_(limits) {}

  Status find_in_root(ValueId root) {
    const Value& module = pickle_[root];
    if (module.kind != Kind::kObject) {
      return invalid_argument(std::string("data.pkl holds a ") + kind_name(module.kind) +
                              ", not a module object");
    }
    auto declaration = declaration_of(module);
    if (!declaration.ok()) return declaration.status();
    if (*declaration == nullptr || !(*declaration)->is_module) {
      return invalid_argument("data.pkl holds an object of class " +
                              global_dotted(pickle_[module.first]) + ", not a module");
    }
    return find_in_module(root, **declaration, "", 0);
  }

  const std::vector<FoundTensor>& parameters() const { return parameters_; }
  const std::vector<FoundTensor>& buffers() const { return buffers_; }
  uint64_t element_count() const { return element_count_; }

 private:
  // The declaration of `object`'s class; null for a class outside TorchScript's __torch__
  // namespace, which cannot be a module.
  Result<const ClassDeclaration*> declaration_of(const Value& object) {
    const Value& type = pickle_[object.first];
    const std::string dotted = global_dotted(type);
    auto cached = declarations_.find(dotted);
    if (cached != declarations_.end()) return &cached->second;
    const std::string_view module = global_module(type);
    if (module.substr(0, kTorchScriptPrefix.size()) != kTorchScriptPrefix ||
        (module.size() > kTorchScriptPrefix.size() && module[kTorchScriptPrefix.size()] != '.')) {
      return static_cast<const ClassDeclaration*>(nullptr);
    }
    std::string file = root_ + "/code/" + std::string(module) + ".py";
    for (size_t i = root_.size() + 6; i < file.size() - 3; ++i) {
      if (file[i] == '.') file[i] = '/';
    }
    const ZipEntry* entry = archive_.find(file);
    if (entry == nullptr) {
      return invalid_argument("no code for class " + quoted(dotted) + " (no " + file + ")");
    }
    if (code_files_.insert(file).second) {
      if (entry->size > limits_.max_code_bytes - code_bytes_) {
        return invalid_argument("the code the module's classes need exceeds the limit of " +
                                std::to_string(limits_.max_code_bytes) + " bytes");
      }
      code_bytes_ += entry->size;
    }
    auto source = archive_.read(*entry, limits_.max_code_bytes);
    if (!source.ok()) return source.status();
    auto declaration = parse_class(*source, global_name(type), file);
    if (!declaration.ok()) return declaration.status();
    return &declarations_.emplace(dotted, std::move(*declaration)).first->second;
  }

  Status find_in_module(ValueId id, const ClassDeclaration& declaration, const std::string& path,
                        size_t depth) {
    const std::string where = path.empty() ? "the root module" : "module " + quoted(path);
    if (!visited_.insert(id).second) {
      return invalid_argument(where +
                              " is a module object met before; shared or cyclic "
                              "submodules are not supported");
    }
    const Value& module = pickle_[id];
    if (module.second == kNoValue) return invalid_argument(where + " has no state (no BUILD)");
    const Value& state = pickle_[module.second];
    if (state.kind != Kind::kDict) {
      return invalid_argument(where + " has a custom state (a " + kind_name(state.kind) +
                              ", from __getstate__), which is not supported");
    }
    std::set<std::string_view> attributes;
    for (size_t i = 0; i + 1 < state.items.size(); i += 2) {
      const Value& key = pickle_[state.items[i]];
      const ValueId value_id = state.items[i + 1];
      if (key.kind != Kind::kString) {
        return invalid_argument(where + " has an attribute named by a " + kind_name(key.kind));
      }
      if (key.text.empty()) return invalid_argument(where + " has an attribute with no name");
      if (!attributes.insert(key.text).second) {
        return invalid_argument(where + " sets attribute " + quoted(key.text) + " twice");
      }
      const std::string name =
          path.empty() ? std::string(key.text) : path + "." + std::string(key.text);
      if (declaration.parameters.count(key.text) > 0) {
        FEDCASE_RETURN_IF_ERROR(find_tensor(name, /*buffer=*/false, pickle_[value_id]));
        continue;
      }
      if (declaration.buffers.count(key.text) > 0) {
        FEDCASE_RETURN_IF_ERROR(find_tensor(name, /*buffer=*/true, pickle_[value_id]));
        continue;
      }
      const Value& value = pickle_[value_id];
      if (value.kind != Kind::kObject) continue;
      auto submodule = declaration_of(value);
      if (!submodule.ok()) return submodule.status();
      if (*submodule == nullptr || !(*submodule)->is_module) continue;
      if (depth == limits_.max_module_depth) {
        return invalid_argument("submodule " + quoted(name) + " lies " + std::to_string(depth + 1) +
                                " levels deep, past the limit of " +
                                std::to_string(limits_.max_module_depth));
      }
      FEDCASE_RETURN_IF_ERROR(find_in_module(value_id, **submodule, name, depth + 1));
    }
    return ok_status();
  }

  // The non-negative integers of `tuple` (sizes or strides).
  static bool read_dims(const Unpickled& pickle, const Value& tuple, std::vector<uint64_t>& dims) {
    if (tuple.kind != Kind::kTuple) return false;
    for (ValueId item : tuple.items) {
      const Value& dim = pickle[item];
      if (dim.kind != Kind::kInt || dim.integer < 0) return false;
      dims.push_back(static_cast<uint64_t>(dim.integer));
    }
    return true;
  }

  Status find_tensor(const std::string& name, bool buffer, const Value& tensor) {
    if (tensor.kind == Kind::kNone) return ok_status();  // an unset optional tensor
    const std::string parameter = (buffer ? "buffer " : "parameter ") + quoted(name);
    if (parameters_.size() + buffers_.size() == limits_.max_tensors) {
      return invalid_argument("the module has more than " + std::to_string(limits_.max_tensors) +
                              " parameters and buffers");
    }
    if (name.size() > kMaxTensorNameBytes) {
      return invalid_argument(parameter + " has a name longer than " +
                              std::to_string(kMaxTensorNameBytes) + " bytes");
    }
    if (tensor.kind != Kind::kReduce) {
      return invalid_argument(parameter + " is a " + kind_name(tensor.kind) + ", not a tensor");
    }
    const Value& rebuild = pickle_[tensor.first];
    if (global_module(rebuild) != "torch._utils" || global_name(rebuild) != "_rebuild_tensor_v2") {
      return invalid_argument(parameter + " is not a dense tensor (it is built by " +
                              global_dotted(rebuild) + ")");
    }
    const std::vector<ValueId>& arguments = pickle_[tensor.second].items;
    const Status malformed = invalid_argument(parameter + " has malformed tensor arguments");
    if (arguments.size() < 4 || pickle_[arguments[0]].kind != Kind::kPersistentId) {
      return malformed;
    }
    // ('storage', torch.<Type>Storage, key, device, element count)
    const Value& storage_id = pickle_[pickle_[arguments[0]].first];
    const std::vector<ValueId>& id = storage_id.items;
    if (storage_id.kind != Kind::kTuple || id.size() != 5 || pickle_[id[0]].kind != Kind::kString ||
        pickle_[id[0]].text != "storage" || pickle_[id[1]].kind != Kind::kGlobal ||
        pickle_[id[2]].kind != Kind::kString || pickle_[id[3]].kind != Kind::kString ||
        pickle_[id[4]].kind != Kind::kInt || pickle_[id[4]].integer < 0) {
      return invalid_argument(parameter + " has a malformed storage id");
    }
    const Value& storage_type = pickle_[id[1]];
    const bool is_float = global_module(storage_type) == "torch" &&
                          global_name(storage_type) == "FloatStorage";
    const bool is_int64 = buffer && global_module(storage_type) == "torch" &&
                          global_name(storage_type) == "LongStorage";
    if (!is_float && !is_int64) {
      return invalid_argument(parameter + " has dtype " +
                              dtype_of_storage(global_name(storage_type)) + " (" +
                              global_dotted(storage_type) + "); only float32 parameters and " +
                              "float32 or int64 buffers are supported");
    }
    const TensorKind kind = !buffer    ? TensorKind::kParameter
                            : is_float ? TensorKind::kFloatBuffer
                                       : TensorKind::kIntegerBuffer;
    const size_t element_size = is_float ? sizeof(float) : sizeof(int64_t);
    const Value& offset = pickle_[arguments[1]];
    std::vector<uint64_t> sizes, strides;
    if (offset.kind != Kind::kInt || offset.integer < 0 ||
        !read_dims(pickle_, pickle_[arguments[2]], sizes) ||
        !read_dims(pickle_, pickle_[arguments[3]], strides) || sizes.size() != strides.size()) {
      return malformed;
    }
    if (sizes.size() > kMaxTensorRank) {
      return invalid_argument(parameter + " has rank " + std::to_string(sizes.size()) +
                              ", more than " + std::to_string(kMaxTensorRank));
    }
    // The element count, computed without overflow: over the budget is too many.
    const uint64_t budget = limits_.max_elements - element_count_;
    uint64_t elements = 1;
    for (uint64_t size : sizes) elements = size == 0 ? 0 : elements;
    for (size_t i = 0; i < sizes.size() && elements > 0 && elements <= budget; ++i) {
      elements = elements > budget / sizes[i] ? budget + 1 : elements * sizes[i];
    }
    if (elements > budget) {
      return invalid_argument("the module's parameters and buffers hold more than " +
                              std::to_string(limits_.max_elements) + " values");
    }
    // Contiguous as torch defines it: row-major strides, ignoring dimensions of size 1.
    uint64_t expected_stride = 1;
    for (size_t i = sizes.size(); i-- > 0 && elements > 0;) {
      if (sizes[i] == 1) continue;
      if (strides[i] != expected_stride) {
        return invalid_argument(parameter + " is not contiguous (its strides are not row-major)");
      }
      expected_stride *= sizes[i];
    }
    auto storage =
        storage_bytes(parameter, pickle_[id[2]].text, pickle_[id[4]].integer, element_size);
    if (!storage.ok()) return storage.status();
    const uint64_t storage_elements = storage->size() / element_size;
    const uint64_t first = static_cast<uint64_t>(offset.integer);
    if (first > storage_elements || elements > storage_elements - first) {
      return invalid_argument(parameter + " views elements [" + std::to_string(first) + ", " +
                              std::to_string(first + elements) + ") of a storage of " +
                              std::to_string(storage_elements));
    }
    (buffer ? buffers_ : parameters_)
        .push_back({TensorSpec{name, std::move(sizes), kind},
                    storage->substr(first * element_size, elements * element_size)});
    element_count_ += elements;
    return ok_status();
  }

  // The bytes of storage `key`, which must hold exactly `elements` values of `element_size`
  // bytes. `tensor` names the tensor for messages.
  Result<std::string_view> storage_bytes(const std::string& tensor, std::string_view key,
                                         int64_t elements, size_t element_size) {
    const std::string file = root_ + "/data/" + std::string(key);
    const ZipEntry* entry = archive_.find(file);
    if (entry == nullptr) return invalid_argument(tensor + " has no storage entry " + file);
    auto bytes = archive_.read(*entry, limits_.max_bytes);
    if (!bytes.ok()) return bytes.status();
    if (bytes->size() % element_size != 0 ||
        bytes->size() / element_size != static_cast<uint64_t>(elements)) {
      return invalid_argument("storage entry " + file + " holds " + std::to_string(bytes->size()) +
                              " bytes, not the " + std::to_string(elements) + " values of " +
                              std::to_string(element_size) + " bytes of its id");
    }
    return bytes;
  }

  ZipArchive& archive_;
  const Unpickled& pickle_;
  const std::string root_;
  const TorchScriptLimits& limits_;
  std::map<std::string, ClassDeclaration> declarations_;
  std::set<std::string> code_files_;
  uint64_t code_bytes_ = 0;
  std::set<ValueId> visited_;
  std::vector<FoundTensor> parameters_;
  std::vector<FoundTensor> buffers_;
  uint64_t element_count_ = 0;
};

Status not_torchscript(const std::string& why) {
  return invalid_argument("not a TorchScript archive: " + why);
}

// Appends `tensor`'s values to `out` as float32. kUnprocessable for NaN or infinity, or an
// integer buffer value that float32 does not hold exactly.
Status append_values(const FoundTensor& tensor, float* out) {
  const std::string what =
      std::string(tensor.spec.kind == TensorKind::kParameter ? "parameter " : "buffer ") +
      quoted(tensor.spec.name);
  const size_t count = tensor.count();
  if (tensor.spec.kind == TensorKind::kIntegerBuffer) {
    constexpr int64_t kExact = int64_t{1} << 24;  // float32 holds every integer up to 2^24
    for (size_t i = 0; i < count; ++i) {
      int64_t value;
      std::memcpy(&value, tensor.elements.data() + i * sizeof(value), sizeof(value));
      if (value > kExact || value < -kExact) {
        return unprocessable(what + " holds " + std::to_string(value) +
                             ", beyond the integers float32 holds exactly (2^24)");
      }
      out[i] = static_cast<float>(value);
    }
    return ok_status();
  }
  if (count > 0) std::memcpy(out, tensor.elements.data(), tensor.elements.size());
  for (size_t i = 0; i < count; ++i) {
    if (!std::isfinite(out[i])) {
      return unprocessable(what + " holds NaN or infinity (element " + std::to_string(i) + ")");
    }
  }
  return ok_status();
}

}  // namespace

Result<ModelBlob> read_torchscript_model(std::string_view archive,
                                         const TorchScriptLimits& limits) {
  if (archive.size() > limits.max_bytes) {
    return too_large("TorchScript archive of " + std::to_string(archive.size()) +
                     " bytes exceeds the limit of " + std::to_string(limits.max_bytes));
  }
  ZipArchive zip(limits.max_bytes);
  FEDCASE_RETURN_IF_ERROR(zip.open(archive));
  if (zip.entries().empty()) return not_torchscript("the zip archive is empty");
  // Like libtorch, take the root folder from the first entry.
  const std::string_view first = zip.entries().front().name;
  const size_t slash = first.find('/');
  if (slash == std::string_view::npos || slash == 0) {
    return not_torchscript("entry " + quoted(first) + " lies in no folder");
  }
  const std::string root(first.substr(0, slash));
  const ZipEntry* data_pkl = zip.find(root + "/data.pkl");
  if (data_pkl == nullptr) return not_torchscript("no " + root + "/data.pkl");
  const std::string code_folder = root + "/code/";
  bool has_code = false;
  for (const ZipEntry& entry : zip.entries()) {
    has_code = has_code || entry.name.substr(0, code_folder.size()) == code_folder;
  }
  if (!has_code) {
    return not_torchscript("no " + code_folder + " (a torch.save file is not TorchScript)");
  }
  auto pickle = zip.read(*data_pkl, limits.max_pickle_bytes);
  if (!pickle.ok()) return pickle.status();
  auto unpickled = pickle::unpickle(*pickle, std::string(data_pkl->name));
  if (!unpickled.ok()) return unpickled.status();
  TensorFinder finder(zip, *unpickled, root, limits);
  FEDCASE_RETURN_IF_ERROR(finder.find_in_root(unpickled->root));
  if (finder.parameters().empty()) return invalid_argument("the module has no parameters");

  ModelBlob blob;
  blob.data.resize(finder.element_count());
  float* out = blob.data.data();
  for (const auto* tensors : {&finder.parameters(), &finder.buffers()}) {
    for (const FoundTensor& tensor : *tensors) {
      FEDCASE_RETURN_IF_ERROR(append_values(tensor, out));
      out += tensor.count();
      blob.layout.tensors.push_back(tensor.spec);
    }
  }
  return blob;
}

}  // namespace fedcase::formats
