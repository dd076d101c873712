#pragma once
// A ready Trainer (trainer.h) for the built-in models "cnn" and "mlp" (ml/model.h) on
// Fashion-MNIST-shaped samples: the demo's fleet and the benchmarks use it. A sample's record
// is one byte with the class, then the 28 x 28 image bytes, row-major; trailing bytes (the
// padding of a RecordFile) are ignored. Evaluation reports the mean cross-entropy and
// "accuracy".

#include <cstdint>
#include <memory>
#include <string>

#include "client_sdk/trainer.h"
#include "ml/dataset.h"

namespace fedcase::client {

// The record of sample `i` of `data` (28 x 28 images). Precondition: i < data.size().
std::string fashion_record(const ml::Dataset& data, size_t i);

// `seed` initialises the models it builds (their weights are replaced by the task's anyway).
std::unique_ptr<Trainer> make_builtin_trainer(uint64_t seed = 1);

}  // namespace fedcase::client
