#pragma once
// Scores committed models. The coordinator takes any ModelEvaluator; TestSetEvaluator scores
// built-in models on a held-out Fashion-MNIST test set and TorchScript models on a server
// dataset (a folder of sample records, docs/protocol.md "Server evaluation"), on its own
// thread, so the next round opens while the last one is still being scored.

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "ml/dataset.h"
#include "ml/model.h"
#include "ml/torchscript_model.h"

namespace fedcase::server {

// The model a job's parameters belong to, as the evaluator needs it.
struct EvaluatedModel {
  std::string kind;  // "cnn" | "mlp" | "torchscript"
  // torchscript only: the module (shared with the job) and its checksum, the loss, the folder
  // of sample records to score it on and one sample's input shape.
  std::shared_ptr<const std::string> module;
  std::string module_checksum;
  std::string loss;
  std::string dataset_dir;
  std::vector<int64_t> input_shape;
};

class ModelEvaluator {
 public:
  // The evaluation, or why there is none (the model cannot be built or scored here).
  using Done = std::function<void(const Result<ml::EvalResult>&)>;
  virtual ~ModelEvaluator() = default;

  // Queues the evaluation of `params` of `model`. `done` runs exactly once, later, on a
  // thread of the evaluator's. Thread-safe. Tasks run in submission order.
  virtual void submit(const EvaluatedModel& model, std::vector<float> params, Done done) = 0;
};

class TestSetEvaluator final : public ModelEvaluator {
 public:
  // Evaluates built-in models on the first `samples` of `data`, TorchScript models on the
  // first `samples` records of their dataset, with `torch_threads` intra-op threads.
  TestSetEvaluator(ml::Dataset data, size_t samples, int torch_threads);
  ~TestSetEvaluator() override;  // finishes queued tasks, then joins

  void submit(const EvaluatedModel& model, std::vector<float> params, Done done) override;

 private:
  struct Task {
    EvaluatedModel model;
    std::vector<float> params;
    Done done;
  };
  void run();
  Result<ml::EvalResult> evaluate(const Task& task);
  Result<ml::EvalResult> evaluate_torchscript(const Task& task);

  ml::Dataset data_;
  size_t samples_;
  int torch_threads_;
  // The evaluator thread's own: one reusable model per built-in arch and per module checksum,
  // the records of each dataset folder read so far (each cache dropped whole when it would
  // pass kMaxCached entries, so jobs that come and go do not pile up).
  std::map<std::string, ml::Model> models_;
  std::map<std::string, ml::TorchScriptModel> modules_;
  std::map<std::string, std::vector<std::string>> datasets_;
  Mutex mu_;
  CondVar cv_;
  std::deque<Task> queue_ FEDCASE_GUARDED_BY(mu_);
  bool stopping_ FEDCASE_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fedcase::server
