#pragma once
// How a round's secure-aggregation parameters follow from what the job tolerates
// (docs/secure_aggregation.md, "Parameters", derives each bound):
//
//  - the neighbour graph's degree k and the threshold t, from the number of participants n,
//    the fraction of them that may drop out (delta) and that may be corrupt and collude with
//    the coordinator (gamma), the statistical security parameter sigma and the correctness
//    parameter eta, following the conditions of Bell et al. (CCS 2020, section 3) on a
//    randomly relabelled Harary graph: with probability at least 1 - 2^-sigma no honest
//    client has enough corrupt neighbours to rebuild its secrets (c < 2t - k against a
//    semi-malicious coordinator, c < t against a semi-honest one) and the honest survivors'
//    graph stays connected, and with probability at least 1 - 2^-eta every survivor keeps t
//    surviving neighbours;
//  - the modulus bits b, from the number of clients K summed, the clip, the quantisation scale
//    and the largest weight, so that the sum of K clipped, quantised updates cannot wrap.
//
// Pure functions; thread-safe.

#include <cstdint>

#include "common/status.h"
#include "protocol/secagg.h"

namespace fedcase::secagg {

enum class Threat {
  kSemiHonest,     // the coordinator follows the protocol (but colludes with corrupt clients)
  kSemiMalicious,  // it may also lie about who dropped out, to different clients differently
};

struct GraphRequirements {
  uint64_t clients = 0;         // n: participants of the round, >= 2
  double dropout = 0.05;        // delta in [0, 1): fraction that may drop out
  double corrupt = 0.05;        // gamma in [0, 1): fraction that may collude with the coordinator
  uint32_t security_bits = 40;  // sigma in [1, 128]
  uint32_t correctness_bits = 20;  // eta in [1, 128]
  Threat threat = Threat::kSemiMalicious;
};

struct GraphParams {
  uint32_t degree = 0;     // k: n - 1 (the complete graph) or even
  uint32_t threshold = 0;  // t in [1, k]
};

// The smallest degree k (even, or n - 1) for which some t meets every condition, and the
// smallest such t (which leaves the most room for dropouts). kInvalidArgument for
// requirements out of range or that no graph over n clients meets (too many dropouts or
// corrupt clients for n).
Result<GraphParams> derive_graph_params(const GraphRequirements& requirements);

// The probability that a hypergeometric draw (k of n - 1 others, `marked` of which are marked)
// holds more than `at_most` marked ones: the tail the conditions bound. Exposed for tests.
double hypergeometric_tail_above(uint64_t population, uint64_t marked, uint64_t draws,
                                 uint64_t at_most);

// The bits b such that the sum of `clients` quantised updates (each coordinate of magnitude at
// most ceil(clip * scale)) and of their weights (each at most max_weight) cannot wrap mod
// 2^b, read as signed: b = max(ceil(log2(2 K ceil(clip * scale) + 2)),
// ceil(log2(K max_weight + 1))). kInvalidArgument when b would exceed 64 or an argument is
// out of range.
Result<uint32_t> modulus_bits(uint64_t clients, double clip, double scale, uint64_t max_weight);

// The largest scale for which modulus_bits(clients, clip, scale, max_weight) <= bits
// (kInvalidArgument when there is none).
Result<double> max_scale(uint64_t clients, double clip, uint64_t max_weight, uint32_t bits);

// Bytes per word of a masked vector as it travels and is stored: the fewest that hold `bits`
// (1 to 8), as every sum is taken mod 2^bits.
inline uint32_t word_bytes(uint32_t bits) { return (bits + 7) / 8; }
// Bytes per word of the mask streams and of the running sums in memory: 4 when bits <= 32,
// else 8 (a sum mod 2^32 or 2^64 is also the sum mod 2^bits).
inline uint32_t lane_bytes(uint32_t bits) { return bits <= 32 ? 4 : 8; }

// Checks `params` for a round of `participants` clients summed: the protocol reader's ranges,
// a threshold of at least 1 and at most the degree, a degree the graph can have (<=
// participants - 1; even unless participants - 1), and bits that fit (modulus_bits).
// kInvalidArgument naming what is wrong.
Status validate_params(const protocol::SecAggParams& params, uint64_t participants);

}  // namespace fedcase::secagg
