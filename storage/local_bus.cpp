#include "storage/local_bus.h"

#include <chrono>

#include "storage/errors.h"
#include "storage/registry.h"

namespace fedcase::storage {
namespace {

class LocalListener : public Listener {
 public:
  LocalListener(std::shared_ptr<LocalBus> bus, uint64_t id) : bus_(std::move(bus)), id_(id) {}
  ~LocalListener() override { bus_->leave(id_); }
  Result<std::optional<Notification>> next(double timeout_s) override {
    return bus_->next(id_, timeout_s);
  }

 private:
  const std::shared_ptr<LocalBus> bus_;
  const uint64_t id_;
};

}  // namespace

std::shared_ptr<LocalBus> LocalBus::of(const std::string& key) {
  // Every bus of the process, by key, while a store or a listener holds it; never destroyed:
  // stores may outlive static destructors.
  static Registry<LocalBus>* buses = new Registry<LocalBus>;
  return buses->of(key);
}

void LocalBus::publish(const std::vector<Notification>& wakeups) {
  if (wakeups.empty()) return;
  {
    MutexLock lock(mu_);
    for (auto& [id, unread] : listeners_) {
      for (const Notification& n : wakeups) {
        if (unread.wakeups.size() < kUnreadLimit) {
          unread.wakeups.push_back(n);
        } else {
          unread.missed = true;
        }
      }
    }
  }
  published_.notify_all();
}

std::unique_ptr<Listener> LocalBus::listen() {
  MutexLock lock(mu_);
  const uint64_t id = next_id_++;
  listeners_[id];
  return std::make_unique<LocalListener>(shared_from_this(), id);
}

Result<std::optional<Notification>> LocalBus::next(uint64_t id, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(std::max(0.0, timeout_s)));
  MutexLock lock(mu_);
  while (true) {
    Unread& unread = listeners_[id];
    if (unread.missed) {
      unread.missed = false;
      unread.wakeups.clear();
      return db_unavailable("more than " + std::to_string(kUnreadLimit) +
                            " wake-ups were left unread and some were dropped: read everything "
                            "again");
    }
    if (!unread.wakeups.empty()) {
      const Notification n = unread.wakeups.front();
      unread.wakeups.pop_front();
      return std::optional<Notification>(n);
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::optional<Notification>();
    published_.wait_until(mu_, deadline);
  }
}

void LocalBus::leave(uint64_t id) {
  MutexLock lock(mu_);
  listeners_.erase(id);
}

}  // namespace fedcase::storage
