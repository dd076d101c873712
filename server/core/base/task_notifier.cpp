#include "server/core/base/task_notifier.h"

namespace fedcase::server {

uint64_t TaskNotifier::watch(ClientId client, Wake wake) {
  MutexLock lock(mu_);
  const uint64_t handle = next_handle_++;
  watches_[client].emplace(handle, std::move(wake));
  return handle;
}

void TaskNotifier::cancel(ClientId client, uint64_t handle) {
  MutexLock lock(mu_);
  auto it = watches_.find(client);
  if (it == watches_.end()) return;
  it->second.erase(handle);
  if (it->second.empty()) watches_.erase(it);
}

void TaskNotifier::notify(const std::vector<ClientId>& clients) {
  std::vector<Wake> due;
  {
    MutexLock lock(mu_);
    for (ClientId client : clients) {
      auto it = watches_.find(client);
      if (it == watches_.end()) continue;
      for (auto& [handle, wake] : it->second) due.push_back(std::move(wake));
      watches_.erase(it);
    }
  }
  for (const Wake& wake : due) wake();
}

}  // namespace fedcase::server
