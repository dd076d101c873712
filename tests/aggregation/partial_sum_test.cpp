#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "aggregation/aggregator.h"
#include "aggregation/partial_sum.h"
#include "test_util.h"

using namespace fedcase;
using namespace fedcase::aggregation;
using nlohmann::json;

namespace {

std::unique_ptr<Aggregator> make(const json& config, size_t params) {
  auto made = make_aggregator(config, params);
  REQUIRE_MESSAGE(made.ok(), made.status().to_string());
  return std::move(made).value();
}

}  // namespace

TEST_CASE("a partial aggregate round-trips through its encoding, byte for byte") {
  const PartialSum partial{{1.5f, -0.0f, 3e-38f, -7.25f}, 42.5, 3};
  const std::string bytes = encode_partial_sum(partial);
  auto decoded = decode_partial_sum(bytes, 4);
  REQUIRE_MESSAGE(decoded.ok(), decoded.status().to_string());
  CHECK(decoded->sum == partial.sum);
  CHECK(std::signbit(decoded->sum[1]));
  CHECK(decoded->weight == 42.5);
  CHECK(decoded->updates == 3);
  CHECK(encode_partial_sum(*decoded) == bytes);
}

TEST_CASE("a partial aggregate that is not one is refused, never half-read") {
  const std::string bytes = encode_partial_sum({{1, 2, 3}, 2, 2});
  CHECK(decode_partial_sum(bytes, 4).status().code() == Code::kInvalidArgument);  // other model
  CHECK(decode_partial_sum(bytes.substr(0, bytes.size() - 1), 3).status().code() ==
        Code::kInvalidArgument);
  std::string flipped = bytes;
  flipped[20] ^= 1;  // the checksum no longer matches
  CHECK(decode_partial_sum(flipped, 3).status().code() == Code::kInvalidArgument);
  CHECK(decode_partial_sum("", 3).status().code() == Code::kInvalidArgument);
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(decode_partial_sum(encode_partial_sum({{1, inf, 3}, 2, 2}), 3).status().code() ==
        Code::kInvalidArgument);
  CHECK(decode_partial_sum(encode_partial_sum({{1, 2, 3}, 0, 2}), 3).status().code() ==
        Code::kInvalidArgument);
  CHECK(decode_partial_sum(encode_partial_sum({{1, 2, 3}, std::nan(""), 2}), 3).status().code() ==
        Code::kInvalidArgument);
  CHECK(decode_partial_sum(encode_partial_sum({{1, 2, 3}, 2, 0}), 3).status().code() ==
        Code::kInvalidArgument);
}

// Three replicas each fold a disjoint share of 30 updates; the owner merges the other two's
// partials (encoded and decoded, as they travel through the store) into its own aggregate.
// The merged mean equals the mean of one aggregate folding all 30 within float rounding: the
// sums are added in another order, each fold rounding once per value (fedavg.h), so the
// difference is bounded by 30 * 2^-24 of the mean |value| weighted; measured here it is below
// 1e-6 absolute on values in [-1, 1).
TEST_CASE("merging the replicas' partials gives the FedAvg of all their updates") {
  const size_t params = 5000;
  const auto updates = testing::random_updates(30, params, 11);
  for (const json& config :
       {json{{"rule", "fedavg"}}, json{{"rule", "fedavg"}, {"clip_norm", 5.0}},
        json{{"rule", "fedavg"}, {"clip_norm", 5.0}, {"dp_noise_multiplier", 0.5},
             {"dp_seed", 7}}}) {
    CAPTURE(config.dump());
    auto single = make(config, params);
    std::vector<std::unique_ptr<Aggregator>> replicas;
    for (int r = 0; r < 3; ++r) replicas.push_back(make(config, params));
    for (size_t i = 0; i < updates.size(); ++i) {
      const double weight = 1.0 + double(i % 7);
      REQUIRE(single->add(updates[i].data(), params, weight).ok());
      REQUIRE(replicas[i % 3]->add(updates[i].data(), params, weight).ok());
    }
    Aggregator& owner = *replicas[0];
    for (int r = 1; r < 3; ++r) {
      auto partial = replicas[r]->partial_sum();
      REQUIRE(partial.ok());
      CHECK(partial->updates == 10);
      auto decoded = decode_partial_sum(encode_partial_sum(*partial), params);
      REQUIRE_MESSAGE(decoded.ok(), decoded.status().to_string());
      REQUIRE(owner.add_sum(decoded->sum.data(), params, decoded->weight, decoded->updates).ok());
    }
    CHECK(owner.updates() == 30);
    auto merged = owner.result();
    auto want = single->result();
    REQUIRE(merged.ok());
    REQUIRE(want.ok());
    double worst = 0;
    for (size_t j = 0; j < params; ++j) {
      worst = std::max(worst, std::abs(double((*merged)[j]) - double((*want)[j])));
    }
    CHECK(worst < 1e-6);
    // One partial merged into an empty aggregate is that replica's own mean, exactly.
    auto alone = make(config, params);
    auto partial = replicas[1]->partial_sum();
    REQUIRE(alone->add_sum(partial->sum.data(), params, partial->weight, partial->updates).ok());
    CHECK(*alone->result() == *replicas[1]->result());
  }
}

TEST_CASE("only fedavg has a partial aggregate") {
  auto empty = make(json{{"rule", "fedavg"}}, 3);
  CHECK(empty->partial_sum().status().code() == Code::kConflict);
  std::vector<float> u{1, 2, 3};
  for (const char* rule : {"median", "trimmed_mean", "krum"}) {
    auto robust = make(json{{"rule", rule}}, 3);
    REQUIRE(robust->add(u.data(), 3, 1).ok());
    auto partial = robust->partial_sum();
    CHECK(partial.status().code() == Code::kInvalidArgument);
    CHECK(partial.status().message().find("needs each update") != std::string::npos);
  }
}
