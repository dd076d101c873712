#include "secagg/config.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/json_read.h"

namespace fedcase::secagg {

Result<SecureAggregationConfig> parse_secure_aggregation(const nlohmann::json& section) {
  SecureAggregationConfig c;
  std::string threat = "semi_malicious";
  ObjectReader r(section, "secure_aggregation");
  r.number("dropout", c.dropout, 0, 0.5)
      .number("corrupt", c.corrupt, 0, 0.5)
      .integer("security_bits", c.security_bits, 16, 128)
      .integer("correctness_bits", c.correctness_bits, 8, 128)
      .text("threat", threat)
      .integer("threshold", c.threshold, 0, protocol::kMaxSecAggClients - 1)
      .number("clip", c.clip, 0, 1e12)
      .integer("bits", c.bits, 16, 64)
      .integer("max_weight", c.max_weight, 1, uint64_t(1) << 32)
      .number("stage_seconds", c.stage_seconds, 0.1, 3600);
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  if (!(c.dropout < 0.5) || !(c.corrupt < 0.5)) {
    return invalid_argument("secure_aggregation.dropout and corrupt must be in [0, 0.5)");
  }
  if (threat == "semi_malicious") {
    c.threat = Threat::kSemiMalicious;
  } else if (threat == "semi_honest") {
    c.threat = Threat::kSemiHonest;
  } else {
    return invalid_argument(
        "secure_aggregation.threat must be \"semi_malicious\" or \"semi_honest\"");
  }
  if (c.threshold > 0 && section.is_object() &&
      (section.contains("dropout") || section.contains("corrupt"))) {
    return invalid_argument(
        "secure_aggregation.threshold replaces dropout and corrupt: give one or the other");
  }
  return c;
}

nlohmann::json write_secure_aggregation(const SecureAggregationConfig& c) {
  nlohmann::json out = {
      {"threat", c.threat == Threat::kSemiMalicious ? "semi_malicious" : "semi_honest"},
      {"security_bits", c.security_bits},
      {"correctness_bits", c.correctness_bits},
      {"clip", c.clip},
      {"bits", c.bits},
      {"max_weight", c.max_weight},
      {"stage_seconds", c.stage_seconds}};
  if (c.threshold > 0) {
    out["threshold"] = c.threshold;
  } else {
    out["dropout"] = c.dropout;
    out["corrupt"] = c.corrupt;
  }
  return out;
}

Result<protocol::SecAggParams> round_params(const SecureAggregationConfig& c, uint64_t invitees,
                                            uint64_t vector_length) {
  protocol::SecAggParams p;
  if (c.threshold > 0) {
    if (invitees < uint64_t(c.threshold) + 1) {
      return invalid_argument("a threshold of " + std::to_string(c.threshold) + " needs at least " +
                              std::to_string(c.threshold + 1) + " invitees; the round has " +
                              std::to_string(invitees));
    }
    p.degree = static_cast<uint32_t>(invitees - 1);
    p.threshold = c.threshold;
  } else {
    GraphRequirements req;
    req.clients = invitees;
    req.dropout = c.dropout;
    req.corrupt = c.corrupt;
    req.security_bits = c.security_bits;
    req.correctness_bits = c.correctness_bits;
    req.threat = c.threat;
    Result<GraphParams> graph = derive_graph_params(req);
    if (!graph.ok()) return graph.status();
    p.degree = graph->degree;
    p.threshold = graph->threshold;
  }
  p.bits = c.bits;
  p.clip = c.clip;
  p.max_weight = c.max_weight;
  p.vector_length = vector_length;
  Result<double> scale = max_scale(invitees, c.clip, c.max_weight, c.bits);
  if (!scale.ok()) return scale.status();
  p.scale = *scale;
  if (c.client_bits > 0) {
    // A client's clipped coordinate spans [-levels, levels] steps, and the sum of `invitees`
    // of them (and of their weights) needs only so many bits: fewer bytes a word.
    const double levels = std::exp2(double(c.client_bits) - 1) - 1;
    p.scale = std::min(p.scale, levels / c.clip);
    Result<uint32_t> bits = modulus_bits(invitees, c.clip, p.scale, c.max_weight);
    if (!bits.ok()) return bits.status();
    p.bits = *bits;
  }
  FEDCASE_RETURN_IF_ERROR(validate_params(p, invitees));
  return p;
}

}  // namespace fedcase::secagg
