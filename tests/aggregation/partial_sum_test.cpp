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

TEST_CASE("a partial of every update round-trips, and one that is not one is refused") {
  const std::vector<float> a{1.5f, -0.0f, 3e-38f}, b{-7.25f, 2, 4};
  const std::string bytes = encode_partial_updates({a.data(), b.data()}, 3);
  auto decoded = decode_partial_updates(bytes, 3);
  REQUIRE_MESSAGE(decoded.ok(), decoded.status().to_string());
  CHECK(*decoded == std::vector<float>{1.5f, -0.0f, 3e-38f, -7.25f, 2, 4});
  CHECK(decode_partial_updates(bytes, 2).status().code() == Code::kInvalidArgument);  // other model
  CHECK(decode_partial_updates(bytes, 6).status().code() == Code::kInvalidArgument);
  CHECK(decode_partial_updates(bytes.substr(0, bytes.size() - 1), 3).status().code() ==
        Code::kInvalidArgument);
  CHECK(decode_partial_updates(encode_partial_updates({}, 3), 3).status().code() ==
        Code::kInvalidArgument);  // no update
  const std::vector<float> nan{1, std::nanf(""), 3};
  CHECK(decode_partial_updates(encode_partial_updates({a.data(), nan.data()}, 3), 3)
            .status()
            .code() == Code::kInvalidArgument);
  // The two encodings are not taken for one another.
  CHECK(decode_partial_sum(bytes, 3).status().code() == Code::kInvalidArgument);
  CHECK(decode_partial_updates(encode_partial_sum({a, 2, 2}), 3).status().code() ==
        Code::kInvalidArgument);
}

// Three replicas each fold a disjoint share of 30 updates; the owner merges the other two's
// partials (encoded, as they travel through the store) into its own aggregate.
// FedAvg: the merged mean equals the mean of one aggregate folding all 30 within float
// rounding: the sums are added in another order, each fold rounding once per value
// (fedavg.h), so the difference is bounded by 30 * 2^-24 of the mean |value| weighted;
// measured here it is below 1e-6 absolute on values in [-1, 1).
// The buffered rules: the owner holds the same 30 clipped updates in another order, so the
// median and the trimmed mean (order statistics) are exactly one aggregate's, and Krum's
// choice is the same update (its mean summed in another order for Multi-Krum).
TEST_CASE("merging the replicas' partials gives the aggregate of all their updates") {
  const size_t params = 5000;
  const auto updates = testing::random_updates(30, params, 11);
  for (const json& config :
       {json{{"rule", "fedavg"}}, json{{"rule", "fedavg"}, {"clip_norm", 5.0}},
        json{{"rule", "fedavg"}, {"clip_norm", 5.0}, {"dp_noise_multiplier", 0.5},
             {"dp_seed", 7}},
        json{{"rule", "median"}, {"clip_norm", 30.0}}, json{{"rule", "trimmed_mean"}},
        json{{"rule", "krum"}, {"byzantine_f", 3}}, json{{"rule", "multi_krum"}, {"byzantine_f", 3}}}) {
    CAPTURE(config.dump());
    const bool fedavg = config["rule"] == "fedavg";
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
      auto partial = replicas[r]->partial();
      REQUIRE(partial.ok());
      CHECK(partial->updates == 10);
      // A fedavg partial is one model's size; a buffered rule's holds each update.
      CHECK(partial->bytes.size() > (fedavg ? 1 : 10) * params * sizeof(float));
      CHECK(partial->bytes.size() < (fedavg ? 1 : 10) * params * sizeof(float) + 256);
      CHECK(owner.merge_partial(partial->bytes, 9).code() == Code::kInvalidArgument);
      const Status merged = owner.merge_partial(partial->bytes, 10);
      REQUIRE_MESSAGE(merged.ok(), merged.to_string());
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
    if (fedavg || config["rule"] == "multi_krum") {
      CHECK(worst < 1e-6);
    } else {
      CHECK(worst == 0);
    }
    // One partial merged into an empty aggregate gives that replica's own aggregate, exactly.
    auto alone = make(config, params);
    REQUIRE(alone->merge_partial(replicas[1]->partial()->bytes, 10).ok());
    CHECK(*alone->result() == *replicas[1]->result());
  }
}

TEST_CASE("a partial is refused, changing nothing, when it is another rule's or too many") {
  std::vector<float> u{1, 2, 3};
  for (const char* rule : {"fedavg", "median", "trimmed_mean", "krum"}) {
    CAPTURE(rule);
    auto empty = make(json{{"rule", rule}}, 3);
    CHECK(empty->partial().status().code() == Code::kConflict);
  }
  auto fedavg = make(json{{"rule", "fedavg"}}, 3);
  REQUIRE(fedavg->add(u.data(), 3, 1).ok());
  auto median = make(json{{"rule", "median"}, {"max_buffered_updates", 2}}, 3);
  REQUIRE(median->add(u.data(), 3, 1).ok());
  // Each rule refuses the other's partial.
  CHECK(median->merge_partial(fedavg->partial()->bytes, 1).code() == Code::kInvalidArgument);
  CHECK(fedavg->merge_partial(median->partial()->bytes, 1).code() == Code::kInvalidArgument);
  // A partial of two updates would take the median past its two places: none is taken.
  auto other = make(json{{"rule", "median"}}, 3);
  REQUIRE(other->add(u.data(), 3, 1).ok());
  REQUIRE(other->add(u.data(), 3, 1).ok());
  const Status full = median->merge_partial(other->partial()->bytes, 2);
  CHECK(full.code() == Code::kResourceExhausted);
  CHECK(median->updates() == 1);
  CHECK(fedavg->updates() == 1);
  // With DP every update of a sum must weigh 1.
  auto dp = make(json{{"rule", "fedavg"}, {"clip_norm", 1.0}, {"dp_noise_multiplier", 1.0}}, 3);
  CHECK(dp->merge_partial(encode_partial_sum({u, 3, 2}), 2).code() == Code::kInvalidArgument);
  CHECK(dp->merge_partial(encode_partial_sum({u, 2, 2}), 2).ok());
}
