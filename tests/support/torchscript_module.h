#pragma once
// TorchScript modules for tests, made with libtorch (no Python): models that are none of the
// built-in ones, saved as a module file's bytes, as torch.jit.save would write them.

#include <cstdint>
#include <string>

namespace fedcase::testing {

// forward(x): x.flatten(1) [batch, inputs] -> tanh hidden layer -> [batch, classes] logits.
// Parameters w1 [hidden, inputs], b1, w2 [classes, hidden], b2, drawn from `seed`.
std::string classifier_module(int64_t inputs, int64_t hidden, int64_t classes, uint64_t seed);

// As classifier_module, with a BatchNorm over the hidden layer before a ReLU (instead of tanh):
// a submodule "bn" with parameters weight and bias and buffers running_mean, running_var
// (float32) and num_batches_tracked (int64), which training updates (momentum 0.1) and eval
// mode uses, as torch.nn.BatchNorm1d does.
std::string batchnorm_classifier_module(int64_t inputs, int64_t hidden, int64_t classes,
                                        uint64_t seed);

// forward(x): [batch, inputs] -> [batch, 1], a linear regression (parameters w [1, inputs], b).
std::string regression_module(int64_t inputs, uint64_t seed);

}  // namespace fedcase::testing
