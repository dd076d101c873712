#include "client_sdk/sample_cache.h"

#include <algorithm>
#include <list>
#include <unordered_map>

namespace fedcase::client {
namespace {

class NoCache final : public SampleCache {
 public:
  NoCache() : SampleCache(0, 0) {}
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
  LruCache(uint64_t budget_bytes, size_t samples) : SampleCache(budget_bytes, samples) {}
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
    serve_pin(id);
    recency_.splice(recency_.begin(), recency_, it->second.position);
    return &it->second.record;
  }

  void offer(size_t id, std::string record) override {
    if (contains(id)) return;
    // The least recent unpinned records, until the newcomer fits. Pinned records are stepped
    // over, so a mostly pinned cache costs a walk over its pins per miss.
    std::vector<std::list<size_t>::iterator> victims;
    uint64_t freed = 0;
    auto short_of_room = [&] { return used_bytes_ - freed + record.size() > budget_bytes_; };
    for (auto it = recency_.end();
         record.size() <= budget_bytes_ && short_of_room() && it != recency_.begin();) {
      if (pinned(*--it)) continue;
      victims.push_back(it);
      freed += entries_.at(*it).record.size();
    }
    if (record.size() > budget_bytes_ || short_of_room()) {
      stats_.rejections++;
      return;
    }
    for (auto victim : victims) {
      entries_.erase(*victim);
      recency_.erase(victim);
    }
    stats_.evictions += victims.size();
    used_bytes_ -= freed;
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
      : SampleCache(budget_bytes, samples),
        ghost_(samples),
        records_(samples),
        slot_(samples, kAbsent) {}
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
    serve_pin(id);
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

 private:
  void pins_changed() override { rebuild_heap(); }

  static constexpr size_t kAbsent = SIZE_MAX;
  struct Ghost {
    double weight = 1;
    uint64_t frequency = 0;
  };

  // Key order: pinned samples above all others, then weight, then frequency.
  bool less(size_t a, size_t b) const {
    const bool pa = pinned(a), pb = pinned(b);
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
};

}  // namespace

void SampleCache::adopt_plan(const std::vector<size_t>& plan, uint64_t reused) {
  std::fill(pins_.begin(), pins_.end(), 0);
  for (size_t id : plan) {
    if (id < pins_.size() && contains(id)) pins_[id]++;
  }
  stats_.reused += reused;
  pins_changed();
}

std::unique_ptr<SampleCache> make_cache(CachePolicy policy, uint64_t budget_bytes, size_t samples) {
  switch (policy) {
    case CachePolicy::kLru:
      return std::make_unique<LruCache>(budget_bytes, samples);
    case CachePolicy::kImportance:
      return std::make_unique<ImportanceCache>(budget_bytes, samples);
    case CachePolicy::kNone:
      break;
  }
  return std::make_unique<NoCache>();
}

}  // namespace fedcase::client
