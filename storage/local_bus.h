#pragma once
// Wake-ups between the stores of one process on one database file: the SQLite backend's
// notifications (PostgreSQL's go through the server). A store publishes its wake-ups on the
// bus of its file after each commit; a listener of the bus receives every one published after
// it was made. Internal to storage/. Thread-safe.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/mutex.h"
#include "storage/store.h"

namespace fedcase::storage {

class LocalBus : public std::enable_shared_from_this<LocalBus> {
 public:
  // Unread wake-ups a listener keeps; past them it is told it missed some (kUnavailable).
  static constexpr size_t kUnreadLimit = 4096;

  // The bus of the database `key` names (its canonical path), shared by every store of this
  // process on it.
  static std::shared_ptr<LocalBus> of(const std::string& key);

  void publish(const std::vector<Notification>& wakeups);
  // A listener of this bus (Store::listen), which keeps the bus alive.
  std::unique_ptr<Listener> listen();

  // For listen()'s listeners: the next wake-up of listener `id`, as Listener::next.
  Result<std::optional<Notification>> next(uint64_t id, double timeout_s);
  void leave(uint64_t id);

 private:
  struct Unread {
    std::deque<Notification> wakeups;
    bool missed = false;  // some were dropped past kUnreadLimit
  };
  Mutex mu_;
  CondVar published_;
  std::map<uint64_t, Unread> listeners_ FEDCASE_GUARDED_BY(mu_);
  uint64_t next_id_ FEDCASE_GUARDED_BY(mu_) = 1;
};

}  // namespace fedcase::storage
