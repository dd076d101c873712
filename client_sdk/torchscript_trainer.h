#pragma once
// A ready Trainer (trainer.h) for any TorchScript module: the job's model "torchscript",
// whose file the coordinator serves with the task. Samples are float32 records (input, then
// target; ml/torchscript_model.h and docs/client_sdk.md "Sample records"), the loss is the
// task's ("cross_entropy" or "mse"); evaluation reports the mean loss and, for
// cross-entropy, "accuracy".

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client_sdk/trainer.h"

namespace fedcase::client {

struct TorchScriptTrainerOptions {
  // The shape of one sample's input, e.g. {1, 28, 28}; forward() gets [batch, shape...].
  std::vector<int64_t> input_shape;
};

// A sample record for TorchScriptTrainer: the input values, then the target values (the
// class index for cross-entropy), as little-endian float32.
std::string float_record(const std::vector<float>& input, const std::vector<float>& target);

// kInvalidArgument for an empty shape or a dimension < 1.
Result<std::unique_ptr<Trainer>> make_torchscript_trainer(TorchScriptTrainerOptions options);

}  // namespace fedcase::client
