#pragma once
// In-memory caches of sample records (the bytes read from the SampleSource), behind one
// interface with a byte budget. Pure logic: a cache never reads storage; the caller looks a
// sample up, reads it on a miss and offers the record back.
//
//   none        keeps nothing: every lookup misses.
//   lru         keeps the most recently used records.
//   importance  SHADE's importance-aware cache. A ghost table keeps (weight, frequency) for
//               every sample, cached or not: the sampler's weight and the number of lookups.
//               Cached samples sit in a min-heap keyed by (weight, frequency), compared in
//               that order. A record offered to a full cache replaces the heap minimum only
//               if its own key is larger.
//
// Every policy honours a round's read plan (adopt_plan): the cached samples the plan reads
// are pinned until their planned reads are served, so a record admitted mid-round cannot turn
// a planned hit into a miss (LRU evicts the least recent unpinned record; the importance
// cache ranks pinned samples above every unpinned key).
//
// Samples are ids in [0, samples). Not thread-safe: one cache per client.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "protocol/sampling.h"

namespace fedcase::client {

// The policies a task may ask for; their names are protocol::cache_policy_name's.
using protocol::CachePolicy;

struct CacheStats {
  uint64_t hits = 0;        // lookups served from the cache
  uint64_t misses = 0;      // lookups the caller had to serve from storage
  uint64_t admissions = 0;  // records taken in
  uint64_t evictions = 0;   // records dropped to make room
  uint64_t rejections = 0;  // records offered but not taken
  uint64_t reused = 0;      // draws a plan replaced by repeats of cached samples
};

class SampleCache {
 public:
  virtual ~SampleCache() = default;

  virtual CachePolicy policy() const = 0;
  uint64_t budget_bytes() const { return budget_bytes_; }
  uint64_t used_bytes() const { return used_bytes_; }
  const CacheStats& stats() const { return stats_; }
  virtual size_t entries() const = 0;
  virtual bool contains(size_t id) const = 0;

  // Looks sample `id` up, counting a hit or a miss. A hit returns the record, valid until the
  // next non-const call; a miss returns nullptr.
  virtual const std::string* lookup(size_t id) = 0;

  // Offers the record of sample `id`, just read from storage after a miss. The policy takes
  // it (evicting as it sees fit) or not; used_bytes() never exceeds budget_bytes(). A record
  // for a sample already cached is ignored.
  virtual void offer(size_t id, std::string record) = 0;

  // The sampler's weight of sample `id` changed. Only the importance policy uses weights.
  virtual void set_importance(size_t id, double weight) {}

  // Takes a round's read plan (sample ids in reading order; ids < samples) before it is read:
  // drops the previous plan's pins and pins every cached sample of `plan` once per planned
  // read. A hit on a pinned sample serves one of its pins; a pinned sample is never evicted.
  // `reused` of the plan's draws are repeats in place of misses (stats().reused).
  void adopt_plan(const std::vector<size_t>& plan, uint64_t reused);
  bool pinned(size_t id) const { return id < pins_.size() && pins_[id] > 0; }

 protected:
  SampleCache(uint64_t budget_bytes, size_t samples)
      : budget_bytes_(budget_bytes), pins_(samples, 0) {}
  // A hit on `id`: serves one of its pins.
  void serve_pin(size_t id) {
    if (pinned(id)) pins_[id]--;
  }
  // Called when adopt_plan changed the pins.
  virtual void pins_changed() {}

  uint64_t budget_bytes_;
  uint64_t used_bytes_ = 0;
  CacheStats stats_;

 private:
  std::vector<uint32_t> pins_;  // planned reads not yet served, by id
};

// A cache of `policy` holding at most `budget_bytes` of records of samples [0, samples).
std::unique_ptr<SampleCache> make_cache(CachePolicy policy, uint64_t budget_bytes, size_t samples);

}  // namespace fedcase::client
