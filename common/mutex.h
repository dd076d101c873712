#pragma once
// A mutex, its scoped lock and a condition variable that clang's -Wthread-safety can check:
// a member marked FEDCASE_GUARDED_BY(mu_) may only be touched while mu_ is held, and a
// function marked FEDCASE_REQUIRES(mu_) only called with it held. `scripts/thread_safety.sh`
// (a test of `make test`) compiles every file that takes a lock with clang and
// -Wthread-safety -Werror, so a forgotten lock fails the build's tests; GCC ignores the marks.
//
// Thread safety: as std::mutex and std::condition_variable, which they wrap.

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define FEDCASE_THREAD_ATTRIBUTE(x) __attribute__((x))
#else
#define FEDCASE_THREAD_ATTRIBUTE(x)
#endif

#define FEDCASE_CAPABILITY(x) FEDCASE_THREAD_ATTRIBUTE(capability(x))
#define FEDCASE_SCOPED_CAPABILITY FEDCASE_THREAD_ATTRIBUTE(scoped_lockable)
#define FEDCASE_GUARDED_BY(x) FEDCASE_THREAD_ATTRIBUTE(guarded_by(x))
#define FEDCASE_REQUIRES(...) FEDCASE_THREAD_ATTRIBUTE(requires_capability(__VA_ARGS__))
#define FEDCASE_EXCLUDES(...) FEDCASE_THREAD_ATTRIBUTE(locks_excluded(__VA_ARGS__))
#define FEDCASE_ACQUIRE(...) FEDCASE_THREAD_ATTRIBUTE(acquire_capability(__VA_ARGS__))
#define FEDCASE_RELEASE(...) FEDCASE_THREAD_ATTRIBUTE(release_capability(__VA_ARGS__))
#define FEDCASE_ACQUIRED_AFTER(...) FEDCASE_THREAD_ATTRIBUTE(acquired_after(__VA_ARGS__))

namespace fedcase {

class FEDCASE_CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void lock() FEDCASE_ACQUIRE() { mu_.lock(); }
  void unlock() FEDCASE_RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope.
class FEDCASE_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) FEDCASE_ACQUIRE(mu) : mu_(mu) { mu_.lock(); }
  ~MutexLock() FEDCASE_RELEASE() { mu_.unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// A condition variable waited on with a Mutex held: each wait releases `mu`, blocks, and holds
// it again before it returns, as std::condition_variable does. Waits may wake spuriously, so
// callers loop on their condition, which the analysis then checks with the lock held.
class CondVar {
 public:
  void notify_one() { cv_.notify_one(); }
  void notify_all() { cv_.notify_all(); }

  void wait(Mutex& mu) FEDCASE_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    cv_.wait(lock);
    lock.release();
  }
  // Whether `deadline` has passed when the wait returns.
  template <class Clock, class Duration>
  bool wait_until(Mutex& mu, std::chrono::time_point<Clock, Duration> deadline)
      FEDCASE_REQUIRES(mu) {
    std::unique_lock<std::mutex> lock(mu.mu_, std::adopt_lock);
    const bool timed_out = cv_.wait_until(lock, deadline) == std::cv_status::timeout;
    lock.release();
    return timed_out;
  }

 private:
  std::condition_variable cv_;
};

}  // namespace fedcase
