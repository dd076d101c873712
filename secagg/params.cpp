#include "secagg/params.h"

#include <cmath>
#include <limits>

namespace fedcase::secagg {
namespace {

double log_choose(double n, double k) {
  return std::lgamma(n + 1) - std::lgamma(k + 1) - std::lgamma(n - k + 1);
}

// The smallest c with P[X > c] <= bound, X the marked ones among `draws` of `population`.
uint64_t tail_quantile(uint64_t population, uint64_t marked, uint64_t draws, double bound) {
  for (uint64_t c = 0; c < draws; ++c) {
    if (hypergeometric_tail_above(population, marked, draws, c) <= bound) return c;
  }
  return draws;
}

// log2 of the probability that `run` given ring positions are all removed when `removed` of
// `n` clients are, at random positions.
double log2_run_removed(uint64_t n, uint64_t removed, uint64_t run) {
  if (run > removed) return -std::numeric_limits<double>::infinity();
  double log2p = 0;
  for (uint64_t i = 0; i < run; ++i) {
    log2p += std::log2(static_cast<double>(removed - i) / static_cast<double>(n - i));
  }
  return log2p;
}

unsigned bits_for(unsigned __int128 value) {  // smallest b with 2^b >= value
  unsigned b = 0;
  while (b < 128 && (static_cast<unsigned __int128>(1) << b) < value) ++b;
  return b;
}

}  // namespace

double hypergeometric_tail_above(uint64_t population, uint64_t marked, uint64_t draws,
                                 uint64_t at_most) {
  if (marked > population || draws > population) return 0;
  const uint64_t top = std::min(draws, marked);
  // The smallest count a draw can hold: draws beyond the unmarked ones are marked.
  const uint64_t unmarked = population - marked;
  const uint64_t bottom = draws > unmarked ? draws - unmarked : 0;
  double sum = 0;
  const double total = log_choose(double(population), double(draws));
  for (uint64_t x = std::max(at_most + 1, bottom); x <= top; ++x) {
    sum += std::exp(log_choose(double(marked), double(x)) +
                    log_choose(double(unmarked), double(draws - x)) - total);
  }
  return std::min(sum, 1.0);
}

Result<GraphParams> derive_graph_params(const GraphRequirements& req) {
  const uint64_t n = req.clients;
  if (n < 2 || n > protocol::kMaxSecAggClients) {
    return invalid_argument("clients must be in [2, " +
                            std::to_string(protocol::kMaxSecAggClients) + "]");
  }
  if (!(req.dropout >= 0 && req.dropout < 1) || !(req.corrupt >= 0 && req.corrupt < 1)) {
    return invalid_argument("dropout and corrupt fractions must be in [0, 1)");
  }
  if (req.security_bits < 1 || req.security_bits > 128 || req.correctness_bits < 1 ||
      req.correctness_bits > 128) {
    return invalid_argument("security and correctness bits must be in [1, 128]");
  }
  const uint64_t corrupt = static_cast<uint64_t>(std::ceil(req.corrupt * double(n)));
  const uint64_t dropped = static_cast<uint64_t>(std::ceil(req.dropout * double(n)));
  // A union bound over the n clients: each client's event gets 2^-bits / n.
  const double security_bound = std::exp2(-double(req.security_bits)) / double(n);
  const double correctness_bound = std::exp2(-double(req.correctness_bits)) / double(n);
  // Candidate degrees: the even ones below n - 1, then n - 1 (the complete graph).
  for (uint64_t k = std::min<uint64_t>(2, n - 1);; k = k + 2 < n - 1 ? k + 2 : n - 1) {
    // Under a random relabelling a client's k neighbours are a uniform k-subset of the n - 1
    // others: corrupt and dropped neighbours are hypergeometric.
    const uint64_t max_corrupt = tail_quantile(n - 1, std::min(corrupt, n - 1), k, security_bound);
    const uint64_t max_dropped =
        tail_quantile(n - 1, std::min(dropped, n - 1), k, correctness_bound);
    const uint64_t t_min =
        req.threat == Threat::kSemiMalicious ? (k + max_corrupt) / 2 + 1 : max_corrupt + 1;
    const uint64_t t_max = k - max_dropped;
    // The honest survivors stay connected unless k/2 consecutive ring positions are all
    // corrupt or dropped (the complete graph always stays connected).
    bool connected = true;
    if (k < n - 1) {
      const double log2_fail =
          std::log2(double(n)) + log2_run_removed(n, std::min(corrupt + dropped, n), k / 2);
      connected = log2_fail <= -double(req.security_bits);
    }
    if (connected && t_min <= t_max && t_min >= 1) {
      return GraphParams{static_cast<uint32_t>(k), static_cast<uint32_t>(t_min)};
    }
    if (k == n - 1) break;
  }
  return invalid_argument("no neighbour graph over " + std::to_string(n) +
                          " clients tolerates these dropout and corrupt fractions at these "
                          "security and correctness parameters");
}

Result<uint32_t> modulus_bits(uint64_t clients, double clip, double scale, uint64_t max_weight) {
  if (clients < 1 || !(std::isfinite(clip) && clip > 0) || !(std::isfinite(scale) && scale > 0) ||
      max_weight < 1) {
    return invalid_argument("clients, clip, scale and max_weight must be positive and finite");
  }
  const double steps = std::ceil(clip * scale);
  if (!(steps <= std::exp2(62))) {
    return invalid_argument("clip x scale must be at most 2^62");
  }
  using U128 = unsigned __int128;
  const U128 values = 2 * U128(clients) * U128(static_cast<uint64_t>(steps)) + 2;
  const U128 weights = U128(clients) * U128(max_weight) + 1;
  const unsigned bits = std::max(bits_for(values), bits_for(weights));
  if (bits > 64) {
    return invalid_argument("the sum needs " + std::to_string(bits) +
                            " bits, more than 64: lower the clip, the scale or max_weight");
  }
  return static_cast<uint32_t>(bits);
}

Result<double> max_scale(uint64_t clients, double clip, uint64_t max_weight, uint32_t bits) {
  if (clients < 1 || !(std::isfinite(clip) && clip > 0) || max_weight < 1 || bits < 2 ||
      bits > 64) {
    return invalid_argument("clients, clip and max_weight must be positive, bits in [2, 64]");
  }
  using U128 = unsigned __int128;
  const U128 modulus = U128(1) << bits;
  const U128 max_steps = (modulus - 2) / (2 * U128(clients));
  if (max_steps < 1 || U128(clients) * max_weight + 1 > modulus) {
    return invalid_argument("no scale fits " + std::to_string(bits) + " bits for " +
                            std::to_string(clients) + " clients");
  }
  double scale = std::min(static_cast<double>(max_steps), std::exp2(62)) / clip;
  // Floating rounding may put clip * scale a step over: step down until it fits.
  for (int i = 0; i < 64; ++i) {
    Result<uint32_t> b = modulus_bits(clients, clip, scale, max_weight);
    if (b.ok() && *b <= bits) return scale;
    scale = std::nextafter(scale, 0.0) * (1 - 1e-12);
  }
  return invalid_argument("no scale fits");
}

Status validate_params(const protocol::SecAggParams& p, uint64_t participants) {
  FEDCASE_RETURN_IF_ERROR(
      protocol::read_secagg_params(protocol::write_secagg_params(p), "params").status());
  if (participants < 2) return invalid_argument("secure aggregation needs at least 2 clients");
  if (p.degree > participants - 1) {
    return invalid_argument("params.degree must be at most participants - 1 = " +
                            std::to_string(participants - 1));
  }
  if (p.degree % 2 != 0 && p.degree != participants - 1) {
    return invalid_argument("params.degree must be even or participants - 1 (the complete graph)");
  }
  Result<uint32_t> bits = modulus_bits(participants, p.clip, p.scale, p.max_weight);
  if (!bits.ok()) return bits.status();
  if (*bits > p.bits) {
    return invalid_argument("params.bits must be at least " + std::to_string(*bits) + " for " +
                            std::to_string(participants) + " clients at this clip and scale");
  }
  return ok_status();
}

}  // namespace fedcase::secagg
