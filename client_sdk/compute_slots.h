#pragma once
// Bounds how many clients of one process train at the same moment. A fleet that stands in for
// many devices on one machine runs each device's training at full speed on a core of its own
// instead of slicing every core among all of them (which thrashes the caches and slows each
// training by more than the share it gives up). Thread-safe.

#include <cstddef>

#include "common/mutex.h"

namespace fedcase::client {

class ComputeSlots {
 public:
  explicit ComputeSlots(size_t slots) : free_(slots == 0 ? 1 : slots) {}

  // Holds one slot for its lifetime; the constructor waits for a free one.
  class Hold {
   public:
    explicit Hold(ComputeSlots& slots) : slots_(slots) {
      MutexLock lock(slots_.mu_);
      while (slots_.free_ == 0) slots_.cv_.wait(slots_.mu_);
      --slots_.free_;
    }
    ~Hold() {
      {
        MutexLock lock(slots_.mu_);
        ++slots_.free_;
      }
      slots_.cv_.notify_one();
    }
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;

   private:
    ComputeSlots& slots_;
  };

 private:
  Mutex mu_;
  CondVar cv_;
  size_t free_ FEDCASE_GUARDED_BY(mu_);
};

}  // namespace fedcase::client
