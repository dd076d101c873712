#pragma once
// Scores committed models. The coordinator takes any ModelEvaluator; TestSetEvaluator scores
// built-in models on a held-out test set on its own thread, so the next round opens while the
// last one is still being scored.

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ml/dataset.h"
#include "ml/model.h"

namespace fedcase::server {

class ModelEvaluator {
 public:
  // The evaluation, or why there is none (the model cannot be built or scored here).
  using Done = std::function<void(const Result<ml::EvalResult>&)>;
  virtual ~ModelEvaluator() = default;

  // Queues the evaluation of `params` of a model of `arch`. `done` runs exactly once, later,
  // on a thread of the evaluator's. Thread-safe. Tasks run in submission order.
  virtual void submit(const std::string& arch, std::vector<float> params, Done done) = 0;
};

class TestSetEvaluator final : public ModelEvaluator {
 public:
  // Evaluates on the first `samples` of `data` with `torch_threads` intra-op threads.
  TestSetEvaluator(ml::Dataset data, size_t samples, int torch_threads);
  ~TestSetEvaluator() override;  // finishes queued tasks, then joins

  void submit(const std::string& arch, std::vector<float> params, Done done) override;

 private:
  struct Task {
    std::string arch;
    std::vector<float> params;
    Done done;
  };
  void run();
  Result<ml::EvalResult> evaluate(const Task& task);

  ml::Dataset data_;
  size_t samples_;
  int torch_threads_;
  std::map<std::string, ml::Model> models_;  // one reusable model per arch
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace fedcase::server
