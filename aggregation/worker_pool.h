#pragma once
// A small persistent pool of threads that runs one data-parallel loop at a time over a flat
// index range. The calling thread takes part in every loop, so WorkerPool(1) starts no thread.
// Thread safety: one caller at a time (the owner of the aggregate serialises its calls).

#include <cstddef>
#include <functional>
#include <thread>
#include <utility>
#include <vector>

#include "common/mutex.h"

namespace fedcase::aggregation {

// Thread count used when a caller does not choose one.
inline constexpr size_t kDefaultThreads = 2;

class WorkerPool {
 public:
  // body(part, begin, end): processes [begin, end); `part` < threads() identifies the range so
  // the body can use per-part scratch space. It must not throw.
  using RangeBody = std::function<void(size_t part, size_t begin, size_t end)>;

  // Starts threads - 1 workers (threads 0 is treated as 1).
  explicit WorkerPool(size_t threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  size_t threads() const { return workers_.size() + 1; }

  // Splits [0, n) into at most threads() contiguous ranges of at least `min_range` elements
  // (inner boundaries are multiples of 16, so float ranges start on 64-byte lines), runs body
  // on each concurrently and returns when all have returned. Small n runs inline.
  void for_ranges(size_t n, size_t min_range, const RangeBody& body);

 private:
  void worker_loop(size_t part);

  std::vector<std::thread> workers_;
  Mutex mutex_;
  CondVar start_cv_;
  CondVar done_cv_;
  const RangeBody* body_ FEDCASE_GUARDED_BY(mutex_) = nullptr;  // the loop being run
  // One per active part; written under mutex_, read by the caller's own part without it while
  // the loop runs (no worker writes it).
  std::vector<std::pair<size_t, size_t>> ranges_;
  size_t generation_ FEDCASE_GUARDED_BY(mutex_) = 0;  // bumped for each loop
  size_t pending_ FEDCASE_GUARDED_BY(mutex_) = 0;     // workers still running the current loop
  bool stopping_ FEDCASE_GUARDED_BY(mutex_) = false;
};

}  // namespace fedcase::aggregation
