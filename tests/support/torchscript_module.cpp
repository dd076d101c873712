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
