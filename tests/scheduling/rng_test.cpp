#include "scheduling/rng.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "scheduling/percentile.h"

using namespace fedcase;
using namespace fedcase::scheduling;

TEST_CASE("the generator is seeded, bounded, and restored from its saved state") {
  Rng a(1), b(1), c(2);
  CHECK(a.next() == b.next());
  CHECK(a.next() != c.next());
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) ++counts[a.below(7)];
  for (int n : counts) CHECK(n == doctest::Approx(10000).epsilon(0.05));
  for (int i = 0; i < 1000; ++i) {
    const double u = a.unit();
    CHECK(u >= 0);
    CHECK(u < 1);
  }
  Rng restored(99);
  REQUIRE(restored.load(nlohmann::json::parse(a.save().dump())).ok());
  CHECK(restored.next() == a.next());
  CHECK_FALSE(restored.load({1, 2, 3}).ok());
  CHECK_FALSE(restored.load({0, 0, 0, 0}).ok());
  CHECK_FALSE(restored.load({1, 2, 3, -4}).ok());
  CHECK(restored.next() == a.next());  // failed loads changed nothing
}

TEST_CASE("partial shuffle puts a random sample of distinct items in front") {
  Rng rng(3);
  std::vector<int> items(100);
  std::iota(items.begin(), items.end(), 0);
  partial_shuffle(items, 10, rng);
  std::vector<int> sorted = items;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 100; ++i) CHECK(sorted[i] == i);
  CHECK_FALSE(std::is_sorted(items.begin(), items.begin() + 10));
  partial_shuffle(items, 1000, rng);  // more than there are: shuffles all
  CHECK(items.size() == 100);
}

TEST_CASE("nearest-rank percentile as Oort computes it") {
  CHECK(percentile({50, 10, 40, 20, 30}, 0.3) == 20);  // index floor(1.5) = 1
  CHECK(percentile({50, 10, 40, 20, 30}, 0.95) == 50);
  CHECK(percentile({50, 10, 40, 20, 30}, 1.0) == 50);
  CHECK(percentile({50, 10, 40, 20, 30}, 0.0) == 10);
  CHECK(percentile({7}, 0.5) == 7);
}
