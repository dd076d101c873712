#pragma once
// Sharing one fleet fairly between tenants (design.md, "Fair sharing between jobs"), after
// FairServe's weighted service counters: each tenant's counter grows with the service its jobs
// receive, normalised by what its kind of work costs and by its weight; when several want
// clients at once the least-served chooses first; a tenant that becomes active again starts
// at the least-served active tenant's counter, so idle time banks no credit. Throttling
// applies only under overload and to whole interactions (here a round start or a job
// submission), never to work already started.
//
// Pure logic over plain values; times are arguments. Not thread-safe: the owner serialises.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/ids.h"

namespace fedcase::scheduling {

// The counters of whoever shares the fleet: tenants (or, for comparison, single jobs).
class ServiceCounters {
 public:
  // Adds a consumer or changes its weight (> 0; a weight-2 tenant is entitled to twice the
  // service of a weight-1 tenant). A new consumer starts inactive at counter 0.
  void set_weight(uint64_t id, double weight);
  // Marks whether `id` wants service (has a running job). Becoming active lifts its counter
  // to the smallest counter of the other active consumers when that is higher, so credit
  // cannot be saved up while idle. Unknown ids are added with weight 1.
  void set_active(uint64_t id, bool active);
  // Charges `client_seconds` of service (>= 0) for work whose class costs `class_cost`
  // (expected client-seconds of one task of the job, > 0): the counter grows by
  // client_seconds / (class_cost x weight), i.e. in weighted tasks. Negative amounts (a
  // correction of an earlier estimate) are allowed; the counter never goes below 0.
  void charge(uint64_t id, double client_seconds, double class_cost);

  double counter(uint64_t id) const;  // 0 for an unknown id
  bool active(uint64_t id) const;
  // `candidates` ordered least-served first (ties by id).
  std::vector<uint64_t> order(std::vector<uint64_t> candidates) const;
  // {"<id>": {"weight", "counter", "active"}}, for the admin API.
  nlohmann::json to_json() const;

 private:
  struct Entry {
    double weight = 1;
    double counter = 0;
    bool active = false;
  };
  std::map<uint64_t, Entry> entries_;
};

// A job that would open a round now, and whose counter it is charged to (its tenant; or the
// job itself, to compare with a per-job fair share).
struct WaitingJob {
  JobId job = 0;
  uint64_t consumer = 0;
};
// The index in `waiting` (not empty) of the job to open first: the one whose consumer is
// least served, ties by job id. After opening it, the caller charges the round's expected
// service (invited clients x their expected task seconds) so that the next pick sees it.
size_t next_to_open(const std::vector<WaitingJob>& waiting, const ServiceCounters& counters);

// At most `max_events` events in any `window_s` seconds (a sliding window).
class SlidingWindowLimit {
 public:
  SlidingWindowLimit(size_t max_events, double window_s);
  // Whether one more event at `now` fits; if it does it is recorded. When it does not,
  // `retry_after_s` says when the oldest event leaves the window.
  bool allow(double now, double& retry_after_s);
  // Whether an event at `now` would fit, recording nothing.
  bool would_allow(double now);

 private:
  void expire(double now);
  size_t max_events_;
  double window_s_;
  std::deque<double> events_;
};

// The fleet is overloaded when the clients that jobs want for rounds they would open now
// exceed the free available clients: only then are tenants throttled.
inline bool overloaded(size_t clients_wanted, size_t clients_free) {
  return clients_wanted > clients_free;
}

// Jain's fairness index of `shares` (1 = equal; 1/n = one takes all); 1 for no shares.
double jain_index(const std::vector<double>& shares);

}  // namespace fedcase::scheduling
