#include "client_sdk/torchscript_trainer.h"

#include <cstring>
#include <functional>
#include <optional>

#include "ml/torchscript_model.h"

namespace fedcase::client {
namespace {

// The records of `samples` in batches of `batch_size`, for the model's passes.
class Batches {
 public:
  Batches(RoundSamples& samples, ml::Loss loss, size_t batch_size,
          const std::vector<int64_t>& shape)
      : read_([&samples](size_t i) { return samples.read(i); }),
        what_([&samples](size_t i) { return "sample " + std::to_string(samples.id(i)); }),
        next_(ml::record_batches(read_, samples.size(), batch_size, loss, shape, what_)) {}
  Batches(const Batches&) = delete;  // next_ refers to the members
  Batches& operator=(const Batches&) = delete;
  const ml::NextBatch& next() const { return next_; }

 private:
  ml::ReadRecord read_;
  std::function<std::string(size_t)> what_;
  ml::NextBatch next_;
};

class TorchScriptTrainer final : public Trainer {
 public:
  explicit TorchScriptTrainer(TorchScriptTrainerOptions options) : options_(std::move(options)) {}

  Status prepare(const ModelInfo& model) override {
    if (model.kind != "torchscript" || !model.module) {
      return invalid_argument("this app trains TorchScript models, not '" + model.kind + "'");
    }
    auto loss = ml::parse_loss(model.loss);
    if (!loss.ok()) return loss.status();
    auto loaded = ml::TorchScriptModel::load(*model.module);
    if (!loaded.ok()) return loaded.status();
    if (loaded->layout() != model.layout) {
      return invalid_argument("the job's parameters (" + model.layout.describe() +
                              ") do not match its module's (" + loaded->layout().describe() + ")");
    }
    loaded->set_trainable(model.trainable);
    model_.emplace(std::move(loaded).value());
    loss_ = *loss;
    return ok_status();
  }

  Result<std::vector<float>> train(const std::vector<float>& parameters, RoundSamples& samples,
                                   const TrainSettings& settings) override {
    if (!model_) return internal_error("train() before prepare()");
    FEDCASE_RETURN_IF_ERROR(model_->set_parameters(parameters));
    size_t reported = 0;
    const Batches batches(samples, loss_, settings.batch_size, options_.input_shape);
    auto trained =
        model_->train(loss_, settings, batches.next(), [&](const std::vector<float>& losses) {
          samples.report_losses(reported, losses);
          reported += losses.size();
        });
    if (!trained.ok()) return trained.status();
    return model_->parameters();
  }

  Result<Evaluation> evaluate(const std::vector<float>& parameters,
                              RoundSamples& samples) override {
    if (!model_) return internal_error("evaluate() before prepare()");
    FEDCASE_RETURN_IF_ERROR(model_->set_parameters(parameters));
    constexpr size_t kEvalBatch = 128;
    const Batches batches(samples, loss_, kEvalBatch, options_.input_shape);
    auto scored = model_->evaluate(loss_, batches.next());
    if (!scored.ok()) return scored.status();
    Evaluation e{scored->samples, scored->loss, {}};
    if (loss_ == ml::Loss::kCrossEntropy) e.metrics["accuracy"] = scored->accuracy;
    return e;
  }

 private:
  TorchScriptTrainerOptions options_;
  std::optional<ml::TorchScriptModel> model_;
  ml::Loss loss_ = ml::Loss::kCrossEntropy;
};

}  // namespace

std::string float_record(const std::vector<float>& input, const std::vector<float>& target) {
  std::string record((input.size() + target.size()) * sizeof(float), '\0');
  std::memcpy(record.data(), input.data(), input.size() * sizeof(float));
  std::memcpy(record.data() + input.size() * sizeof(float), target.data(),
              target.size() * sizeof(float));
  return record;
}

Result<std::unique_ptr<Trainer>> make_torchscript_trainer(TorchScriptTrainerOptions options) {
  if (options.input_shape.empty()) return invalid_argument("the input shape is empty");
  int64_t values = 1;
  for (int64_t d : options.input_shape) {
    if (d < 1) return invalid_argument("input shape dimensions must be >= 1");
    if (d > (int64_t(1) << 31) / values) {
      return invalid_argument("an input of that shape holds more than 2^31 values");
    }
    values *= d;
  }
  return std::unique_ptr<Trainer>(new TorchScriptTrainer(std::move(options)));
}

}  // namespace fedcase::client
