#pragma once
// The order in which a round reads its samples, shared by the local trainer and anything that
// models it (the fleet simulator): uniform passes or importance draws, ordered by draw
// frequency on the sampler's ordering rounds, then repeats of cached samples in place of
// misses, the same for every cache policy.
// Pure logic: no I/O, no clock. Deterministic in the sampler's state.

#include <cstdint>
#include <vector>

#include "client_sdk/importance_sampler.h"
#include "client_sdk/sample_cache.h"
#include "protocol/sampling.h"

namespace fedcase::client {

// The modes a task may ask for; their names are protocol::sampling_name's.
using protocol::Sampling;

// `budget` sample ids of `sampler`'s samples in reading order:
//   uniform     passes over all samples, each shuffled (seeded by sampler.round_seed()), the
//               last one cut at the budget;
//   importance  sampler.draw(budget), ordered by frequency when sampler.orders_by_frequency().
// Then, with a cache, plan_reuse(order, *cache, sampler, repetition_factor), and the cache
// adopts the plan (its planned hits are pinned). `cache` may be null.
std::vector<size_t> plan_round_order(const ImportanceSampler& sampler, Sampling sampling,
                                     uint64_t budget, SampleCache* cache, double repetition_factor);

// Rewrites a round's draws before they are read so that cached samples are repeated in place
// of misses (SHADE's and the FedCaSe artifact's substitution, `prepare_hits`): every draw of
// a sample `cache` holds may be used up to floor(repetition_factor) times (a sample drawn k
// times serves up to k x floor(repetition_factor) draws). The draws replaced are the misses
// of lowest sampler weight; repeats are handed out in passes over the hit samples, highest
// weight first (ties keep the plan's order), so the hit samples share the repeats evenly.
// A repeat takes the replaced miss's position, so repeats may sit next to each other.
// It depends only on which samples are cached, never on the cache's policy. A factor below 1
// or not finite changes nothing. Returns the number of draws replaced.
size_t plan_reuse(std::vector<size_t>& order, const SampleCache& cache,
                  const ImportanceSampler& sampler, double repetition_factor);

}  // namespace fedcase::client
