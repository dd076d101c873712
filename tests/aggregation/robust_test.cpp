#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "aggregation/robust.h"
#include "test_util.h"

using namespace fedcase;
using namespace fedcase::aggregation;
using fedcase::aggregation::testing::pointers;
using fedcase::aggregation::testing::random_updates;

namespace {

// Five 2-D updates: four honest ones near the origin and one attacker far away.
//   squared distances  a-b 1, a-c 4, a-d 2, a-e 200, b-c 5, b-d 1, b-e 181,
//                      c-d 2, c-e 164, d-e 162
// With f = 1 each score sums the n - f - 2 = 2 nearest: a 3, b 2, c 6, d 3, e 326.
const std::vector<std::vector<float>> kFleet = {{0, 0}, {1, 0}, {0, 2}, {1, 1}, {10, 10}};

UpdateBatch batch_of(const std::vector<std::vector<float>>& updates) {
  return {pointers(updates), updates.front().size()};
}

}  // namespace

TEST_CASE("coordinate median, odd and even counts") {
  WorkerPool pool(1);
  auto odd = coordinate_median(batch_of(kFleet), pool);
  REQUIRE(odd.ok());
  CHECK(*odd == std::vector<float>{1, 1});  // x: 0 0 1 1 10, y: 0 0 1 2 10
  std::vector<std::vector<float>> four(kFleet.begin(), kFleet.begin() + 4);
  CHECK(*coordinate_median(batch_of(four), pool) == std::vector<float>{0.5f, 0.5f});
  CHECK(coordinate_median(UpdateBatch{{}, 2}, pool).status().code() == Code::kConflict);
}

TEST_CASE("trimmed mean drops floor(beta * n) values at each end") {
  WorkerPool pool(1);
  // beta 0.2, n 5: k = 1. x keeps 0 1 1, y keeps 0 1 2.
  auto r = trimmed_mean(batch_of(kFleet), 0.2, pool);
  REQUIRE(r.ok());
  CHECK((*r)[0] == doctest::Approx(2.0 / 3));
  CHECK((*r)[1] == doctest::Approx(1.0));
  // beta 0.1, n 5: k = 0, the plain mean.
  CHECK((*trimmed_mean(batch_of(kFleet), 0.1, pool))[0] == doctest::Approx(12.0 / 5));
  CHECK(trimmed_mean(batch_of(kFleet), 0.5, pool).status().code() == Code::kInvalidArgument);
}

TEST_CASE("krum scores and multi-krum selection match the hand computation") {
  WorkerPool pool(1);
  const auto batch = batch_of(kFleet);
  auto dist = pairwise_squared_distances(batch, pool);
  CHECK(dist[0 * 5 + 4] == 200);
  CHECK(dist[2 * 5 + 1] == 5);
  auto sel = krum_select(batch, 1, 3, pool);
  REQUIRE(sel.ok());
  CHECK(sel->scores == std::vector<double>{3, 2, 6, 3, 326});
  CHECK(sel->selected == std::vector<size_t>{1, 0, 3});  // a and d tie: lower index first
  CHECK(*multi_krum(batch, 1, 1, pool) == std::vector<float>{1, 0});  // Krum picks b
  auto three = *multi_krum(batch, 1, 3, pool);
  CHECK(three[0] == doctest::Approx(2.0 / 3));
  CHECK(three[1] == doctest::Approx(1.0 / 3));
}

TEST_CASE("krum refuses too few updates and a bad m") {
  WorkerPool pool(1);
  std::vector<std::vector<float>> four(kFleet.begin(), kFleet.begin() + 4);
  CHECK(krum_select(batch_of(four), 1, 1, pool).status().code() == Code::kConflict);
  CHECK(krum_select(batch_of(kFleet), 1, 6, pool).status().code() == Code::kConflict);
  CHECK(krum_select(batch_of(kFleet), 1, 0, pool).status().code() == Code::kInvalidArgument);
  CHECK(krum_select(batch_of(four), 0, 1, pool).ok());  // n = 4 >= 2 * 0 + 3
}

namespace {

// Random updates whose columns also include the hard cases for selection: every value equal,
// many duplicates, already sorted and reverse sorted.
std::vector<std::vector<float>> awkward_updates(size_t n, size_t params, uint64_t seed) {
  auto updates = random_updates(n, params, seed);
  for (size_t u = 0; u < n; ++u) {
    for (size_t j = 0; j < params; ++j) {
      float& v = updates[u][j];
      switch (j % 5) {
        case 0:
          v = 0.5f;
          break;
        case 1:
          v = std::round(v * 2) / 2;
          break;
        case 2:
          v = static_cast<float>(u);
          break;
        case 3:
          v = static_cast<float>(n - u);
          break;
        default:
          break;
      }
    }
  }
  return updates;
}

}  // namespace

TEST_CASE("robust rules on many coordinates match a sort-based reference on any thread count") {
  for (size_t n : {1, 4, 9, 40, 151}) {
    CAPTURE(n);
    const size_t params = n <= 9 ? 100003 : 20011;  // large enough to split across threads
    auto updates = awkward_updates(n, params, 100 + n);
    const UpdateBatch batch = batch_of(updates);
    const size_t k = static_cast<size_t>(std::floor(0.25 * n));
    std::vector<float> median_ref(params), trimmed_ref(params);
    std::vector<float> column(n);
    for (size_t j = 0; j < params; ++j) {
      for (size_t u = 0; u < n; ++u) column[u] = updates[u][j];
      std::sort(column.begin(), column.end());
      median_ref[j] = n % 2 ? column[n / 2]
                            : static_cast<float>((double{column[n / 2 - 1]} + column[n / 2]) / 2);
      double sum = 0;
      for (size_t u = k; u < n - k; ++u) sum += column[u];
      trimmed_ref[j] = static_cast<float>(sum / static_cast<double>(n - 2 * k));
    }
    WorkerPool one(1), three(3);
    const auto median1 = *coordinate_median(batch, one);
    CHECK(median1 == median_ref);
    CHECK(*coordinate_median(batch, three) == median1);
    const auto trimmed1 = *trimmed_mean(batch, 0.25, one);
    CHECK(*trimmed_mean(batch, 0.25, three) == trimmed1);
    double worst = 0;
    for (size_t j = 0; j < params; ++j) {
      worst = std::max(worst, double{std::fabs(trimmed1[j] - trimmed_ref[j])} /
                                  std::max(1.0, double{std::fabs(trimmed_ref[j])}));
    }
    CHECK(worst < 1e-6);
  }
}

TEST_CASE("pairwise distances on many coordinates match a double reference") {
  const size_t params = 70001, n = 5;
  auto updates = random_updates(n, params, 5);
  WorkerPool pool(2);
  auto dist = pairwise_squared_distances(batch_of(updates), pool);
  for (size_t i = 0; i < n; ++i) {
    CHECK(dist[i * n + i] == 0);
    for (size_t j = 0; j < n; ++j) {
      double ref = 0;
      for (size_t p = 0; p < params; ++p) {
        const double d = double{updates[i][p]} - updates[j][p];
        ref += d * d;
      }
      CHECK(dist[i * n + j] == doctest::Approx(ref).epsilon(1e-6));
    }
  }
}
