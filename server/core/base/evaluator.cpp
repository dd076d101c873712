#include "server/core/base/evaluator.h"

#include <algorithm>
#include <exception>

#include "common/log.h"
#include "common/status.h"
#include "ml/sample_files.h"

namespace fedcase::server {
namespace {

// Modules and datasets the evaluator keeps loaded at most.
constexpr size_t kMaxCached = 8;

}  // namespace

TestSetEvaluator::TestSetEvaluator(ml::Dataset data, size_t samples, int torch_threads)
    : data_(std::move(data)),
      samples_(samples),
      torch_threads_(torch_threads),
      thread_([this] { run(); }) {}

TestSetEvaluator::~TestSetEvaluator() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

void TestSetEvaluator::submit(const EvaluatedModel& model, std::vector<float> params, Done done) {
  {
    MutexLock lock(mu_);
    queue_.push_back({model, std::move(params), std::move(done)});
  }
  cv_.notify_one();
}

void TestSetEvaluator::run() {
  ml::set_torch_threads(torch_threads_);
  while (true) {
    Task task;
    {
      MutexLock lock(mu_);
      while (!stopping_ && queue_.empty()) cv_.wait(mu_);
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
  if (task.model.kind == "torchscript") return evaluate_torchscript(task);
  const std::string& arch = task.model.kind;
  auto it = models_.find(arch);
  if (it == models_.end()) {
    auto model = ml::Model::create(arch, 0);
    if (!model.ok()) return model.status();
    it = models_.emplace(arch, std::move(model).value()).first;
  }
  FEDCASE_RETURN_IF_ERROR(it->second.set_parameters(task.params));
  return it->second.evaluate(data_, samples_);
}

Result<ml::EvalResult> TestSetEvaluator::evaluate_torchscript(const Task& task) {
  const EvaluatedModel& m = task.model;
  if (!m.module || m.dataset_dir.empty()) return invalid_argument("no module or dataset");
  auto loss = ml::parse_loss(m.loss);
  if (!loss.ok()) return loss.status();
  auto module = modules_.find(m.module_checksum);
  if (module == modules_.end() && modules_.size() >= kMaxCached) modules_.clear();
  if (module == modules_.end()) {
    auto loaded = ml::TorchScriptModel::load(*m.module);
    if (!loaded.ok()) return loaded.status();
    module = modules_.emplace(m.module_checksum, std::move(loaded).value()).first;
  }
  auto dataset = datasets_.find(m.dataset_dir);
  if (dataset == datasets_.end() && datasets_.size() >= kMaxCached) datasets_.clear();
  if (dataset == datasets_.end()) {
    auto files = ml::list_sample_files(m.dataset_dir);
    if (!files.ok()) return files.status();
    std::vector<std::string> records(std::min(files->size(), samples_));
    for (size_t i = 0; i < records.size(); ++i) {
      FEDCASE_RETURN_IF_ERROR(ml::read_sample_file((*files)[i], records[i]));
    }
    dataset = datasets_.emplace(m.dataset_dir, std::move(records)).first;
  }
  FEDCASE_RETURN_IF_ERROR(module->second.set_parameters(task.params));
  const std::vector<std::string>& records = dataset->second;
  constexpr size_t kBatch = 128;
  const ml::ReadRecord read = [&records](size_t i) { return std::string_view(records[i]); };
  const std::function<std::string(size_t)> what = [](size_t i) {
    return "server dataset record " + std::to_string(i);
  };
  return module->second.evaluate(
      *loss, ml::record_batches(read, records.size(), kBatch, *loss, m.input_shape, what));
}

}  // namespace fedcase::server
