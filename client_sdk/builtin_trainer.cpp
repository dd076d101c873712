#include "client_sdk/builtin_trainer.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "ml/model.h"

namespace fedcase::client {
namespace {

constexpr size_t kSide = 28;
constexpr size_t kImageBytes = kSide * kSide;

// Copies the records at positions [first, first + count) of `samples` into `batch` from 0.
Status stage(RoundSamples& samples, size_t first, size_t count, ml::Dataset& batch) {
  for (size_t k = 0; k < count; ++k) {
    auto record = samples.read(first + k);
    if (!record.ok()) return record.status();
    if (record->size() < 1 + kImageBytes || uint8_t((*record)[0]) >= ml::kNumClasses) {
      return invalid_argument("sample " + std::to_string(samples.id(first + k)) +
                              " is not a Fashion-MNIST record (class byte, 784 pixels)");
    }
    batch.labels[k] = uint8_t((*record)[0]);
    std::memcpy(batch.pixels.data() + k * kImageBytes, record->data() + 1, kImageBytes);
  }
  return ok_status();
}

ml::Dataset batch_buffer(size_t size) {
  ml::Dataset batch;
  batch.rows = batch.cols = kSide;
  batch.pixels.resize(size * kImageBytes);
  batch.labels.resize(size);
  return batch;
}

class BuiltinTrainer final : public Trainer {
 public:
  explicit BuiltinTrainer(uint64_t seed) : seed_(seed) {}

  Status prepare(const ModelInfo& info) override {
    if (model_ && model_->arch() == info.kind) return ok_status();
    auto model = ml::Model::create(info.kind, seed_);
    if (!model.ok())
      return invalid_argument("this app trains the built-in models: " + model.status().message());
    if (model->layout() != info.layout) {
      return invalid_argument("the job's parameters do not match the built-in " + info.kind);
    }
    model_.emplace(std::move(model).value());
    return ok_status();
  }

  // Trains batch by batch: each batch is read into the buffer after the previous batch's
  // losses were reported, so the cache sees fresh weights before every read.
  Result<std::vector<float>> train(const std::vector<float>& parameters, RoundSamples& samples,
                                   const TrainSettings& settings) override {
    if (!model_) return internal_error("train() before prepare()");
    FEDCASE_RETURN_IF_ERROR(ml::validate_train_options(settings));
    FEDCASE_RETURN_IF_ERROR(model_->set_parameters(parameters));
    const size_t n = samples.size(), batch = std::max<size_t>(1, settings.batch_size);
    ml::Dataset buffer = batch_buffer(batch);
    // The model sees buffer positions: each batch indexes the buffer from 0.
    std::vector<size_t> positions(n);
    for (size_t i = 0; i < n; ++i) positions[i] = i % batch;
    FEDCASE_RETURN_IF_ERROR(stage(samples, 0, std::min(batch, n), buffer));
    size_t next = batch;  // first position of the next batch
    Status read_status;
    model_->train(buffer, positions, settings,
                  [&](const std::vector<size_t>&, const std::vector<float>& losses) {
                    // After a failed read the buffer is stale: its losses are not reported.
                    if (!read_status.ok()) return;
                    samples.report_losses(next - batch, losses);
                    if (next < n) {
                      read_status = stage(samples, next, std::min(batch, n - next), buffer);
                    }
                    next += batch;
                  });
    FEDCASE_RETURN_IF_ERROR(read_status);
    return model_->parameters();
  }

  Result<Evaluation> evaluate(const std::vector<float>& parameters,
                              RoundSamples& samples) override {
    if (!model_) return internal_error("evaluate() before prepare()");
    FEDCASE_RETURN_IF_ERROR(model_->set_parameters(parameters));
    ml::Dataset all = batch_buffer(samples.size());
    FEDCASE_RETURN_IF_ERROR(stage(samples, 0, samples.size(), all));
    const ml::EvalResult e = model_->evaluate(all);
    return Evaluation{e.samples, e.loss, {{"accuracy", e.accuracy}}};
  }

 private:
  uint64_t seed_;
  std::optional<ml::Model> model_;
};

}  // namespace

std::string fashion_record(const ml::Dataset& data, size_t i) {
  std::string record(1 + data.image_bytes(), '\0');
  record[0] = char(data.labels[i]);
  std::memcpy(record.data() + 1, data.pixels.data() + i * data.image_bytes(), data.image_bytes());
  return record;
}

std::unique_ptr<Trainer> make_builtin_trainer(uint64_t seed) {
  return std::make_unique<BuiltinTrainer>(seed);
}

}  // namespace fedcase::client
