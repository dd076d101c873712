#pragma once
// Objects of this process shared by name while something holds them: the wake-up buses of
// SQLite files (local_bus.h) and the in-memory databases (memory_store.h). Internal to
// storage/. Thread-safe.

#include <iterator>
#include <map>
#include <memory>
#include <string>

#include "common/mutex.h"

namespace fedcase::storage {

template <class T>
class Registry {
 public:
  // The object named `key`: the one made before, while anything still holds it, else a new
  // T(), which the registry does not keep alive.
  std::shared_ptr<T> of(const std::string& key) {
    MutexLock lock(mu_);
    for (auto it = objects_.begin(); it != objects_.end();) {
      it = it->second.expired() ? objects_.erase(it) : std::next(it);
    }
    std::weak_ptr<T>& slot = objects_[key];
    std::shared_ptr<T> object = slot.lock();
    if (!object) {
      object = std::make_shared<T>();
      slot = object;
    }
    return object;
  }

 private:
  Mutex mu_;
  std::map<std::string, std::weak_ptr<T>> objects_ FEDCASE_GUARDED_BY(mu_);
};

}  // namespace fedcase::storage
