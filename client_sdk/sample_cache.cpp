#include "client_sdk/sample_cache.h"

#include <algorithm>
#include <cmath>
#include <list>
#include <unordered_map>

namespace fedcase::client {
namespace {

class NoCache final : public SampleCache {
 public:
  NoCache() : SampleCache(0) {}
  CachePolicy policy() const override { return CachePolicy::kNone; }
  size_t entries() const override { return 0; }
  bool contains(size_t) const override { return false; }
  const std::string* lookup(size_t) override {
    stats_.misses++;
    return nullptr;
  }
  void offer(size_t, std::string) override { stats_.rejections++; }
};

class LruCache final : public SampleCache {
 public:
  explicit LruCache(uint64_t budget_bytes) : SampleCache(budget_bytes) {}
  CachePolicy policy() const override { return CachePolicy::kLru; }
  size_t entries() const override { return entries_.size(); }
  bool contains(size_t id) const override { return entries_.count(id) > 0; }

  const std::string* lookup(size_t id) override {
    auto it = entries_.find(id);
    if (it == entries_.end()) {
      stats_.misses++;
      return nullptr;
    }
    stats_.hits++;
    recency_.splice(recency_.begin(), recency_, it->second.position);
    return &it->second.record;
  }

  void offer(size_t id, std::string record) override {
    if (contains(id)) return;
    if (record.size() > budget_bytes_) {
      stats_.rejections++;
      return;
    }
    while (used_bytes_ + record.size() > budget_bytes_) {
      auto victim = entries_.find(recency_.back());
      used_bytes_ -= victim->second.record.size();
      entries_.erase(victim);
      recency_.pop_back();
      stats_.evictions++;
    }
    used_bytes_ += record.size();
    recency_.push_front(id);
    entries_[id] = Entry{recency_.begin(), std::move(record)};
    stats_.admissions++;
  }

 private:
  struct Entry {
    std::list<size_t>::iterator position;
    std::string record;
  };
  std::list<size_t> recency_;  // most recent first
  std::unordered_map<size_t, Entry> entries_;
};

class ImportanceCache final : public SampleCache {
 public:
  ImportanceCache(uint64_t budget_bytes, size_t samples)
      : SampleCache(budget_bytes),
        ghost_(samples),
        records_(samples),
        slot_(samples, kAbsent),
        pins_(samples, 0) {}
  CachePolicy policy() const override { return CachePolicy::kImportance; }
  size_t entries() const override { return heap_.size(); }
  bool contains(size_t id) const override { return slot_[id] != kAbsent; }

  const std::string* lookup(size_t id) override {
    ghost_[id].frequency++;
    if (!contains(id)) {
      stats_.misses++;
      return nullptr;
    }
    stats_.hits++;
    if (pins_[id] > 0) pins_[id]--;
    fix(id);
    return &records_[id];
  }

  void offer(size_t id, std::string record) override {
    if (contains(id)) return;
    const uint64_t size = record.size();
    // Take the smallest keys out while they are smaller than the newcomer's and room is
    // short; put them back if that does not make enough room.
    std::vector<size_t> victims;
    uint64_t freed = 0;
    while (size <= budget_bytes_ && used_bytes_ - freed + size > budget_bytes_ && !heap_.empty() &&
           less(heap_.front(), id)) {
      victims.push_back(heap_.front());
      freed += records_[heap_.front()].size();
      remove(heap_.front());
    }
    if (size > budget_bytes_ || used_bytes_ - freed + size > budget_bytes_) {
      for (size_t v : victims) insert(v);
      stats_.rejections++;
      return;
    }
    for (size_t v : victims) records_[v] = std::string();
    stats_.evictions += victims.size();
    used_bytes_ -= freed;
    used_bytes_ += size;
    records_[id] = std::move(record);
    insert(id);
    stats_.admissions++;
  }

  void set_importance(size_t id, double weight) override {
    ghost_[id].weight = weight;
    if (contains(id)) fix(id);
  }

  size_t plan_reuse(std::vector<size_t>& order, double repetition_factor) override {
    for (size_t id : heap_) pins_[id] = 0;  // the previous plan's leftovers
    rebuild_heap();
    if (!std::isfinite(repetition_factor) || repetition_factor < 1) return 0;
    const size_t factor = size_t(std::floor(std::min(repetition_factor, 1e6)));
    std::unordered_map<size_t, size_t> draws;  // of each cached sample: the hits
    std::vector<size_t> hit;                   // the hit samples, by first draw
    std::vector<size_t> misses;                // positions of draws that would miss
    for (size_t p = 0; p < order.size(); ++p) {
      if (!contains(order[p])) {
        misses.push_back(p);
      } else if (draws[order[p]]++ == 0) {
        hit.push_back(order[p]);
      }
    }
    std::stable_sort(misses.begin(), misses.end(),
                     [&](size_t a, size_t b) { return less(order[a], order[b]); });
    std::stable_sort(hit.begin(), hit.end(), [&](size_t a, size_t b) { return less(b, a); });
    // Repeats in passes over the hit samples, most important first: each pass gives one more
    // use to every sample below factor x its draws.
    std::unordered_map<size_t, size_t> uses = draws;
    size_t replaced = 0;
    for (bool granted = true; granted && replaced < misses.size();) {
      granted = false;
      for (size_t c : hit) {
        if (replaced == misses.size()) break;
        if (uses[c] >= factor * draws[c]) continue;
        uses[c]++;
        order[misses[replaced++]] = c;
        granted = true;
      }
    }
    // Pin every cached sample the plan reads until its planned uses are served.
    for (size_t id : order) {
      if (contains(id)) pins_[id]++;
    }
    rebuild_heap();
    stats_.reused += replaced;
    return replaced;
  }

 private:
  static constexpr size_t kAbsent = SIZE_MAX;
  struct Ghost {
    double weight = 1;
    uint64_t frequency = 0;
  };

  // Key order: pinned samples above all others, then weight, then frequency.
  bool less(size_t a, size_t b) const {
    const bool pa = pins_[a] > 0, pb = pins_[b] > 0;
    if (pa != pb) return pb;
    const Ghost& x = ghost_[a];
    const Ghost& y = ghost_[b];
    return x.weight < y.weight || (x.weight == y.weight && x.frequency < y.frequency);
  }

  void place(size_t pos, size_t id) {
    heap_[pos] = id;
    slot_[id] = pos;
  }
  void sift_up(size_t pos) {
    const size_t id = heap_[pos];
    while (pos > 0 && less(id, heap_[(pos - 1) / 2])) {
      place(pos, heap_[(pos - 1) / 2]);
      pos = (pos - 1) / 2;
    }
    place(pos, id);
  }
  void sift_down(size_t pos) {
    const size_t id = heap_[pos];
    for (;;) {
      size_t child = 2 * pos + 1;
      if (child >= heap_.size()) break;
      if (child + 1 < heap_.size() && less(heap_[child + 1], heap_[child])) ++child;
      if (!less(heap_[child], id)) break;
      place(pos, heap_[child]);
      pos = child;
    }
    place(pos, id);
  }
  void fix(size_t id) {
    sift_up(slot_[id]);
    sift_down(slot_[id]);
  }
  void rebuild_heap() {
    for (size_t pos = heap_.size() / 2; pos-- > 0;) sift_down(pos);
  }
  void insert(size_t id) {
    heap_.push_back(id);
    sift_up(heap_.size() - 1);
  }
  void remove(size_t id) {
    const size_t pos = slot_[id];
    const size_t last = heap_.back();
    heap_.pop_back();
    slot_[id] = kAbsent;
    if (last == id) return;
    place(pos, last);
    sift_up(pos);
    sift_down(slot_[last]);
  }

  std::vector<Ghost> ghost_;
  std::vector<std::string> records_;  // by id; empty when not cached
  std::vector<size_t> heap_;          // cached ids, a min-heap by key
  std::vector<size_t> slot_;          // position of each id in heap_, or kAbsent
  std::vector<uint32_t> pins_;        // planned uses not yet served, by id
};

}  // namespace

const char* cache_policy_name(CachePolicy policy) {
  switch (policy) {
    case CachePolicy::kNone:
      return "none";
    case CachePolicy::kLru:
      return "lru";
    case CachePolicy::kImportance:
      return "importance";
  }
  return "none";
}

Result<CachePolicy> parse_cache_policy(std::string_view name) {
  for (CachePolicy p : {CachePolicy::kNone, CachePolicy::kLru, CachePolicy::kImportance}) {
    if (name == cache_policy_name(p)) return p;
  }
  return invalid_argument("unknown cache policy '" + std::string(name) +
                          "' (expected none, lru or importance)");
}

std::unique_ptr<SampleCache> make_cache(CachePolicy policy, uint64_t budget_bytes, size_t samples) {
  switch (policy) {
    case CachePolicy::kLru:
      return std::make_unique<LruCache>(budget_bytes);
    case CachePolicy::kImportance:
      return std::make_unique<ImportanceCache>(budget_bytes, samples);
    case CachePolicy::kNone:
      break;
  }
  return std::make_unique<NoCache>();
}

}  // namespace fedcase::client
