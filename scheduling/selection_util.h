#pragma once
// Helpers shared by the selection policies' implementations.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/json_read.h"
#include "scheduling/rng.h"
#include "scheduling/selection.h"

namespace fedcase::scheduling {

// Positions (in `candidates`) of the available candidates, in order.
std::vector<uint32_t> available_indices(const std::vector<Candidate>& candidates);

// The candidate's expected duration, or +inf when unknown, so unknown sorts last.
double duration_or_inf(const Candidate& candidate);

// Moves the `count` best entries of `items` (by `better`, a strict total order) to the front,
// in unspecified order, and drops the rest. O(items.size()).
template <class T, class Better>
void keep_best(std::vector<T>& items, size_t count, Better better) {
  if (count < items.size()) {
    std::nth_element(items.begin(), items.begin() + static_cast<std::ptrdiff_t>(count), items.end(),
                     better);
    items.resize(count);
  }
}

// The ids of candidates[indices[i]], in order.
std::vector<ClientId> ids_of(const std::vector<Candidate>& candidates,
                             const std::vector<uint32_t>& indices);

// The part of a saved state every policy has: {"policy": name, "rng": [...]}.
nlohmann::json policy_state(const std::string& name, const Rng& rng);
// Reads that part into `rng`; kInvalidArgument when the state names another policy.
Status read_policy_state(ObjectReader& reader, const std::string& name, Rng& rng);

}  // namespace fedcase::scheduling
