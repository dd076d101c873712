#include <doctest/doctest.h>

#include <vector>

#include "aggregation/fedavg.h"
#include "aggregation/server_optimizer.h"

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
  CHECK(avg.updates() == 0);
  REQUIRE(avg.add(good.data(), good.size(), 2).ok());
  CHECK((*avg.mean())[0] == doctest::Approx(1.0));
}

TEST_CASE("fedavg server optimizer adds the scaled delta") {
  auto opt = make_server_optimizer({{"name", "fedavg"}, {"lr", 0.5}});
  REQUIRE(opt.ok());
  std::vector<float> global{1, 1}, delta{2, -4};
  REQUIRE((*opt)->step(global, delta).ok());
  CHECK(global[0] == doctest::Approx(2.0));
  CHECK(global[1] == doctest::Approx(-1.0));
  CHECK((*opt)->load_state((*opt)->save_state()).ok());
  CHECK_FALSE(make_server_optimizer({{"name", "sgd?"}}).ok());
  CHECK_FALSE(make_server_optimizer({{"lr", -1}}).ok());
}
