#include "client_sdk/sample_cache.h"

#include <doctest/doctest.h>

#include <map>
#include <random>

using namespace fedcase;
using namespace fedcase::client;

namespace {

std::string record(size_t id, size_t bytes = 100) {
  return std::string(bytes, char('a' + id % 26));
}

// Looks `id` up and, on a miss, offers its record, as the local trainer does.
bool access(SampleCache& cache, size_t id, size_t bytes = 100) {
  if (cache.lookup(id)) return true;
  cache.offer(id, record(id, bytes));
  return false;
}

}  // namespace

TEST_CASE("every cache policy makes a cache of that policy") {
  for (CachePolicy p : {CachePolicy::kNone, CachePolicy::kLru, CachePolicy::kImportance}) {
    CHECK(make_cache(p, 1000, 10)->policy() == p);
  }
}

TEST_CASE("no cache ever exceeds its byte budget, whatever the record sizes") {
  for (CachePolicy p : {CachePolicy::kNone, CachePolicy::kLru, CachePolicy::kImportance}) {
    CAPTURE(cache_policy_name(p));
    auto cache = make_cache(p, 1000, 200);
    std::mt19937_64 rng(5);
    std::map<size_t, size_t> sizes;  // the size each id's record always has
    for (int step = 0; step < 5000; ++step) {
      size_t id = rng() % 200;
      if (!sizes.count(id)) sizes[id] = 1 + rng() % 400;
      if (step % 3 == 0) cache->set_importance(id, double(rng() % 1000) / 100.0);
      access(*cache, id, sizes[id]);
      REQUIRE(cache->used_bytes() <= cache->budget_bytes());
      uint64_t held = 0;
      for (const auto& [i, bytes] : sizes) held += cache->contains(i) ? bytes : 0;
      REQUIRE(held == cache->used_bytes());
    }
    CHECK(cache->stats().hits + cache->stats().misses == 5000);
  }
}

TEST_CASE("hits and misses are counted per lookup") {
  auto none = make_cache(CachePolicy::kNone, 1000, 10);
  CHECK_FALSE(access(*none, 1));
  CHECK_FALSE(access(*none, 1));
  CHECK(none->stats().misses == 2);
  CHECK(none->stats().hits == 0);
  CHECK(none->entries() == 0);

  for (CachePolicy p : {CachePolicy::kLru, CachePolicy::kImportance}) {
    auto cache = make_cache(p, 1000, 10);
    CHECK_FALSE(access(*cache, 1));
    CHECK(access(*cache, 1));
    CHECK(access(*cache, 1));
    CHECK_FALSE(access(*cache, 2));
    CHECK(cache->stats().hits == 2);
    CHECK(cache->stats().misses == 2);
    CHECK(cache->stats().admissions == 2);
    const std::string* hit = cache->lookup(2);
    REQUIRE(hit);
    CHECK(*hit == record(2));
  }
}

TEST_CASE("lru evicts the least recently used record") {
  auto cache = make_cache(CachePolicy::kLru, 300, 10);  // three 100-byte records
  access(*cache, 0);
  access(*cache, 1);
  access(*cache, 2);
  access(*cache, 0);  // 1 is now the least recently used
  access(*cache, 3);
  CHECK(cache->contains(0));
  CHECK_FALSE(cache->contains(1));
  CHECK(cache->contains(2));
  CHECK(cache->contains(3));
  access(*cache, 4);  // then 2
  CHECK_FALSE(cache->contains(2));
  CHECK(cache->stats().evictions == 2);
  CHECK(cache->used_bytes() == 300);
}

TEST_CASE("the importance cache admits a record only if its key beats the heap minimum") {
  auto cache = make_cache(CachePolicy::kImportance, 200, 10);  // two 100-byte records
  for (auto [id, w] : {std::pair<size_t, double>{0, 3}, {1, 2}, {2, 1}, {3, 5}, {4, 2.5}}) {
    cache->set_importance(id, w);
  }
  access(*cache, 0);
  access(*cache, 1);
  access(*cache, 2);  // weight 1 < minimum 2: rejected
  CHECK_FALSE(cache->contains(2));
  CHECK(cache->stats().rejections == 1);
  access(*cache, 3);  // weight 5 > 2: evicts sample 1
  CHECK(cache->contains(0));
  CHECK_FALSE(cache->contains(1));
  CHECK(cache->contains(3));

  // Keys of cached samples follow their weights: sample 0 drops to the minimum.
  cache->set_importance(0, 1.5);
  access(*cache, 4);  // 2.5 > 1.5: evicts sample 0, not sample 3
  CHECK_FALSE(cache->contains(0));
  CHECK(cache->contains(3));
  CHECK(cache->contains(4));
  CHECK(cache->stats().evictions == 2);

  // On equal weights the more frequently looked-up sample wins.
  auto tie = make_cache(CachePolicy::kImportance, 100, 10);
  access(*tie, 5);
  tie->lookup(6);
  tie->lookup(6);
  access(*tie, 6);  // frequency 3 against 1: admitted
  CHECK(tie->contains(6));
  CHECK_FALSE(tie->contains(5));
  tie->lookup(7);
  access(*tie, 7);  // frequency 2 against 3: rejected
  CHECK_FALSE(tie->contains(7));

  // A record larger than the whole budget is never taken.
  auto small = make_cache(CachePolicy::kImportance, 50, 10);
  access(*small, 1);
  CHECK(small->entries() == 0);
  CHECK(small->stats().rejections == 1);
}

TEST_CASE("cached samples a plan relies on are pinned until their planned uses are served") {
  auto cache = make_cache(CachePolicy::kImportance, 200, 20);
  access(*cache, 10);
  access(*cache, 11);
  for (size_t id = 1; id <= 7; ++id) cache->set_importance(id, 5);  // all beat the cached
  const std::vector<size_t> order = {10, 11, 10, 11, 3, 4, 5, 6};
  cache->adopt_plan(order, 2);
  CHECK(cache->stats().reused == 2);
  CHECK(cache->pinned(10));
  CHECK_FALSE(cache->pinned(3));
  // Read the remaining draws first: they rank above the cached samples but cannot evict
  // them while their planned uses are pending.
  const uint64_t hits_before = cache->stats().hits;
  for (auto it = order.rbegin(); it != order.rend(); ++it) access(*cache, *it);
  CHECK(cache->stats().hits - hits_before == 4);
  CHECK(cache->contains(10));
  CHECK(cache->contains(11));
  CHECK(cache->stats().rejections == 4);
  // Served: unpinned, they are ordinary low keys again.
  CHECK_FALSE(cache->pinned(10));
  access(*cache, 7);
  CHECK(cache->stats().evictions == 1);
  CHECK(cache->contains(7));
}

TEST_CASE("LRU evicts the least recent unpinned record and never a planned hit") {
  auto cache = make_cache(CachePolicy::kLru, 300, 20);
  for (size_t id : {1, 2, 3}) access(*cache, id);  // recency: 3, 2, 1
  cache->adopt_plan({9, 1, 8, 1}, 0);              // 1 is the least recent, but planned twice
  access(*cache, 9);
  CHECK_FALSE(cache->contains(2));  // the least recent unpinned
  CHECK(cache->contains(1));
  CHECK(access(*cache, 1));
  CHECK(cache->pinned(1));  // one planned read left
  access(*cache, 8);
  CHECK_FALSE(cache->contains(3));
  CHECK(access(*cache, 1));
  CHECK_FALSE(cache->pinned(1));
  // With every record pinned, a newcomer is turned away rather than a plan broken.
  cache->adopt_plan({1, 8, 9, 4}, 0);
  access(*cache, 4);
  CHECK_FALSE(cache->contains(4));
  CHECK(cache->stats().rejections == 1);
  CHECK(cache->entries() == 3);
  // A new plan drops the old pins.
  cache->adopt_plan({4}, 0);
  access(*cache, 4);
  CHECK(cache->contains(4));
  // A record of an id beyond the cache's samples is kept but never pinned.
  access(*cache, 25);
  cache->adopt_plan({25}, 0);
  CHECK(cache->contains(25));
  CHECK_FALSE(cache->pinned(25));
}
