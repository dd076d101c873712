#pragma once
// Evaluates committed models on the held-out test set on its own thread, so the next round
// opens while the last one is still being scored. Tasks run in submission order.

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

class Evaluator {
 public:
  using Done = std::function<void(const ml::EvalResult&)>;

  // Evaluates on the first `samples` of `data` with `torch_threads` intra-op threads.
  Evaluator(ml::Dataset data, size_t samples, int torch_threads);
  ~Evaluator();  // finishes queued tasks, then joins

  // Queues the evaluation of `params` of a model of `arch`; `done` runs on the evaluator
  // thread with the result. Precondition: arch is a valid ml::Model arch.
  void submit(const std::string& arch, std::vector<float> params, Done done);

 private:
  struct Task {
    std::string arch;
    std::vector<float> params;
    Done done;
  };
  void run();

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
