#include "client_sdk/importance_sampler.h"

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <numeric>

using namespace fedcase;
using namespace fedcase::client;

namespace {

std::vector<size_t> iota_ids(size_t n) {
  std::vector<size_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

}  // namespace

TEST_CASE("weights follow the loss ranks within each batch and persist across batches") {
  ImportanceSampler s(6, {});
  for (size_t i = 0; i < 6; ++i) CHECK(s.weight(i) == 1.0);
  s.observe_batch({3, 1, 4, 0}, {0.5f, 2.0f, 0.1f, 1.0f});
  CHECK(s.weight(4) == doctest::Approx(std::log(10.0)));  // lowest loss: rank 0
  CHECK(s.weight(3) == doctest::Approx(std::log(11.0)));
  CHECK(s.weight(0) == doctest::Approx(std::log(12.0)));
  CHECK(s.weight(1) == doctest::Approx(std::log(13.0)));  // highest loss
  CHECK(s.weight(2) == 1.0);                              // not trained on yet
  CHECK(s.weight(5) == 1.0);

  // A later batch re-ranks only its own samples; equal losses keep batch order.
  s.observe_batch({1, 5}, {0.3f, 0.3f});
  CHECK(s.weight(1) == doctest::Approx(std::log(10.0)));
  CHECK(s.weight(5) == doctest::Approx(std::log(11.0)));
  CHECK(s.weight(4) == doctest::Approx(std::log(10.0)));
}

TEST_CASE("high-loss samples are drawn more often, in proportion to their weights") {
  const size_t n = 100;
  ImportanceSampler s(n, {});
  std::vector<float> losses(n);
  for (size_t i = 0; i < n; ++i) losses[i] = float(i);  // sample 99 has the highest loss
  s.observe_batch(iota_ids(n), losses);
  const size_t draws = 200000;
  std::vector<size_t> count(n);
  for (size_t id : s.draw(draws)) count[id]++;
  double low = 0, high = 0, low_w = 0, high_w = 0;
  for (size_t i = 0; i < 10; ++i) {
    low += count[i];
    high += count[n - 1 - i];
    low_w += s.weight(i);
    high_w += s.weight(n - 1 - i);
  }
  CHECK(high > 1.5 * low);
  CHECK(high / low == doctest::Approx(high_w / low_w).epsilon(0.05));
  double total_w = 0;
  for (size_t i = 0; i < n; ++i) total_w += s.weight(i);
  CHECK(count[n - 1] / double(draws) == doctest::Approx(s.weight(n - 1) / total_w).epsilon(0.1));
}

TEST_CASE("draws are reproducible from the seed, the round and the weights") {
  ImportanceSampler a(50, {7});
  ImportanceSampler b(50, {7});
  ImportanceSampler c(50, {8});
  CHECK(a.draw(500) == b.draw(500));
  CHECK(a.draw(500) != c.draw(500));

  std::vector<float> losses(50);
  for (size_t i = 0; i < 50; ++i) losses[i] = float((i * 37) % 50);
  a.observe_batch(iota_ids(50), losses);
  b.observe_batch(iota_ids(50), losses);
  const auto round0 = a.draw(500);
  CHECK(round0 == b.draw(500));
  a.end_round(1.0);
  CHECK(a.draw(500) != round0);  // a new round draws anew

  // A sampler restored from a saved state draws what the original would.
  auto restored = ImportanceSampler::restore(50, {7}, a.state());
  REQUIRE(restored.ok());
  CHECK(restored->draw(500) == a.draw(500));
  CHECK(restored->rounds() == 1);
  CHECK(ImportanceSampler::restore(49, {7}, a.state()).status().code() == Code::kInvalidArgument);
  SamplerState bad = a.state();
  bad.weights[3] = -1;
  CHECK(ImportanceSampler::restore(50, {7}, bad).status().code() == Code::kInvalidArgument);
}

TEST_CASE("the smoothing term starts at 1e-2 x the loss and follows the loss trend") {
  ImportanceSampler s(10, {});
  CHECK(s.smoothing() == 0);
  s.end_round(2.0);
  CHECK(s.smoothing() == doctest::Approx(0.02));
  s.end_round(1.5);  // the loss fell by 25%: the term shrinks
  CHECK(s.smoothing() == doctest::Approx(0.02 * std::exp(-0.25)));
  s.end_round(3.0);  // the loss doubled: the term grows
  CHECK(s.smoothing() == doctest::Approx(0.02 * std::exp(-0.25) * std::exp(1.0)));
  const double before = s.smoothing();
  s.end_round(std::nan(""));
  CHECK(s.smoothing() == before);
  CHECK(s.rounds() == 4);

  // A large smoothing term flattens the draw distribution.
  ImportanceSampler flat(2, {3, 100.0});
  flat.observe_batch({0, 1}, {0.0f, 1.0f});  // weights ln 10 and ln 11
  flat.end_round(100.0);                     // smoothing 1e4
  size_t ones = 0;
  for (size_t id : flat.draw(20000)) ones += id;
  CHECK(ones / 20000.0 == doctest::Approx(0.5).epsilon(0.05));
}

TEST_CASE("ordering by frequency puts frequent draws first, in passes") {
  std::vector<size_t> ids = {7, 5, 2, 5, 9, 5, 2};
  order_by_frequency(ids, 1);
  REQUIRE(ids.size() == 7);
  CHECK(ids[0] == 5);
  CHECK(ids[1] == 2);
  // First pass: every distinct id once; then the ids drawn more than once, then thrice.
  std::map<size_t, int> first_pass;
  for (size_t i = 0; i < 4; ++i) first_pass[ids[i]]++;
  CHECK(first_pass.size() == 4);
  CHECK(std::vector<size_t>(ids.begin() + 4, ids.end()) == std::vector<size_t>{5, 2, 5});

  // Ties are broken by the seed.
  std::vector<size_t> a = iota_ids(20), b = iota_ids(20), c = iota_ids(20);
  order_by_frequency(a, 1);
  order_by_frequency(b, 1);
  order_by_frequency(c, 2);
  CHECK(a == b);
  CHECK(a != c);

  ImportanceSampler every_other(4, {1, 1e-2, 2});
  CHECK_FALSE(every_other.orders_by_frequency());
  every_other.end_round(1.0);
  CHECK(every_other.orders_by_frequency());
  ImportanceSampler never(4, {1, 1e-2, 0});
  CHECK_FALSE(never.orders_by_frequency());
}

TEST_CASE("ordering while improving follows the last round's loss") {
  for (FrequencyOrder o : {FrequencyOrder::kPeriodic, FrequencyOrder::kWhileImproving}) {
    auto parsed = parse_frequency_order(frequency_order_name(o));
    REQUIRE(parsed.ok());
    CHECK(*parsed == o);
  }
  CHECK(parse_frequency_order("always").status().code() == Code::kInvalidArgument);

  ImportanceSampler s(4, {1, 1e-2, 1, FrequencyOrder::kWhileImproving});
  CHECK_FALSE(s.orders_by_frequency());  // no trend before two rounds
  s.end_round(2.0);
  CHECK_FALSE(s.orders_by_frequency());
  s.end_round(1.5);  // fell
  CHECK(s.orders_by_frequency());
  CHECK(s.state().loss_fell);
  s.end_round(1.5);  // flat
  CHECK_FALSE(s.orders_by_frequency());
  s.end_round(1.0);
  CHECK(s.orders_by_frequency());
  s.end_round(std::nan(""));  // an unknown loss keeps the last trend
  CHECK(s.orders_by_frequency());
  s.end_round(1.2);  // rose
  CHECK_FALSE(s.orders_by_frequency());
}
