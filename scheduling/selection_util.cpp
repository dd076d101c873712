#include "scheduling/selection_util.h"

#include <limits>

namespace fedcase::scheduling {

std::vector<uint32_t> available_indices(const std::vector<Candidate>& candidates) {
  std::vector<uint32_t> out;
  out.reserve(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].available) out.push_back(static_cast<uint32_t>(i));
  }
  return out;
}

double duration_or_inf(const Candidate& candidate) {
  return candidate.expected_duration_s > 0 ? candidate.expected_duration_s
                                           : std::numeric_limits<double>::infinity();
}

std::vector<ClientId> ids_of(const std::vector<Candidate>& candidates,
                             const std::vector<uint32_t>& indices) {
  std::vector<ClientId> ids;
  ids.reserve(indices.size());
  for (uint32_t i : indices) ids.push_back(candidates[i].id);
  return ids;
}

nlohmann::json policy_state(const std::string& name, const Rng& rng) {
  return {{"policy", name}, {"rng", rng.save()}};
}

Status read_policy_state(ObjectReader& reader, const std::string& name, Rng& rng) {
  std::string policy;
  reader.require("policy").text("policy", policy).require("rng");
  FEDCASE_RETURN_IF_ERROR(reader.status());
  if (policy != name) {
    return invalid_argument("saved state is for policy '" + policy + "', not '" + name + "'");
  }
  return rng.load(*reader.member("rng"));
}

}  // namespace fedcase::scheduling
