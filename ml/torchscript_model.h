#pragma once
// Any model an app exports as TorchScript (torch.jit.script(m).save(path)), trained and scored
// through libtorch without knowing its architecture. libtorch stays behind this interface, as
// in model.h: a model's values cross it as flat floats, its parameters in named_parameters()
// order then its buffers in named_buffers() order (int64 buffers as float32), the order the
// coordinator reads them from the same file (formats/torchscript_reader.h), and samples cross
// it as flat float batches. train() runs the module in training mode (BatchNorm updates its
// running statistics), evaluate() in eval mode (it uses them), as a deployed model runs.
//
// A sample's record (docs/client_sdk.md, "Sample records") is little-endian float32 values:
// first the input, prod(sample_shape) values, then the target: one value holding the class
// index for cross-entropy, or the regression target (one or more values) for mean squared
// error. forward(x) takes a float tensor [batch, sample_shape...] and returns [batch, classes]
// logits for cross-entropy or [batch, target values] for mean squared error.
//
// A TorchScriptModel is not thread-safe; separate ones train concurrently.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/blob.h"
#include "common/status.h"
#include "ml/model.h"

namespace fedcase::ml {

enum class Loss { kCrossEntropy, kMse };

// "cross_entropy", "mse".
const char* loss_name(Loss loss);
// The loss named `name`; kInvalidArgument for any other name.
Result<Loss> parse_loss(std::string_view name);

// A batch of samples as flat floats: `count` inputs of prod(sample_shape) values, then `count`
// targets of target_width values.
struct TensorBatch {
  std::vector<int64_t> sample_shape;
  size_t count = 0;
  size_t target_width = 0;
  std::vector<float> inputs;
  std::vector<float> targets;
  void clear() {
    count = 0;
    inputs.clear();
    targets.clear();
  }
};

// Appends one sample record (see above) to `batch`, whose sample_shape says where the input
// ends. kInvalidArgument when the record is not a whole number of floats, leaves no target,
// has a target width other than the batch's, or holds a value that is not finite; for
// cross-entropy also when the target is not one non-negative whole number.
Status append_record(std::string_view record, Loss loss, TensorBatch& batch);

// Supplies batches: fills `batch` (cleared by the caller, sample_shape kept) and returns true,
// returns false when there are no more, or an error that stops the pass.
using NextBatch = std::function<Result<bool>(TensorBatch& batch)>;
// Reads record `i` of a pass (valid until the next call), or an error that stops the pass.
using ReadRecord = std::function<Result<std::string_view>(size_t i)>;
// Batches of up to `batch_size` records (at least 1) of `count` read in order by `read`,
// decoded with append_record for `loss` and `sample_shape`; a record that does not decode
// stops the pass with kInvalidArgument naming `what(i)` ("sample 17"). The returned function
// keeps references to its arguments.
NextBatch record_batches(const ReadRecord& read, size_t count, size_t batch_size, Loss loss,
                         const std::vector<int64_t>& sample_shape,
                         const std::function<std::string(size_t)>& what);

// Gets each training batch's per-sample losses after its optimizer step.
using LossObserver = std::function<void(const std::vector<float>& losses)>;

class TorchScriptModel {
 public:
  // Loads a module from the bytes of its file. kInvalidArgument when it does not load, has no
  // parameters, a parameter that is not float32 or a buffer that is neither float32 nor int64.
  static Result<TorchScriptModel> load(std::string_view archive);

  TorchScriptModel(TorchScriptModel&&) noexcept;
  TorchScriptModel& operator=(TorchScriptModel&&) noexcept;
  ~TorchScriptModel();

  // Parameters, then buffers.
  ModelLayout layout() const;
  // Every value of layout(), parameters and buffers.
  std::vector<float> parameters() const;
  // Sets every value of layout(); an integer buffer takes the nearest integer.
  // kUnprocessable if `values` does not have layout().element_count() entries.
  Status set_parameters(const std::vector<float>& values);

  // Only the parameters named in `names` train from now on (all when empty); the others keep
  // their values. Names no parameter has are ignored.
  void set_trainable(const std::vector<std::string>& names);

  // One SGD pass (options as in model.h) over the batches `next` supplies. Errors: what
  // `next` returns; kInvalidArgument when forward() fails on a batch or returns outputs that
  // do not fit the loss (the message says why). The model has then been partly trained.
  Result<TrainStats> train(Loss loss, const TrainOptions& options, const NextBatch& next,
                           const LossObserver& observer = {});
  // Mean loss over the batches `next` supplies, and accuracy for cross-entropy (0 for mse).
  // Errors as train().
  Result<EvalResult> evaluate(Loss loss, const NextBatch& next);

  // The module with its current parameters and buffers, as the bytes torch.jit.save writes: its
  // code and everything else as loaded. kInternal if libtorch fails.
  Result<std::string> save() const;

 private:
  struct Impl;
  explicit TorchScriptModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedcase::ml
