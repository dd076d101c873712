#pragma once
// Limits the HTTP front end applies before a request reaches the API, as pure logic:
// open connections per client address, and large bodies held in memory at once.
// Thread-safe: the front end calls both from every I/O thread.

#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"

namespace fedcase::server {

// Open connections per address. A lease counts one connection until it is destroyed.
class AddressConnections {
 public:
  explicit AddressConnections(size_t max_per_address) : max_(max_per_address) {}

  class Lease {
   public:
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;

   private:
    friend class AddressConnections;
    Lease(AddressConnections& owner, std::string address)
        : owner_(owner), address_(std::move(address)) {}
    AddressConnections& owner_;
    std::string address_;
  };

  // A lease for one more connection from `address`, or null when it already has the most
  // allowed. Every lease must be destroyed before this object.
  std::unique_ptr<Lease> open(const std::string& address);

 private:
  void close(const std::string& address);

  const size_t max_;
  Mutex mu_;
  std::unordered_map<std::string, size_t> open_ FEDCASE_GUARDED_BY(mu_);
};

// A counting semaphore whose waiters are callbacks, not threads: at most `capacity` holders
// at once, the others queued in arrival order.
class BodySlots {
 public:
  // `max_kept_bytes`: the largest buffer kept (the largest update body: a job's model file,
  // read once, is freed rather than kept resident for the uploads).
  BodySlots(size_t capacity, size_t max_kept_bytes)
      : capacity_(capacity), max_kept_bytes_(max_kept_bytes), free_(capacity) {}

  // Takes a slot and returns true when one is free. Otherwise queues `granted` and returns
  // false: `granted` is called later, with a slot already taken for it, on the thread that
  // releases one; it must only hand the work elsewhere, and return false when nobody wants
  // the slot any more (then it passes to the next waiter).
  bool acquire(std::function<bool()> granted);
  // Gives a slot back: to the oldest waiter that still wants one, else to the free count.
  void release();

  // The memory of bodies read before, so that a slot's holder reads into pages already
  // mapped instead of allocating (and faulting in) a new buffer per body. take_buffer gives
  // a kept buffer, still holding its last body (resizing it to a body of the same length
  // writes nothing), or a new empty one; keep_buffer takes one back. At most `capacity` are
  // kept, none larger than `max_kept_bytes`: the memory the slots bound anyway.
  std::string take_buffer();
  void keep_buffer(std::string&& buffer);

 private:
  const size_t capacity_;
  const size_t max_kept_bytes_;
  Mutex mu_;
  size_t free_ FEDCASE_GUARDED_BY(mu_);
  std::deque<std::function<bool()>> waiters_ FEDCASE_GUARDED_BY(mu_);
  std::vector<std::string> buffers_ FEDCASE_GUARDED_BY(mu_);
};

}  // namespace fedcase::server
