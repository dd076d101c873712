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
using protocol::Repetition;
using protocol::Sampling;

// How far a round's plan may repeat its cache hits in place of misses (the task's cache
// directives: protocol::CacheDirectives::repetition and repetition_factor).
struct Repeats {
  Repetition rule = Repetition::kFixed;
  double factor = 1;        // kFixed: uses per draw of a cached sample (rounded down; < 1: none)
  uint32_t batch_size = 1;  // kAdaptive: the task's batch size, which the rule reads

  static Repeats fixed(double factor) { return {Repetition::kFixed, factor, 1}; }
  static Repeats adaptive(uint32_t batch_size) { return {Repetition::kAdaptive, 1, batch_size}; }
};

// The FedCaSe artifact's adaptive repetition factor (`prepare_hits` in its
// fedscale/dataloaders/divide_data.py) for a round of `budget` draws of which `hits` are of
// cached samples: with f = floor(budget / hits) + 1 (enough uses per hit to fill the round),
//   f                          when f <= 3;
//   max(3, ceil(f / 2))        otherwise, when hits > 0.6 x batch_size;
//   max(3, floor(0.2 x batch_size))  otherwise.
// 1 (no repeats) when hits is 0.
size_t adaptive_repetition_factor(size_t hits, size_t budget, uint32_t batch_size);

// `budget` sample ids of `sampler`'s samples in reading order:
//   uniform     passes over all samples, each shuffled (seeded by sampler.round_seed()), the
//               last one cut at the budget;
//   importance  sampler.draw(budget), ordered by frequency when sampler.orders_by_frequency().
// Then, with a cache, plan_reuse(order, *cache, sampler, repeats), and the cache adopts the
// plan (its planned hits are pinned). `cache` may be null.
std::vector<size_t> plan_round_order(const ImportanceSampler& sampler, Sampling sampling,
                                     uint64_t budget, SampleCache* cache, const Repeats& repeats);

// Rewrites a round's draws before they are read so that cached samples are repeated in place
// of misses (SHADE's and the FedCaSe artifact's substitution, `prepare_hits`): every draw of
// a sample `cache` holds may be used up to R times, R = floor(repeats.factor) (kFixed) or
// adaptive_repetition_factor(the draws of cached samples, order.size(), repeats.batch_size)
// (kAdaptive); a sample drawn k times serves up to k x R draws. The draws replaced are the
// misses of lowest sampler weight; repeats are handed out in passes over the hit samples,
// highest weight first (ties keep the plan's order), so the hit samples share the repeats
// evenly. A repeat takes the replaced miss's position, so repeats may sit next to each other.
// It depends only on which samples are cached, never on the cache's policy. A fixed factor
// below 1 or not finite changes nothing. Returns the number of draws replaced.
size_t plan_reuse(std::vector<size_t>& order, const SampleCache& cache,
                  const ImportanceSampler& sampler, const Repeats& repeats);

}  // namespace fedcase::client
