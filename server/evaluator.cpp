#include "server/evaluator.h"

#include <exception>

#include "common/log.h"
#include "common/status.h"

namespace fedcase::server {

TestSetEvaluator::TestSetEvaluator(ml::Dataset data, size_t samples, int torch_threads)
    : data_(std::move(data)),
      samples_(samples),
      torch_threads_(torch_threads),
      thread_([this] { run(); }) {}

TestSetEvaluator::~TestSetEvaluator() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void TestSetEvaluator::submit(const std::string& arch, std::vector<float> params, Done done) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back({arch, std::move(params), std::move(done)});
  }
  cv_.notify_one();
}

void TestSetEvaluator::run() {
  ml::set_torch_threads(torch_threads_);
  while (true) {
    Task task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    // Nothing thrown here may end the thread.
    Result<ml::EvalResult> result = internal_error("evaluation failed");
    try {
      result = evaluate(task);
    } catch (const std::exception& e) {
      result = internal_error(std::string("evaluation failed: ") + e.what());
    }
    try {
      task.done(result);
    } catch (const std::exception& e) {
      log_error(std::string("recording an evaluation failed: ") + e.what());
    }
  }
}

Result<ml::EvalResult> TestSetEvaluator::evaluate(const Task& task) {
  auto it = models_.find(task.arch);
  if (it == models_.end()) {
    auto model = ml::Model::create(task.arch, 0);
    if (!model.ok()) return model.status();
    it = models_.emplace(task.arch, std::move(model).value()).first;
  }
  FEDCASE_RETURN_IF_ERROR(it->second.set_parameters(task.params));
  return it->second.evaluate(data_, samples_);
}

}  // namespace fedcase::server
