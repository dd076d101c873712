#include "client_sdk/torchscript_trainer.h"

#include <cstring>
#include <optional>

#include "ml/torchscript_model.h"

namespace fedcase::client {
namespace {

// Batches of `batch_size` records from positions [0, samples.size()) of `samples`.
ml::NextBatch batches_of(RoundSamples& samples, ml::Loss loss, size_t batch_size,
                         const std::vector<int64_t>& shape, size_t& next) {
  return [&samples, loss, batch_size, &shape, &next](ml::TensorBatch& batch) -> Result<bool> {
    if (next >= samples.size()) return false;
    batch.sample_shape = shape;
    const size_t end = std::min(samples.size(), next + std::max<size_t>(1, batch_size));
    for (; next < end; ++next) {
      auto record = samples.read(next);
      if (!record.ok()) return record.status();
      Status s = ml::append_record(*record, loss, batch);
      if (!s.ok()) {
        return invalid_argument("sample " + std::to_string(samples.id(next)) + ": " + s.message());
      }
    }
    return true;
  };
}

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
    model_.emplace(std::move(loaded).value());
    loss_ = *loss;
    return ok_status();
  }

  Result<std::vector<float>> train(const std::vector<float>& parameters, RoundSamples& samples,
                                   const TrainSettings& settings) override {
    if (!model_) return internal_error("train() before prepare()");
    FEDCASE_RETURN_IF_ERROR(model_->set_parameters(parameters));
    size_t next = 0, reported = 0;
    auto trained =
        model_->train(loss_, settings,
                      batches_of(samples, loss_, settings.batch_size, options_.input_shape, next),
                      [&](const std::vector<float>& losses) {
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
    size_t next = 0;
    constexpr size_t kEvalBatch = 128;
    auto scored =
        model_->evaluate(loss_, batches_of(samples, loss_, kEvalBatch, options_.input_shape, next));
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
