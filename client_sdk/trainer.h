#pragma once
// What an app implements to train its own model with fedcase: a Trainer. The SDK's session
// (session.h) downloads the job's model, decides which samples a round trains on (importance
// sampling, sample budget, cache; local_data.h) and hands the trainer those samples in
// training order; the trainer trains from the given parameters, reports each batch's
// per-sample losses (they drive the importance sampler and the cache), and returns the new
// parameters. The SDK computes the update, its statistics and the timings.
//
// Ready trainers: TorchScriptTrainer (torchscript_trainer.h) for any TorchScript module, and
// BuiltinTrainer (builtin_trainer.h) for the built-in Fashion-MNIST models.
//
// Thread safety: a trainer is called from its session's thread only.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/blob.h"
#include "common/status.h"
#include "ml/model.h"

namespace fedcase::client {

// The samples of one training pass or evaluation, positions 0..size()-1 in the order the SDK
// wants them trained (a sample may appear more than once).
class RoundSamples {
 public:
  virtual ~RoundSamples() = default;
  virtual size_t size() const = 0;
  // The sample id at `position` (an index into the app's SampleSource). Precondition:
  // position < size().
  virtual size_t id(size_t position) const = 0;
  // The record of the sample at `position`, read through the SDK's cache. The view is valid
  // until the next read(). An error (the source's, or kInvalidArgument for a position out of
  // range): stop and return it.
  virtual Result<std::string_view> read(size_t position) = 0;
  // The training losses of the samples at positions [first, first + losses.size()), one per
  // sample, reported once per batch in training order right after the batch's optimizer step
  // (and before the next batch is read). Losses must be finite and >= 0, within the round's
  // positions: a bad report fails the round. Evaluation reports nothing.
  virtual void report_losses(size_t first, const std::vector<float>& losses) = 0;
};

// The job's model, as the task describes it.
struct ModelInfo {
  std::string kind;  // "cnn" | "mlp" (built-in), "torchscript" or "blob" (the app's own)
  std::string loss;  // "cross_entropy" | "mse"
  std::shared_ptr<const std::string> module;  // torchscript: the module file; else null
  ModelLayout layout;                         // the tensors' names, shapes and kinds, in order
  // The tensors the job trains (a head, adapters), by name; empty: all of them. A trainer
  // should leave the others as they are (frozen): the session uploads the trained ones only.
  std::vector<std::string> trainable;
};

// How the task asks the model to be trained: batch_size, lr, momentum, weight_decay and
// prox_mu (FedProx: adds mu/2 * ||w - w_start||^2 to the loss when > 0), as ml/model.h.
using TrainSettings = ml::TrainOptions;

// A model's score on held-out samples: the mean loss and any named metrics ("accuracy" in
// [0, 1]; names of 1 to 64 letters, digits or '_'; finite values >= 0).
struct Evaluation {
  uint64_t samples = 0;
  double loss = 0;
  std::map<std::string, double> metrics;
};

class Trainer {
 public:
  virtual ~Trainer() = default;

  // Gets ready for `model`; called before the first task and whenever a task's model differs
  // from the last one's (another job, a new module). kInvalidArgument saying why when this
  // trainer cannot train that model: the session then logs it, sends no update and backs off
  // (it asks again only for another model). Give the clients of such an app labels and the
  // jobs they can train client_labels, so they are not invited to others.
  virtual Status prepare(const ModelInfo& model) = 0;

  // Trains from `parameters` (model.layout order) over every position of `samples`, reporting
  // each batch's losses, and returns the new parameters (as many, all finite). Any error
  // discards the round.
  virtual Result<std::vector<float>> train(const std::vector<float>& parameters,
                                           RoundSamples& samples,
                                           const TrainSettings& settings) = 0;

  // Scores `parameters` on every position of `samples` without training.
  virtual Result<Evaluation> evaluate(const std::vector<float>& parameters,
                                      RoundSamples& samples) = 0;
};

}  // namespace fedcase::client
