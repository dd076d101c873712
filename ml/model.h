#pragma once
// A trainable classifier for Fashion-MNIST-shaped data. libtorch stays behind this interface:
// including it costs nothing, and parameters cross it as flat floats in blob layout order.
// A Model is not thread-safe; separate Models train concurrently.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/blob.h"
#include "common/status.h"
#include "ml/dataset.h"

namespace fedcase::ml {

struct TrainOptions {
  size_t batch_size = 32;
  double lr = 0.05;
  double momentum = 0.0;
  double weight_decay = 0.0;
  double prox_mu = 0.0;  // FedProx: adds mu/2 * ||w - w_start||^2 to the loss when > 0
};

// kInvalidArgument naming the field ("train.lr must be ...") unless every option is finite and
// in the range of the wire protocol's training settings (protocol/task_offer.h): the ranges
// any trainer accepts.
Status validate_train_options(const TrainOptions& options);

struct TrainStats {
  size_t samples = 0;      // samples processed (with repeats)
  double loss_sum = 0;     // sum of per-sample losses
  double loss_sq_sum = 0;  // sum of squared per-sample losses (Oort utility)
  double compute_seconds = 0;
};

struct EvalResult {
  double accuracy = 0;
  double loss = 0;  // mean cross-entropy
  size_t samples = 0;
};

// Called after each batch's forward pass with the batch's sample indices and their losses.
using BatchObserver =
    std::function<void(const std::vector<size_t>& indices, const std::vector<float>& losses)>;

class Model {
 public:
  // `arch` is "cnn" (two conv layers, ~110k parameters) or "mlp" (one hidden layer).
  // Initial weights depend only on `seed`. kInvalidArgument for an unknown arch.
  static Result<Model> create(const std::string& arch, uint64_t seed);

  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  const std::string& arch() const;
  ModelLayout layout() const;
  std::vector<float> parameters() const;
  // kUnprocessable if `values` does not have layout().element_count() entries.
  Status set_parameters(const std::vector<float>& values);

  // One SGD pass over `order` (dataset indices, repeats allowed) in batches. A batch's samples
  // are copied out of `data` when the batch starts, after the previous batch's observer has
  // returned, so an observer may refill `data` (same rows and cols) for the batches to come.
  TrainStats train(const Dataset& data, const std::vector<size_t>& order,
                   const TrainOptions& options, const BatchObserver& observer = {});

  // Accuracy and loss over the first `max_samples` of `data` (all if 0).
  EvalResult evaluate(const Dataset& data, size_t max_samples = 0) const;

  // The model with its current parameters as a TorchScript archive (the bytes torch.jit.save
  // writes): submodules and parameters under the names of layout(), and a forward(x) that
  // takes a float32 batch [n, 1, 28, 28] of pixels scaled to [0, 1], normalises it as
  // training does, and returns [n, 10] logits. kInternal if libtorch fails.
  Result<std::string> to_torchscript() const;

 private:
  struct Impl;
  explicit Model(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Sets libtorch's intra-op thread count. With OpenMP builds the setting belongs to the calling
// thread: call it on every thread that trains or evaluates.
void set_torch_threads(int threads);

}  // namespace fedcase::ml
