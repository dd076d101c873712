#include "tests/support/torchscript_module.h"

#include <torch/script.h>
#include <torch/torch.h>

#include <cmath>
#include <sstream>

namespace fedcase::testing {
namespace {

std::string saved(const torch::jit::Module& module) {
  std::ostringstream out;
  module.save(out);
  return out.str();
}

}  // namespace

std::string classifier_module(int64_t inputs, int64_t hidden, int64_t classes, uint64_t seed) {
  torch::manual_seed(seed);
  torch::jit::Module m("__torch__.Classifier");
  m.register_parameter("w1", torch::randn({hidden, inputs}) / std::sqrt(double(inputs)), false);
  m.register_parameter("b1", torch::zeros({hidden}), false);
  m.register_parameter("w2", torch::randn({classes, hidden}) / std::sqrt(double(hidden)), false);
  m.register_parameter("b2", torch::zeros({classes}), false);
  m.define(R"(
    def forward(self, x):
        h = torch.tanh(torch.matmul(x.flatten(1), self.w1.t()) + self.b1)
        return torch.matmul(h, self.w2.t()) + self.b2
  )");
  return saved(m);
}

std::string batchnorm_classifier_module(int64_t inputs, int64_t hidden, int64_t classes,
                                        uint64_t seed) {
  torch::manual_seed(seed);
  torch::jit::Module bn("__torch__.BatchNorm");
  bn.register_attribute("training", c10::BoolType::get(), true);
  bn.register_parameter("weight", torch::ones({hidden}), false);
  bn.register_parameter("bias", torch::zeros({hidden}), false);
  bn.register_buffer("running_mean", torch::zeros({hidden}));
  bn.register_buffer("running_var", torch::ones({hidden}));
  bn.register_buffer("num_batches_tracked", torch::zeros({}, torch::kInt64));
  bn.define(R"(
    def forward(self, h):
        if self.training:
            self.num_batches_tracked.add_(1)
        return torch.batch_norm(h, self.weight, self.bias, self.running_mean, self.running_var,
                                self.training, 0.1, 1e-5, False)
  )");
  torch::jit::Module m("__torch__.BatchNormClassifier");
  m.register_attribute("training", c10::BoolType::get(), true);
  m.register_parameter("w1", torch::randn({hidden, inputs}) / std::sqrt(double(inputs)), false);
  m.register_parameter("b1", torch::zeros({hidden}), false);
  m.register_parameter("w2", torch::randn({classes, hidden}) / std::sqrt(double(hidden)), false);
  m.register_parameter("b2", torch::zeros({classes}), false);
  m.register_module("bn", bn);
  m.define(R"(
    def forward(self, x):
        h = torch.relu(self.bn.forward(torch.matmul(x.flatten(1), self.w1.t()) + self.b1))
        return torch.matmul(h, self.w2.t()) + self.b2
  )");
  return saved(m);
}

std::string regression_module(int64_t inputs, uint64_t seed) {
  torch::manual_seed(seed);
  torch::jit::Module m("__torch__.Regression");
  m.register_parameter("w", torch::randn({1, inputs}) * 0.1, false);
  m.register_parameter("b", torch::zeros({1}), false);
  m.define(R"(
    def forward(self, x):
        return torch.matmul(x, self.w.t()) + self.b
  )");
  return saved(m);
}

}  // namespace fedcase::testing
