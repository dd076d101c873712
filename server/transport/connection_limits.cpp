#include "server/transport/connection_limits.h"

namespace fedcase::server {

AddressConnections::Lease::~Lease() { owner_.close(address_); }

std::unique_ptr<AddressConnections::Lease> AddressConnections::open(const std::string& address) {
  MutexLock lock(mu_);
  size_t& count = open_[address];
  if (count >= max_) return nullptr;
  ++count;
  return std::unique_ptr<Lease>(new Lease(*this, address));
}

void AddressConnections::close(const std::string& address) {
  MutexLock lock(mu_);
  auto it = open_.find(address);
  if (it == open_.end()) return;
  if (--it->second == 0) open_.erase(it);
}

bool BodySlots::acquire(std::function<bool()> granted) {
  MutexLock lock(mu_);
  if (free_ > 0) {
    --free_;
    return true;
  }
  waiters_.push_back(std::move(granted));
  return false;
}

void BodySlots::release() {
  while (true) {
    std::function<bool()> next;
    {
      MutexLock lock(mu_);
      if (waiters_.empty()) {
        ++free_;
        return;
      }
      next = std::move(waiters_.front());
      waiters_.pop_front();
    }
    // Called without the lock: a waiter may release at once (it gave up meanwhile).
    if (next()) return;
  }
}

std::string BodySlots::take_buffer() {
  MutexLock lock(mu_);
  if (buffers_.empty()) return {};
  std::string buffer = std::move(buffers_.back());
  buffers_.pop_back();
  return buffer;
}

void BodySlots::keep_buffer(std::string&& buffer) {
  MutexLock lock(mu_);
  if (buffers_.size() < capacity_ && buffer.capacity() <= max_kept_bytes_) {
    buffers_.push_back(std::move(buffer));
  }
}

}  // namespace fedcase::server
