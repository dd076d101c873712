#include "aggregation/worker_pool.h"

#include <algorithm>

namespace fedcase::aggregation {

WorkerPool::WorkerPool(size_t threads) {
  const size_t count = std::max<size_t>(threads, 1);
  workers_.reserve(count - 1);
  for (size_t part = 1; part < count; ++part)
    workers_.emplace_back([this, part] { worker_loop(part); });
}

WorkerPool::~WorkerPool() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void WorkerPool::for_ranges(size_t n, size_t min_range, const RangeBody& body) {
  if (n == 0) return;
  const size_t parts = std::min(threads(), std::max<size_t>(1, n / std::max<size_t>(min_range, 1)));
  if (parts == 1) {
    body(0, 0, n);
    return;
  }
  std::vector<std::pair<size_t, size_t>> ranges(parts);
  for (size_t p = 0; p < parts; ++p) {
    const size_t begin = p == 0 ? 0 : (n * p / parts) & ~size_t{15};
    const size_t end = p + 1 == parts ? n : (n * (p + 1) / parts) & ~size_t{15};
    ranges[p] = {begin, end};
  }
  {
    MutexLock lock(mutex_);
    ranges_ = std::move(ranges);
    body_ = &body;
    pending_ = parts - 1;
    ++generation_;
  }
  start_cv_.notify_all();
  body(0, ranges_[0].first, ranges_[0].second);
  MutexLock lock(mutex_);
  while (pending_ != 0) done_cv_.wait(mutex_);
  body_ = nullptr;
}

void WorkerPool::worker_loop(size_t part) {
  size_t seen = 0;
  mutex_.lock();
  while (true) {
    while (!stopping_ && generation_ == seen) start_cv_.wait(mutex_);
    if (stopping_) break;
    seen = generation_;
    if (part >= ranges_.size()) continue;
    const auto [begin, end] = ranges_[part];
    const RangeBody* body = body_;
    mutex_.unlock();
    (*body)(part, begin, end);
    mutex_.lock();
    if (--pending_ == 0) done_cv_.notify_one();
  }
  mutex_.unlock();
}

}  // namespace fedcase::aggregation
