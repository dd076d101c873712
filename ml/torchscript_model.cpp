#include "ml/torchscript_model.h"

#include <torch/script.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <sstream>

namespace fedcase::ml {

const char* loss_name(Loss loss) { return loss == Loss::kMse ? "mse" : "cross_entropy"; }

Result<Loss> parse_loss(std::string_view name) {
  if (name == "cross_entropy") return Loss::kCrossEntropy;
  if (name == "mse") return Loss::kMse;
  return invalid_argument("unknown loss '" + std::string(name) +
                          "' (expected cross_entropy or mse)");
}

Status append_record(std::string_view record, Loss loss, TensorBatch& batch) {
  if (record.size() % sizeof(float) != 0) {
    return invalid_argument("a sample record of " + std::to_string(record.size()) +
                            " bytes is not a whole number of float32 values");
  }
  // The input's size, saturating: a shape larger than any record is refused below.
  size_t input = 1;
  for (int64_t d : batch.sample_shape) {
    const size_t n = static_cast<size_t>(std::max<int64_t>(d, 0));
    input = n != 0 && input > SIZE_MAX / n ? SIZE_MAX : input * n;
  }
  const size_t values = record.size() / sizeof(float);
  if (values <= input) {
    return invalid_argument("a sample record of " + std::to_string(values) +
                            " values leaves no target after an input of " + std::to_string(input));
  }
  const size_t width = values - input;
  if (loss == Loss::kCrossEntropy && width != 1) {
    return invalid_argument("a cross-entropy record needs one target value (the class), got " +
                            std::to_string(width));
  }
  if (batch.count > 0 && width != batch.target_width) {
    return invalid_argument("sample records of one batch differ in target width");
  }
  std::vector<float> v(values);
  std::memcpy(v.data(), record.data(), record.size());
  for (float x : v) {
    if (!std::isfinite(x)) return invalid_argument("a sample record holds a non-finite value");
  }
  const float target = v[input];
  if (loss == Loss::kCrossEntropy && (target < 0 || std::floor(target) != target)) {
    return invalid_argument("a cross-entropy target must be a class index >= 0");
  }
  batch.target_width = width;
  batch.inputs.insert(batch.inputs.end(), v.begin(), v.begin() + input);
  batch.targets.insert(batch.targets.end(), v.begin() + input, v.end());
  batch.count += 1;
  return ok_status();
}

NextBatch record_batches(const ReadRecord& read, size_t count, size_t batch_size, Loss loss,
                         const std::vector<int64_t>& sample_shape,
                         const std::function<std::string(size_t)>& what) {
  auto next = std::make_shared<size_t>(0);
  return [&read, count, batch_size, loss, &sample_shape, &what,
          next](TensorBatch& batch) -> Result<bool> {
    size_t& i = *next;
    if (i >= count) return false;
    batch.sample_shape = sample_shape;
    for (const size_t end = std::min(count, i + std::max<size_t>(1, batch_size)); i < end; ++i) {
      auto record = read(i);
      if (!record.ok()) return record.status();
      Status s = append_record(*record, loss, batch);
      if (!s.ok()) return invalid_argument(what(i) + ": " + s.message());
    }
    return true;
  };
}

namespace {

std::pair<torch::Tensor, torch::Tensor> to_tensors(const TensorBatch& batch, Loss loss) {
  std::vector<int64_t> shape{int64_t(batch.count)};
  shape.insert(shape.end(), batch.sample_shape.begin(), batch.sample_shape.end());
  auto x = torch::from_blob(const_cast<float*>(batch.inputs.data()), shape, torch::kFloat32);
  auto y = torch::from_blob(const_cast<float*>(batch.targets.data()),
                            {int64_t(batch.count), int64_t(batch.target_width)}, torch::kFloat32);
  if (loss == Loss::kCrossEntropy) return {x, y.view({-1}).to(torch::kInt64)};
  return {x, y.clone()};
}

// Per-sample losses of `outputs` against `targets`; throws c10::Error for shapes that do not
// fit, with a message saying so.
torch::Tensor per_sample_loss(const torch::Tensor& outputs, const torch::Tensor& targets,
                              Loss loss) {
  if (loss == Loss::kCrossEntropy) {
    TORCH_CHECK(outputs.dim() == 2 && outputs.size(0) == targets.size(0),
                "cross-entropy needs forward() to return [batch, classes] logits, got ",
                outputs.sizes());
    TORCH_CHECK(targets.max().item<int64_t>() < outputs.size(1), "a target class is >= the ",
                outputs.size(1), " classes forward() returns");
    return torch::nn::functional::cross_entropy(
        outputs, targets, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
  }
  const auto flat = outputs.reshape({outputs.size(0), -1});
  TORCH_CHECK(flat.sizes() == targets.sizes(), "mse needs forward() to return ", targets.sizes(),
              " values, got ", outputs.sizes());
  return (flat - targets).pow(2).mean(1);
}

// Calls `fn` on every non-empty batch `next` supplies; the first error of either stops.
Status for_each_batch(const NextBatch& next, const std::function<Status(const TensorBatch&)>& fn) {
  TensorBatch batch;
  while (true) {
    batch.clear();
    auto more = next(batch);
    if (!more.ok()) return more.status();
    if (!*more) return ok_status();
    if (batch.count > 0) FEDCASE_RETURN_IF_ERROR(fn(batch));
  }
}

// The first line of an exception's message, prefixed with what failed.
Status failed(const char* what, const std::exception& e) {
  const std::string message = e.what();
  return invalid_argument(std::string(what) + " the TorchScript module failed: " +
                          message.substr(0, message.find('\n')));
}

}  // namespace

// A tensor of the module as it crosses the interface.
struct NamedTensor {
  std::string name;
  torch::Tensor value;
  TensorKind kind;
};

struct TorchScriptModel::Impl {
  torch::jit::Module module;
  std::vector<std::string> trainable;  // empty: every parameter
  // The parameters that train.
  std::vector<torch::Tensor> params() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : module.named_parameters(/*recurse=*/true)) {
      if (trainable.empty() ||
          std::find(trainable.begin(), trainable.end(), p.name) != trainable.end()) {
        out.push_back(p.value);
      }
    }
    return out;
  }
  // The parameters, then the buffers, in layout order.
  std::vector<NamedTensor> tensors() const {
    std::vector<NamedTensor> out;
    for (const auto& p : module.named_parameters(/*recurse=*/true)) {
      out.push_back({p.name, p.value, TensorKind::kParameter});
    }
    for (const auto& b : module.named_buffers(/*recurse=*/true)) {
      out.push_back({b.name, b.value,
                     b.value.scalar_type() == torch::kInt64 ? TensorKind::kIntegerBuffer
                                                            : TensorKind::kFloatBuffer});
    }
    return out;
  }
  torch::Tensor forward(const torch::Tensor& x) { return module.forward({x}).toTensor(); }
};

Result<TorchScriptModel> TorchScriptModel::load(std::string_view archive) {
  auto impl = std::make_unique<Impl>();
  try {
    std::istringstream in{std::string(archive)};
    impl->module = torch::jit::load(in, torch::kCPU);
  } catch (const std::exception& e) {
    return failed("loading", e);
  }
  size_t count = 0;
  for (const auto& p : impl->module.parameters()) {
    if (p.scalar_type() != torch::kFloat32) {
      return invalid_argument("TorchScript parameters must be float32");
    }
    ++count;
  }
  if (count == 0) return invalid_argument("the TorchScript module has no parameters");
  for (const auto& b : impl->module.named_buffers(/*recurse=*/true)) {
    if (b.value.scalar_type() != torch::kFloat32 && b.value.scalar_type() != torch::kInt64) {
      return invalid_argument("TorchScript buffer '" + b.name + "' is " +
                              std::string(c10::toString(b.value.scalar_type())) +
                              "; buffers must be float32 or int64");
    }
  }
  return TorchScriptModel(std::move(impl));
}

TorchScriptModel::TorchScriptModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TorchScriptModel::TorchScriptModel(TorchScriptModel&&) noexcept = default;
TorchScriptModel& TorchScriptModel::operator=(TorchScriptModel&&) noexcept = default;
TorchScriptModel::~TorchScriptModel() = default;

ModelLayout TorchScriptModel::layout() const {
  ModelLayout layout;
  for (const NamedTensor& t : impl_->tensors()) {
    TensorSpec spec{t.name, {}, t.kind};
    for (int64_t d : t.value.sizes()) spec.shape.push_back(static_cast<uint64_t>(d));
    layout.tensors.push_back(std::move(spec));
  }
  return layout;
}

std::vector<float> TorchScriptModel::parameters() const {
  std::vector<float> out;
  for (const NamedTensor& t : impl_->tensors()) {
    auto flat = t.value.detach().to(torch::kFloat32).contiguous().view(-1);
    out.insert(out.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
  }
  return out;
}

Status TorchScriptModel::set_parameters(const std::vector<float>& values) {
  const auto tensors = impl_->tensors();
  size_t total = 0;
  for (const NamedTensor& t : tensors) total += static_cast<size_t>(t.value.numel());
  if (values.size() != total) {
    return unprocessable("the TorchScript module has " + std::to_string(total) +
                         " parameter and buffer values, got " + std::to_string(values.size()));
  }
  torch::NoGradGuard no_grad;
  size_t offset = 0;
  for (const NamedTensor& t : tensors) {
    auto source = torch::from_blob(const_cast<float*>(values.data() + offset), t.value.sizes(),
                                   torch::kFloat32);
    // An integer buffer takes the nearest integer (copy_ alone would truncate).
    t.value.copy_(t.kind == TensorKind::kIntegerBuffer ? source.round() : source);
    offset += static_cast<size_t>(t.value.numel());
  }
  return ok_status();
}

void TorchScriptModel::set_trainable(const std::vector<std::string>& names) {
  impl_->trainable = names;
  for (const auto& p : impl_->module.named_parameters(/*recurse=*/true)) {
    const bool trains =
        names.empty() || std::find(names.begin(), names.end(), p.name) != names.end();
    p.value.requires_grad_(trains);
  }
}

Result<std::string> TorchScriptModel::save() const {
  try {
    std::ostringstream out;
    impl_->module.save(out);
    return out.str();
  } catch (const std::exception& e) {
    const std::string message = e.what();
    return internal_error("saving the TorchScript module failed: " +
                          message.substr(0, message.find('\n')));
  }
}

Result<TrainStats> TorchScriptModel::train(Loss loss, const TrainOptions& options,
                                           const NextBatch& next, const LossObserver& observer) {
  FEDCASE_RETURN_IF_ERROR(validate_train_options(options));
  const auto start = std::chrono::steady_clock::now();
  auto params = impl_->params();
  for (auto& p : params) p.requires_grad_(true);  // a module may be saved with them off
  impl_->module.train();
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(options.lr)
                                    .momentum(options.momentum)
                                    .weight_decay(options.weight_decay));
  std::vector<torch::Tensor> anchor;
  if (options.prox_mu > 0) {
    for (const auto& p : params) anchor.push_back(p.detach().clone());
  }
  TrainStats stats;
  FEDCASE_RETURN_IF_ERROR(for_each_batch(next, [&](const TensorBatch& batch) -> Status {
    torch::Tensor losses;
    try {
      auto [x, y] = to_tensors(batch, loss);
      auto per_sample = per_sample_loss(impl_->forward(x), y, loss);
      auto objective = per_sample.mean();
      if (options.prox_mu > 0) {
        torch::Tensor prox = torch::zeros({});
        for (size_t i = 0; i < params.size(); ++i) {
          prox = prox + (params[i] - anchor[i]).pow(2).sum();
        }
        objective = objective + 0.5 * options.prox_mu * prox;
      }
      sgd.zero_grad();
      objective.backward();
      sgd.step();
      losses = per_sample.detach().to(torch::kFloat32).contiguous();
    } catch (const std::exception& e) {
      return failed("training", e);
    }
    const size_t n = static_cast<size_t>(losses.numel());
    stats.samples += n;
    stats.loss_sum += losses.sum().item<double>();
    stats.loss_sq_sum += losses.pow(2).sum().item<double>();
    if (observer) {
      observer(std::vector<float>(losses.data_ptr<float>(), losses.data_ptr<float>() + n));
    }
    return ok_status();
  }));
  stats.compute_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

Result<EvalResult> TorchScriptModel::evaluate(Loss loss, const NextBatch& next) {
  torch::NoGradGuard no_grad;
  impl_->module.eval();
  double loss_sum = 0;
  size_t correct = 0;
  EvalResult result;
  FEDCASE_RETURN_IF_ERROR(for_each_batch(next, [&](const TensorBatch& batch) -> Status {
    try {
      auto [x, y] = to_tensors(batch, loss);
      auto outputs = impl_->forward(x);
      loss_sum += per_sample_loss(outputs, y, loss).sum().item<double>();  // any float dtype
      if (loss == Loss::kCrossEntropy) {
        correct += static_cast<size_t>(outputs.argmax(1).eq(y).sum().item<int64_t>());
      }
    } catch (const std::exception& e) {
      return failed("evaluating", e);
    }
    result.samples += batch.count;
    return ok_status();
  }));
  if (result.samples > 0) {
    result.loss = loss_sum / double(result.samples);
    result.accuracy = double(correct) / double(result.samples);
  }
  return result;
}

}  // namespace fedcase::ml
