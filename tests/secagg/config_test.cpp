// The job's secure_aggregation section and the round parameters that follow from it.

#include "secagg/config.h"

#include <doctest/doctest.h>

namespace fedcase::secagg {
namespace {

using nlohmann::json;

TEST_CASE("the section's defaults, its ranges and its one-or-the-other keys") {
  auto defaults = parse_secure_aggregation(json::object());
  REQUIRE(defaults.ok());
  CHECK(defaults->dropout == 0.05);
  CHECK(defaults->corrupt == 0.05);
  CHECK(defaults->threat == Threat::kSemiMalicious);
  CHECK(defaults->bits == 32);
  CHECK(defaults->clip == 0);  // the job's aggregation.clip_norm, or refused there
  auto back = parse_secure_aggregation(write_secure_aggregation(*defaults));
  REQUIRE(back.ok());
  CHECK(back->stage_seconds == defaults->stage_seconds);
  const auto error = [](const json& j) { return parse_secure_aggregation(j).status().message(); };
  CHECK(error({{"dropout", 0.5}}).find("dropout") != std::string::npos);
  CHECK(error({{"bits", 8}}).find("bits") != std::string::npos);
  CHECK(error({{"threat", "malicious"}}).find("threat") != std::string::npos);
  CHECK(error({{"threshold", 3}, {"dropout", 0.1}}).find("replaces") != std::string::npos);
  CHECK(error({{"nope", 1}}).find("nope") != std::string::npos);
  CHECK(error(json::array()).find("secure_aggregation") != std::string::npos);
}

TEST_CASE("a round's parameters: the derived graph, or the complete one with a threshold") {
  SecureAggregationConfig c;
  c.clip = 10;
  auto derived = round_params(c, 100, 1000);
  REQUIRE_MESSAGE(derived.ok(), derived.status().to_string());
  CHECK(derived->degree == 22);  // docs/secure_aggregation.md's table, 5% and 5%
  CHECK(derived->threshold == 14);
  CHECK(derived->vector_length == 1000);
  CHECK(validate_params(*derived, 100).ok());
  // The finest scale that fits 32 bits for 100 clients: one step more would wrap.
  auto bits = modulus_bits(100, 10, derived->scale, c.max_weight);
  REQUIRE(bits.ok());
  CHECK(*bits <= 32);
  CHECK(modulus_bits(100, 10, derived->scale * 1.01, c.max_weight).value() > 32);

  c.threshold = 3;
  auto complete = round_params(c, 5, 10);
  REQUIRE(complete.ok());
  CHECK(complete->degree == 4);
  CHECK(complete->threshold == 3);
  CHECK(round_params(c, 3, 10).status().message().find("at least 4 invitees") != std::string::npos);
  c.threshold = 0;
  CHECK_FALSE(round_params(c, 3, 10).ok());  // 5% of 3 rounds up to one client: no graph fits
}

TEST_CASE("8-bit clients: 127 steps per clip each, and a modulus of the bits their sum needs") {
  SecureAggregationConfig c;
  c.clip = 10;
  c.client_bits = 8;
  c.max_weight = 255;
  for (const auto& [invitees, bits] : {std::pair<uint64_t, uint32_t>{10, 12}, {100, 15},
                                       {1000, 18}}) {
    CAPTURE(invitees);
    auto p = round_params(c, invitees, 1000);
    REQUIRE_MESSAGE(p.ok(), p.status().to_string());
    CHECK(p->scale == doctest::Approx(12.7));  // a coordinate at the clip is 127 steps
    // max(ceil(log2(2 K 127 + 2)), ceil(log2(255 K + 1))): 2 or 3 bytes a word, not 4.
    CHECK(p->bits == bits);
    CHECK(word_bytes(p->bits) == (bits + 7) / 8);
    CHECK(validate_params(*p, invitees).ok());
  }
  // The default max_weight (2^16) makes the weights' sum the widest part.
  c.max_weight = 1 << 16;
  CHECK(round_params(c, 100, 1000)->bits == 23);
  // Bits too few for 8-bit clients: the scale coarsens to fit them, as without client_bits.
  c.bits = 16;
  c.max_weight = 15;
  auto coarse = round_params(c, 1000, 1000);
  REQUIRE(coarse.ok());
  CHECK(coarse->bits <= 16);
  CHECK(coarse->scale < 12.7);
}

}  // namespace
}  // namespace fedcase::secagg
