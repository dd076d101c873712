#include "client_sdk/round_order.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

using namespace fedcase;
using namespace fedcase::client;

TEST_CASE("uniform rounds are shuffled passes cut at the budget") {
  ImportanceSampler sampler(10, {3});
  const auto order = plan_round_order(sampler, Sampling::kUniform, 25, nullptr, 1);
  REQUIRE(order.size() == 25);
  for (size_t pass = 0; pass < 2; ++pass) {
    std::vector<size_t> ids(order.begin() + pass * 10, order.begin() + pass * 10 + 10);
    std::sort(ids.begin(), ids.end());
    std::vector<size_t> all(10);
    std::iota(all.begin(), all.end(), 0);
    CHECK(ids == all);
  }
  CHECK(order == plan_round_order(sampler, Sampling::kUniform, 25, nullptr, 1));
  sampler.end_round(1.0);
  CHECK(order != plan_round_order(sampler, Sampling::kUniform, 25, nullptr, 1));
}

TEST_CASE("importance rounds are frequency-ordered draws with the cache's reuse") {
  ImportanceSampler sampler(50, {4});
  std::vector<size_t> ids(50);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> losses(50);
  for (size_t i = 0; i < 50; ++i) losses[i] = float(i);
  sampler.observe_batch(ids, losses);
  REQUIRE(sampler.orders_by_frequency());

  auto order = plan_round_order(sampler, Sampling::kImportance, 200, nullptr, 1);
  auto expected = sampler.draw(200);
  order_by_frequency(expected, sampler.round_seed() + 1);
  CHECK(order == expected);

  // The cache holds the two highest-weight samples; with a factor of 3 each of their draws
  // serves three reads.
  auto cache = make_cache(CachePolicy::kImportance, 2, 50);
  for (size_t i = 0; i < 50; ++i) cache->set_importance(i, sampler.weight(i));
  for (size_t id : {48, 49}) {
    cache->lookup(id);
    cache->offer(id, "x");
  }
  std::map<size_t, size_t> drawn;
  for (size_t id : expected) drawn[id]++;
  auto reused = plan_round_order(sampler, Sampling::kImportance, 200, cache.get(), 3);
  std::map<size_t, size_t> read;
  for (size_t id : reused) read[id]++;
  CHECK(read[48] == 3 * drawn[48]);
  CHECK(read[49] == 3 * drawn[49]);
  CHECK(cache->stats().reused == 2 * (drawn[48] + drawn[49]));
}

namespace {

// A sampler over 20 samples whose weights rank 1 < 2 < ... < 8 < 11 < 10 above the rest (1).
ImportanceSampler ranked_sampler() {
  ImportanceSampler sampler(20, {7});
  sampler.observe_batch({1, 2, 3, 4, 5, 6, 7, 8, 11, 10}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  return sampler;
}

}  // namespace

TEST_CASE("hits are repeated in place of the least important misses, whatever the cache") {
  const ImportanceSampler sampler = ranked_sampler();
  using Ids = std::vector<size_t>;
  for (CachePolicy policy : {CachePolicy::kLru, CachePolicy::kImportance}) {
    CAPTURE(cache_policy_name(policy));
    auto cache = make_cache(policy, 2, 20);
    for (size_t id : {10, 11}) cache->offer(id, "x");
    auto plan = [&](Ids order, double factor) {
      plan_reuse(order, *cache, sampler, factor);
      return order;
    };
    // Sample 10 is drawn once: floor(3.7) = 3 uses, so two repeats, in place of the two least
    // important misses. Sample 11 is cached but not drawn: it is not used.
    CHECK(plan({10, 3, 1, 4, 2, 5}, 3.7) == Ids{10, 3, 10, 4, 10, 5});
    // A factor of 1 repeats nothing, nor does a factor below 1 or not finite.
    for (double factor : {1.0, 0.5, std::nan("")}) {
      CHECK(plan({10, 3, 1, 4, 2, 5}, factor) == Ids{10, 3, 1, 4, 2, 5});
    }
    // A sample drawn twice may serve twice as many draws.
    CHECK(plan({10, 1, 10, 2, 3, 4, 5}, 2) == Ids{10, 10, 10, 10, 3, 4, 5});
    // Repeats go round the hit samples, most important first.
    CHECK(plan({11, 10, 1, 2, 3, 4, 5, 6}, 3) == Ids{11, 10, 10, 11, 10, 11, 5, 6});
    // Never more repeats than misses.
    Ids order = {10, 1};
    CHECK(plan_reuse(order, *cache, sampler, 50) == 1);
    CHECK(order == Ids{10, 10});
  }
  // Without a cached sample there is nothing to repeat.
  auto none = make_cache(CachePolicy::kNone, 200, 20);
  Ids order = {10, 1, 2};
  CHECK(plan_reuse(order, *none, sampler, 5) == 0);
  CHECK(order == Ids{10, 1, 2});
}

TEST_CASE("a round's plan repeats an LRU cache's hits as it does the importance cache's") {
  const ImportanceSampler sampler = ranked_sampler();
  std::vector<std::vector<size_t>> plans;
  for (CachePolicy policy : {CachePolicy::kLru, CachePolicy::kImportance}) {
    auto cache = make_cache(policy, 2, 20);
    for (size_t id : {10, 11}) cache->offer(id, "x");
    plans.push_back(plan_round_order(sampler, Sampling::kUniform, 30, cache.get(), 4));
    CHECK(cache->stats().reused > 0);
    CHECK(cache->pinned(10));
  }
  CHECK(plans[0] == plans[1]);
  CHECK(plans[0] != plan_round_order(sampler, Sampling::kUniform, 30, nullptr, 4));
}
