#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "aggregation/fedavg.h"
#include "test_util.h"

using namespace fedcase;
using namespace fedcase::aggregation;

TEST_CASE("streaming FedAvg is the sample-weighted mean") {
  StreamingFedAvg avg(3);
  std::vector<float> a{1, 2, 3}, b{3, 6, -3};
  REQUIRE(avg.add(a.data(), a.size(), 1).ok());
  REQUIRE(avg.add(b.data(), b.size(), 3).ok());
  auto mean = avg.mean();
  REQUIRE(mean.ok());
  CHECK((*mean)[0] == doctest::Approx(2.5));
  CHECK((*mean)[1] == doctest::Approx(5.0));
  CHECK((*mean)[2] == doctest::Approx(-1.5));
  CHECK(avg.updates() == 2);
  CHECK(avg.total_weight() == 4);
}

TEST_CASE("streaming FedAvg rejects bad input without changing the sum") {
  StreamingFedAvg avg(2);
  CHECK(avg.mean().status().code() == Code::kConflict);
  std::vector<float> good{1, 1}, wrong{1, 1, 1};
  CHECK(avg.add(wrong.data(), wrong.size(), 1).code() == Code::kUnprocessable);
  CHECK(avg.add(good.data(), good.size(), 0).code() == Code::kInvalidArgument);
  CHECK(avg.add(good.data(), good.size(), -2).code() == Code::kInvalidArgument);
  CHECK(avg.add(good.data(), good.size(), std::nan("")).code() == Code::kInvalidArgument);
  CHECK(avg.add_scaled({good.data()}, good.size(), 1, -1, good.size(), -1).code() ==
        Code::kInvalidArgument);
  CHECK(avg.add(good.data(), good.size(), 1e300).code() == Code::kInvalidArgument);
  CHECK(avg.updates() == 0);
  REQUIRE(avg.add(good.data(), good.size(), 2).ok());
  CHECK((*avg.mean())[0] == doctest::Approx(1.0));
}

TEST_CASE("add_scaled scales the first values and the rest apart, and counts the full weight") {
  StreamingFedAvg avg(2);
  std::vector<float> a{3, 4}, b{1, 1};
  REQUIRE(avg.add_scaled({a.data()}, 2, 2, 0.5, 1, 0.25).ok());  // contributes 2 * (1.5, 1)
  REQUIRE(avg.add(b.data(), 2, 2).ok());
  CHECK(avg.total_weight() == 4);
  auto mean = *avg.mean();
  CHECK(mean[0] == doctest::Approx((2 * 1.5 + 2 * 1) / 4.0));
  CHECK(mean[1] == doctest::Approx((2 * 1.0 + 2 * 1) / 4.0));
}

TEST_CASE("streaming FedAvg gives the same bits on any thread count") {
  // Odd length well above the parallel threshold, so ranges split unevenly.
  const size_t params = 200003;
  auto updates = testing::random_updates(12, params, 7);
  std::vector<std::vector<float>> means;
  for (size_t threads : {1, 2, 3}) {
    StreamingFedAvg avg(params, threads);
    for (size_t i = 0; i < updates.size(); ++i) {
      REQUIRE(avg.add(updates[i].data(), params, 1.0 + static_cast<double>(i)).ok());
    }
    means.push_back(*avg.mean());
  }
  CHECK(means[0] == means[1]);
  CHECK(means[0] == means[2]);
}

TEST_CASE("float accumulation stays within the documented error of a double reference") {
  // 1000 updates, the upper end of a round; weights like sample counts.
  const size_t params = 4096, count = 1000;
  auto updates = testing::random_updates(count, params, 11);
  StreamingFedAvg avg(params, 2);
  std::vector<double> sum(params, 0.0), abs_sum(params, 0.0);
  double total = 0;
  for (size_t i = 0; i < count; ++i) {
    const double w = 1.0 + static_cast<double>(i % 97);
    REQUIRE(avg.add(updates[i].data(), params, w).ok());
    for (size_t j = 0; j < params; ++j) {
      sum[j] += w * updates[i][j];
      abs_sum[j] += w * std::fabs(updates[i][j]);
    }
    total += w;
  }
  auto mean = *avg.mean();
  double worst = 0;
  for (size_t j = 0; j < params; ++j) {
    // Error relative to the weighted mean magnitude of the values summed.
    worst = std::max(worst, std::fabs(mean[j] - sum[j] / total) / (abs_sum[j] / total));
  }
  MESSAGE("worst relative error of the float mean over 1000 updates: " << worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("aggregates can share one worker pool") {
  auto pool = std::make_shared<WorkerPool>(2);
  StreamingFedAvg a(4, pool), b(4, pool);
  std::vector<float> x{1, 2, 3, 4};
  REQUIRE(a.add(x.data(), 4, 1).ok());
  REQUIRE(b.add(x.data(), 4, 5).ok());
  CHECK(*a.mean() == *b.mean());
}
