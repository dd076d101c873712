// The parameters: k and t from the fleet and the tolerated fractions, b from the bound on the
// sum, and the checks of a round's parameters.

#include "secagg/params.h"

#include <doctest/doctest.h>

#include <cmath>

namespace fedcase::secagg {
namespace {

TEST_CASE("the hypergeometric tail matches a hand computation") {
  // 4 draws from 10 with 3 marked: P[X > 1] = (C(3,2) C(7,2) + C(3,3) C(7,1)) / C(10,4) = 1/3.
  CHECK(hypergeometric_tail_above(10, 3, 4, 1) == doctest::Approx(1.0 / 3));
  CHECK(hypergeometric_tail_above(10, 3, 4, 3) == 0);
  CHECK(hypergeometric_tail_above(10, 0, 4, 0) == 0);
  // Drawing everyone: exactly the marked ones.
  CHECK(hypergeometric_tail_above(10, 3, 10, 2) == doctest::Approx(1));
  CHECK(hypergeometric_tail_above(10, 3, 10, 3) == 0);
}

// Whether (k, t) meets the conditions derive_graph_params promises, checked from the tails.
bool meets(const GraphRequirements& r, uint64_t k, uint64_t t) {
  const uint64_t n = r.clients;
  const uint64_t corrupt = uint64_t(std::ceil(r.corrupt * double(n)));
  const uint64_t dropped = uint64_t(std::ceil(r.dropout * double(n)));
  const double sec = std::exp2(-double(r.security_bits)) / double(n);
  const double cor = std::exp2(-double(r.correctness_bits)) / double(n);
  const uint64_t reveal = r.threat == Threat::kSemiMalicious ? 2 * t - k : t;  // corrupt >= this
  return 2 * t > k && hypergeometric_tail_above(n - 1, corrupt, k, reveal - 1) <= sec &&
         hypergeometric_tail_above(n - 1, dropped, k, k - t) <= cor;
}

TEST_CASE("derived k and t meet the security and correctness bounds, and k is the smallest") {
  for (uint64_t n : {uint64_t(10), uint64_t(50), uint64_t(100), uint64_t(500), uint64_t(1000)}) {
    for (double fraction : {0.05, 0.1}) {
      CAPTURE(n);
      CAPTURE(fraction);
      GraphRequirements r;
      r.clients = n;
      r.dropout = r.corrupt = fraction;
      Result<GraphParams> p = derive_graph_params(r);
      REQUIRE_MESSAGE(p.ok(), p.status().to_string());
      CHECK((p->degree == n - 1 || p->degree % 2 == 0));
      CHECK(p->threshold <= p->degree);
      CHECK(meets(r, p->degree, p->threshold));
      // No smaller even degree admits a threshold (by these two bounds or connectivity).
      if (p->degree > 2 && p->degree != n - 1) {
        const uint64_t k = p->degree - 2;
        bool any = false;
        for (uint64_t t = 1; t <= k; ++t) any = any || meets(r, k, t);
        const double removed = 2 * std::ceil(fraction * double(n)) / double(n);
        const double run = std::log2(double(n)) + double(k / 2) * std::log2(removed);
        CHECK((!any || run > -double(r.security_bits)));
      }
      // A semi-honest coordinator needs no larger threshold.
      r.threat = Threat::kSemiHonest;
      Result<GraphParams> honest = derive_graph_params(r);
      REQUIRE(honest.ok());
      CHECK(honest->threshold <= p->threshold);
    }
  }
  // Logarithmic growth once n is large against k: ten and a hundred times the clients, well
  // under 1.5 times the degree (at 5% each: k = 52, 62, 68 for n = 10^3, 10^4, 10^5).
  GraphRequirements small, large, larger;
  small.clients = 1000;
  large.clients = 10000;
  larger.clients = 100000;
  const GraphParams a = *derive_graph_params(small), b = *derive_graph_params(large),
                    c = *derive_graph_params(larger);
  CHECK(b.degree < 1.5 * a.degree);
  CHECK(c.degree < 1.5 * a.degree);
}

TEST_CASE("requirements no graph can meet, or out of range, are refused") {
  GraphRequirements r;
  r.clients = 1;
  CHECK_FALSE(derive_graph_params(r).ok());
  r.clients = 20;
  r.dropout = 0.45;
  r.corrupt = 0.45;
  CHECK_FALSE(derive_graph_params(r).ok());
  r.dropout = 1;
  CHECK_FALSE(derive_graph_params(r).ok());
}

TEST_CASE("the modulus bits bound the sum: hand-computed cases") {
  // 10 clients, clip 1, scale 1000: coordinates within +-1000 each, sums within +-10000: a
  // signed range of 20001 values needs 2^15 = 32768 >= 2 * 10 * 1000 + 2 = 20002.
  CHECK(*modulus_bits(10, 1, 1000, 1) == 15);
  // 1000 clients, clip 10, scale 2^17: 2 * 1000 * 1310720 + 2 = 2621440002 <= 2^32; weights
  // 1000 * 65535 + 1 need 26 bits.
  CHECK(*modulus_bits(1000, 10, 131072, 65535) == 32);
  CHECK(*modulus_bits(1000, 10, 131072 * 2, 65535) == 33);
  // Weights alone: 4 clients of weight up to 2^40 need 2^42 + 1 -> 43 bits.
  CHECK(*modulus_bits(4, 1, 1, uint64_t(1) << 40) == 43);
  CHECK_FALSE(modulus_bits(1000, 1e10, 1e10, 1).ok());  // over 64 bits
  CHECK_FALSE(modulus_bits(0, 1, 1, 1).ok());
  CHECK_FALSE(modulus_bits(10, 0, 1, 1).ok());
  CHECK_FALSE(modulus_bits(10, 1, NAN, 1).ok());
}

TEST_CASE("max_scale is the largest scale that fits the bits") {
  for (uint64_t clients : {uint64_t(3), uint64_t(100), uint64_t(1000)}) {
    for (uint32_t bits : {uint32_t(24), uint32_t(32), uint32_t(48)}) {
      CAPTURE(clients);
      CAPTURE(bits);
      Result<double> scale = max_scale(clients, 2.5, 100, bits);
      REQUIRE(scale.ok());
      CHECK(*modulus_bits(clients, 2.5, *scale, 100) <= bits);
      CHECK(*modulus_bits(clients, 2.5, *scale * 1.001 + 1, 100) > bits);
    }
  }
  CHECK_FALSE(max_scale(1000, 1, 1, 10).ok());  // 1000 clients cannot sum in 10 bits
}

TEST_CASE("validate_params checks the degree against the participants and the bits") {
  protocol::SecAggParams p{4, 3, 32, 1, 1000, 10, 100};
  CHECK(validate_params(p, 10).ok());
  CHECK_FALSE(validate_params(p, 4).ok());  // degree 4 needs 5 participants
  p.degree = 9;
  CHECK(validate_params(p, 10).ok());  // the complete graph
  p.degree = 5;
  CHECK_FALSE(validate_params(p, 10).ok());  // odd, not complete
  p.degree = 4;
  p.threshold = 5;
  CHECK_FALSE(validate_params(p, 10).ok());
  p.threshold = 3;
  p.bits = 12;
  CHECK_FALSE(validate_params(p, 10).ok());  // 10 clients at clip x scale 1000 need 15 bits
}

}  // namespace
}  // namespace fedcase::secagg
