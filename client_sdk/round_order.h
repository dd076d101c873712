#pragma once
// The order in which a round reads its samples, shared by the local trainer and anything that
// models it (the fleet simulator): uniform passes or importance draws, ordered by draw
// frequency on the sampler's ordering rounds, then the cache's reuse of its hits.
// Pure logic: no I/O, no clock. Deterministic in the sampler's state.

#include <cstdint>
#include <string_view>
#include <vector>

#include "client_sdk/importance_sampler.h"
#include "client_sdk/sample_cache.h"
#include "common/status.h"

namespace fedcase::client {

enum class Sampling { kUniform, kImportance };

// "uniform", "importance".
const char* sampling_name(Sampling sampling);
// The sampling mode named `name`; kInvalidArgument for any other name.
Result<Sampling> parse_sampling(std::string_view name);

// `budget` sample ids of `sampler`'s samples in reading order:
//   uniform     passes over all samples, each shuffled (seeded by sampler.round_seed()), the
//               last one cut at the budget;
//   importance  sampler.draw(budget), ordered by frequency when sampler.orders_by_frequency().
// Then, with a cache, cache->plan_reuse(order, repetition_factor) (which also pins the
// planned hits). `cache` may be null.
std::vector<size_t> plan_round_order(const ImportanceSampler& sampler, Sampling sampling,
                                     uint64_t budget, SampleCache* cache, double repetition_factor);

}  // namespace fedcase::client
