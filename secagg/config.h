#pragma once
// A job's `secure_aggregation` section (docs/secure_aggregation.md, "The job option"), and the
// parameters of one round that follow from it: the neighbour graph's degree and threshold from
// the round's invitees and the tolerated dropout and corrupt fractions (derive_graph_params),
// or the complete graph with an explicit threshold; the quantisation scale that fits the
// chosen modulus bits for that many clients (max_scale).
//
// Pure functions; thread-safe.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"
#include "protocol/secagg.h"
#include "secagg/params.h"

namespace fedcase::secagg {

struct SecureAggregationConfig {
  // The derived graph (threshold 0): fractions of a round's invitees that may drop out
  // (delta) and that may be corrupt and collude with the coordinator (gamma), in [0, 0.5).
  double dropout = 0.05;
  double corrupt = 0.05;
  uint32_t security_bits = 40;     // sigma, [16, 128]
  uint32_t correctness_bits = 20;  // eta, [8, 128]
  Threat threat = Threat::kSemiMalicious;
  // > 0: the complete graph over the clients that advertise keys, with this threshold (the
  // original SecAgg), instead of the derived graph.
  uint32_t threshold = 0;
  // The L2 norm each client clips its delta to before quantising (replaces the coordinator's
  // per-update norm check, which cannot see a masked vector). 0: the job's
  // aggregation.clip_norm, which must then be set.
  double clip = 0;
  uint32_t bits = 32;             // arithmetic mod 2^bits, [16, 64]
  uint64_t max_weight = 1 << 16;  // a client's FedAvg weight (its samples) is clipped to this
  // > 0: each client's coordinate is quantised to this many signed bits (the job's
  // compression "q8" sets 8; never read from the section), and a round's modulus is the fewest
  // bits the sum of its clients needs, at most `bits`. 0: the finest scale `bits` allows.
  uint32_t client_bits = 0;
  // The longest the key-advertising, key-sharing and unmasking stages each wait for the
  // clients that have not answered yet (a stage also closes once every client has).
  double stage_seconds = 10;
};

// Reads the section; kInvalidArgument naming the key ("secure_aggregation.dropout ...") for a
// missing, mistyped, out-of-range or unknown one. `clip` stays 0 when absent.
Result<SecureAggregationConfig> parse_secure_aggregation(const nlohmann::json& section);
nlohmann::json write_secure_aggregation(const SecureAggregationConfig& config);

// The parameters of a round with `invitees` clients over a model of `vector_length`
// parameters: the derived (or complete) graph's degree and threshold for that many clients,
// config.clip, config.max_weight, and the finest scale that fits config.bits with config.bits
// (with client_bits: the coarser of that scale and 2^(client_bits - 1) - 1 steps per clip, and
// the fewest bits that sum needs). kInvalidArgument
// saying why when no graph or scale fits (too few invitees for the threshold or the fractions).
Result<protocol::SecAggParams> round_params(const SecureAggregationConfig& config,
                                            uint64_t invitees, uint64_t vector_length);

}  // namespace fedcase::secagg
