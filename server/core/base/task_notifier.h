#pragma once
// Wakes the long polls of clients that have just been given a task, so a waiting poll answers
// as soon as its task exists instead of re-checking on a timer.
//
// Thread safety: every method may be called from any thread. A wake-up runs on the thread
// that calls notify(), outside the notifier's lock; it must be quick (post work elsewhere).

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "common/ids.h"
#include "common/mutex.h"

namespace fedcase::server {

class TaskNotifier {
 public:
  using Wake = std::function<void()>;

  // Calls `wake` once, at the next notify() that names `client`, unless cancelled first.
  // Returns the handle for cancel().
  uint64_t watch(ClientId client, Wake wake);
  // Forgets a watch that has not fired; a fired or unknown handle is ignored.
  void cancel(ClientId client, uint64_t handle);
  // Fires and forgets every watch of `clients`.
  void notify(const std::vector<ClientId>& clients);

 private:
  Mutex mu_;
  uint64_t next_handle_ FEDCASE_GUARDED_BY(mu_) = 1;
  std::map<ClientId, std::map<uint64_t, Wake>> watches_ FEDCASE_GUARDED_BY(mu_);
};

}  // namespace fedcase::server
