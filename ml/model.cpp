#include "ml/model.h"

#include <torch/script.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "common/mutex.h"
#include "protocol/task_offer.h"

namespace fedcase::ml {
namespace {

// Fashion-MNIST's mean and standard deviation, which every input is normalised with.
constexpr float kPixelMean = 0.2860f;
constexpr float kPixelStd = 0.3530f;

// Each architecture's forward() in TorchScript, for exports: the C++ forward below, after the
// normalisation make_batch applies.
constexpr const char* kCnnScript = R"(
def forward(self, x):
    x = (x - 0.2860) / 0.3530
    x = torch.max_pool2d(torch.relu(torch.conv2d(x, self.conv1.weight, self.conv1.bias, [1, 1], [2, 2])), [2, 2])
    x = torch.max_pool2d(torch.relu(torch.conv2d(x, self.conv2.weight, self.conv2.bias, [1, 1], [2, 2])), [2, 2])
    x = torch.relu(torch.linear(torch.flatten(x, 1), self.fc1.weight, self.fc1.bias))
    return torch.linear(x, self.fc2.weight, self.fc2.bias)
)";
constexpr const char* kMlpScript = R"(
def forward(self, x):
    x = (x - 0.2860) / 0.3530
    x = torch.relu(torch.linear(torch.flatten(x, 1), self.fc1.weight, self.fc1.bias))
    return torch.linear(x, self.fc2.weight, self.fc2.bias)
)";

struct CnnImpl : torch::nn::Module {
  CnnImpl()
      : conv1(register_module("conv1",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5).padding(2)))),
        conv2(register_module("conv2",
                              torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5).padding(2)))),
        fc1(register_module("fc1", torch::nn::Linear(32 * 7 * 7, 64))),
        fc2(register_module("fc2", torch::nn::Linear(64, kNumClasses))) {}
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc2->forward(x);
  }
  torch::nn::Conv2d conv1, conv2;
  torch::nn::Linear fc1, fc2;
};

struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : fc1(register_module("fc1", torch::nn::Linear(28 * 28, 128))),
        fc2(register_module("fc2", torch::nn::Linear(128, kNumClasses))) {}
  torch::Tensor forward(torch::Tensor x) {
    return fc2->forward(torch::relu(fc1->forward(x.flatten(1))));
  }
  torch::nn::Linear fc1, fc2;
};

// Gathers `indices` (from `offset`, at most `count`) into a normalised [n,1,H,W] batch.
std::pair<torch::Tensor, torch::Tensor> make_batch(const Dataset& data,
                                                   const std::vector<size_t>& indices,
                                                   size_t offset, size_t count) {
  const size_t n = std::min(count, indices.size() - offset);
  const size_t bytes = data.image_bytes();
  auto images =
      torch::empty({int64_t(n), 1, int64_t(data.rows), int64_t(data.cols)}, torch::kUInt8);
  auto labels = torch::empty({int64_t(n)}, torch::kInt64);
  auto* img = images.data_ptr<uint8_t>();
  auto* lab = labels.data_ptr<int64_t>();
  for (size_t i = 0; i < n; ++i) {
    size_t s = indices[offset + i];
    std::memcpy(img + i * bytes, data.pixels.data() + s * bytes, bytes);
    lab[i] = data.labels[s];
  }
  auto x = (images.to(torch::kFloat32).div_(255.0f) - kPixelMean) / kPixelStd;
  return {x, labels};
}

}  // namespace

Status validate_train_options(const TrainOptions& o) {
  auto bound = [](double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", x);  // "1000", "1e+06"
    return std::string(text);
  };
  auto in = [](double v, double max) { return std::isfinite(v) && v >= 0 && v <= max; };
  if (o.batch_size < 1 || o.batch_size > protocol::kMaxBatchSize) {
    return invalid_argument("train.batch_size must be in [1, " +
                            std::to_string(protocol::kMaxBatchSize) + "]");
  }
  if (!in(o.lr, protocol::kMaxLearningRate)) {
    return invalid_argument("train.lr must be in [0, " + bound(protocol::kMaxLearningRate) + "]");
  }
  if (!in(o.momentum, 1) || o.momentum >= 1) {
    return invalid_argument("train.momentum must be in [0, 1)");
  }
  if (!in(o.weight_decay, protocol::kMaxWeightDecay)) {
    return invalid_argument("train.weight_decay must be in [0, " +
                            bound(protocol::kMaxWeightDecay) + "]");
  }
  if (!in(o.prox_mu, protocol::kMaxProxMu)) {
    return invalid_argument("train.prox_mu must be in [0, " + bound(protocol::kMaxProxMu) + "]");
  }
  return ok_status();
}

struct Model::Impl {
  std::string arch;
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(torch::Tensor)> forward;
  const char* script = nullptr;  // forward() in TorchScript
};

Result<Model> Model::create(const std::string& arch, uint64_t seed) {
  // Module constructors draw from torch's global generator: seed and build under one lock.
  static Mutex init_mutex;
  MutexLock lock(init_mutex);
  torch::manual_seed(seed);
  auto impl = std::make_unique<Impl>();
  impl->arch = arch;
  if (arch == "cnn") {
    auto m = std::make_shared<CnnImpl>();
    impl->module = m;
    impl->forward = [m](torch::Tensor x) { return m->forward(x); };
    impl->script = kCnnScript;
  } else if (arch == "mlp") {
    auto m = std::make_shared<MlpImpl>();
    impl->module = m;
    impl->forward = [m](torch::Tensor x) { return m->forward(x); };
    impl->script = kMlpScript;
  } else {
    return invalid_argument("unknown model architecture '" + arch + "' (expected cnn or mlp)");
  }
  return Model(std::move(impl));
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

const std::string& Model::arch() const { return impl_->arch; }

ModelLayout Model::layout() const {
  ModelLayout layout;
  for (const auto& p : impl_->module->named_parameters()) {
    TensorSpec spec{p.key(), {}};
    for (int64_t d : p.value().sizes()) spec.shape.push_back(static_cast<uint64_t>(d));
    layout.tensors.push_back(std::move(spec));
  }
  return layout;
}

std::vector<float> Model::parameters() const {
  std::vector<float> out;
  for (const auto& p : impl_->module->parameters()) {
    auto flat = p.detach().contiguous().view(-1);
    out.insert(out.end(), flat.data_ptr<float>(), flat.data_ptr<float>() + flat.numel());
  }
  return out;
}

Status Model::set_parameters(const std::vector<float>& values) {
  auto params = impl_->module->parameters();
  size_t total = 0;
  for (const auto& p : params) total += static_cast<size_t>(p.numel());
  if (values.size() != total) {
    return unprocessable("model " + impl_->arch + " has " + std::to_string(total) +
                         " parameters, got " + std::to_string(values.size()));
  }
  torch::NoGradGuard no_grad;
  size_t offset = 0;
  for (auto& p : params) {
    auto src =
        torch::from_blob(const_cast<float*>(values.data() + offset), p.sizes(), torch::kFloat32);
    p.copy_(src);
    offset += static_cast<size_t>(p.numel());
  }
  return ok_status();
}

TrainStats Model::train(const Dataset& data, const std::vector<size_t>& order,
                        const TrainOptions& options, const BatchObserver& observer) {
  auto start = std::chrono::steady_clock::now();
  auto& module = *impl_->module;
  module.train();
  torch::optim::SGD sgd(module.parameters(), torch::optim::SGDOptions(options.lr)
                                                 .momentum(options.momentum)
                                                 .weight_decay(options.weight_decay));
  std::vector<torch::Tensor> anchor;
  if (options.prox_mu > 0) {
    for (const auto& p : module.parameters()) anchor.push_back(p.detach().clone());
  }
  TrainStats stats;
  const size_t batch = std::max<size_t>(1, options.batch_size);
  for (size_t offset = 0; offset < order.size(); offset += batch) {
    auto [x, y] = make_batch(data, order, offset, batch);
    auto per_sample = torch::nn::functional::cross_entropy(
        impl_->forward(x), y,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kNone));
    auto loss = per_sample.mean();
    if (options.prox_mu > 0) {
      auto params = module.parameters();
      torch::Tensor prox = torch::zeros({});
      for (size_t i = 0; i < params.size(); ++i) prox = prox + (params[i] - anchor[i]).pow(2).sum();
      loss = loss + 0.5 * options.prox_mu * prox;
    }
    sgd.zero_grad();
    loss.backward();
    sgd.step();

    auto losses = per_sample.detach();
    const size_t n = static_cast<size_t>(losses.numel());
    stats.samples += n;
    stats.loss_sum += losses.sum().item<double>();
    stats.loss_sq_sum += losses.pow(2).sum().item<double>();
    if (observer) {
      std::vector<size_t> indices(order.begin() + offset, order.begin() + offset + n);
      std::vector<float> values(losses.data_ptr<float>(), losses.data_ptr<float>() + n);
      observer(indices, values);
    }
  }
  stats.compute_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

EvalResult Model::evaluate(const Dataset& data, size_t max_samples) const {
  torch::NoGradGuard no_grad;
  auto& module = *impl_->module;
  module.eval();
  const size_t n = max_samples == 0 ? data.size() : std::min(max_samples, data.size());
  std::vector<size_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = i;
  EvalResult result;
  double loss_sum = 0;
  size_t correct = 0;
  // Batches of 128: on one CPU thread, batches of 1,000 take half as long again (their
  // activations no longer fit the caches).
  constexpr size_t kEvalBatch = 128;
  for (size_t offset = 0; offset < n; offset += kEvalBatch) {
    auto [x, y] = make_batch(data, all, offset, kEvalBatch);
    auto logits = impl_->forward(x);
    loss_sum +=
        torch::nn::functional::cross_entropy(
            logits, y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
            .item<double>();
    correct += static_cast<size_t>(logits.argmax(1).eq(y).sum().item<int64_t>());
  }
  result.samples = n;
  if (n > 0) {
    result.accuracy = double(correct) / double(n);
    result.loss = loss_sum / double(n);
  }
  return result;
}

Result<std::string> Model::to_torchscript() const {
  try {
    // One class per submodule ("conv1" of "conv1.weight"), all in one compilation unit.
    auto unit = std::make_shared<torch::jit::CompilationUnit>();
    const std::string prefix = "__torch__.fedcase." + impl_->arch;
    torch::jit::Module root(prefix, unit, /*shouldMangle=*/true);
    std::vector<std::pair<std::string, torch::jit::Module>> children;
    for (const auto& p : impl_->module->named_parameters()) {
      const std::string& name = p.key();
      const size_t dot = name.find('.');
      const std::string child = name.substr(0, dot);
      if (children.empty() || children.back().first != child) {
        children.emplace_back(child, torch::jit::Module(prefix + "." + child, unit, true));
      }
      children.back().second.register_parameter(name.substr(dot + 1), p.value().detach().clone(),
                                                false);
    }
    for (auto& [name, child] : children) root.register_module(name, child);
    root.define(impl_->script);
    root.eval();
    std::ostringstream out;
    root.save(out);
    return out.str();
  } catch (const std::exception& e) {
    const std::string message = e.what();
    return internal_error("exporting model " + impl_->arch +
                          " as TorchScript failed: " + message.substr(0, message.find('\n')));
  }
}

void set_torch_threads(int threads) { torch::set_num_threads(std::max(1, threads)); }

}  // namespace fedcase::ml
