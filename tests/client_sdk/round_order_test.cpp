#include "client_sdk/round_order.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <numeric>

using namespace fedcase;
using namespace fedcase::client;

TEST_CASE("sampling modes parse by name") {
  for (Sampling s : {Sampling::kUniform, Sampling::kImportance}) {
    auto parsed = parse_sampling(sampling_name(s));
    REQUIRE(parsed.ok());
    CHECK(*parsed == s);
  }
  CHECK(parse_sampling("random").status().code() == Code::kInvalidArgument);
}

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
