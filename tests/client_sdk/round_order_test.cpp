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
  const auto order = plan_round_order(sampler, Sampling::kUniform, 25, nullptr, Repeats::fixed(1));
  REQUIRE(order.size() == 25);
  for (size_t pass = 0; pass < 2; ++pass) {
    std::vector<size_t> ids(order.begin() + pass * 10, order.begin() + pass * 10 + 10);
    std::sort(ids.begin(), ids.end());
    std::vector<size_t> all(10);
    std::iota(all.begin(), all.end(), 0);
    CHECK(ids == all);
  }
  CHECK(order == plan_round_order(sampler, Sampling::kUniform, 25, nullptr, Repeats::fixed(1)));
  sampler.end_round(1.0);
  CHECK(order != plan_round_order(sampler, Sampling::kUniform, 25, nullptr, Repeats::fixed(1)));
}

TEST_CASE("importance rounds are frequency-ordered draws with the cache's reuse") {
  ImportanceSampler sampler(50, {4});
  std::vector<size_t> ids(50);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<float> losses(50);
  for (size_t i = 0; i < 50; ++i) losses[i] = float(i);
  sampler.observe_batch(ids, losses);
  REQUIRE(sampler.orders_by_frequency());

  auto order = plan_round_order(sampler, Sampling::kImportance, 200, nullptr, Repeats::fixed(1));
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
  auto reused =
      plan_round_order(sampler, Sampling::kImportance, 200, cache.get(), Repeats::fixed(3));
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
      plan_reuse(order, *cache, sampler, Repeats::fixed(factor));
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
    CHECK(plan_reuse(order, *cache, sampler, Repeats::fixed(50)) == 1);
    CHECK(order == Ids{10, 10});
  }
  // Without a cached sample there is nothing to repeat.
  auto none = make_cache(CachePolicy::kNone, 200, 20);
  Ids order = {10, 1, 2};
  CHECK(plan_reuse(order, *none, sampler, Repeats::fixed(5)) == 0);
  CHECK(order == Ids{10, 1, 2});
}

TEST_CASE("a round's plan repeats an LRU cache's hits as it does the importance cache's") {
  const ImportanceSampler sampler = ranked_sampler();
  std::vector<std::vector<size_t>> plans;
  for (CachePolicy policy : {CachePolicy::kLru, CachePolicy::kImportance}) {
    auto cache = make_cache(policy, 2, 20);
    for (size_t id : {10, 11}) cache->offer(id, "x");
    plans.push_back(
        plan_round_order(sampler, Sampling::kUniform, 30, cache.get(), Repeats::fixed(4)));
    CHECK(cache->stats().reused > 0);
    CHECK(cache->pinned(10));
  }
  CHECK(plans[0] == plans[1]);
  CHECK(plans[0] != plan_round_order(sampler, Sampling::kUniform, 30, nullptr, Repeats::fixed(4)));
}

TEST_CASE(
    "the adaptive factor is the artifact's: enough to fill the round up to 3, else at least 3") {
  // floor(budget / hits) + 1 uses fill the round; it is taken when it is at most 3.
  CHECK(adaptive_repetition_factor(60, 100, 20) == 2);
  CHECK(adaptive_repetition_factor(50, 100, 20) == 3);
  CHECK(adaptive_repetition_factor(34, 100, 20) == 3);
  CHECK(adaptive_repetition_factor(100, 100, 20) == 2);
  CHECK(adaptive_repetition_factor(150, 100, 20) == 1);
  // More than 0.6 x batch hits: half the filling factor, rounded up, at least 3.
  CHECK(adaptive_repetition_factor(13, 100, 20) == 4);    // fill 8
  CHECK(adaptive_repetition_factor(25, 100, 20) == 3);    // fill 5 -> 3
  CHECK(adaptive_repetition_factor(20, 1000, 20) == 26);  // fill 51
  // Fewer: 0.2 x batch, at least 3.
  CHECK(adaptive_repetition_factor(10, 100, 20) == 4);
  CHECK(adaptive_repetition_factor(10, 100, 32) == 6);
  CHECK(adaptive_repetition_factor(2, 100, 5) == 3);
  // No hits: nothing to repeat.
  CHECK(adaptive_repetition_factor(0, 100, 20) == 1);
}

TEST_CASE("an adaptive plan repeats its hits by the artifact's factor") {
  const ImportanceSampler sampler = ranked_sampler();
  using Ids = std::vector<size_t>;
  auto cache = make_cache(CachePolicy::kLru, 2, 20);
  for (size_t id : {10, 11}) cache->offer(id, "x");
  // Two hits among 6 draws with a batch of 4: fill = 6 / 2 + 1 = 4 > 3 and 2 <= 0.6 x 4, so
  // max(3, floor(0.2 x 4)) = 3 uses each, filling the round.
  Ids order = {11, 10, 1, 2, 3, 4};
  CHECK(plan_reuse(order, *cache, sampler, Repeats::adaptive(4)) == 4);
  CHECK(order == Ids{11, 10, 10, 11, 10, 11});
  // One hit among 6 draws with a batch of 20: fill 7, 1 <= 12 hits, so max(3, 4) = 4 uses.
  order = {10, 1, 2, 3, 4, 5};
  CHECK(plan_reuse(order, *cache, sampler, Repeats::adaptive(20)) == 3);
  CHECK(order == Ids{10, 10, 10, 10, 4, 5});
  // The same plan at a fixed factor of 2 repeats once: the rule, not the factor, decides.
  order = {10, 1, 2, 3, 4, 5};
  CHECK(plan_reuse(order, *cache, sampler, {Repetition::kAdaptive, 2, 20}) == 3);
  order = {10, 1, 2, 3, 4, 5};
  CHECK(plan_reuse(order, *cache, sampler, Repeats::fixed(2)) == 1);
}
