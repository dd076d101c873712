#include "client_sdk/round_order.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <unordered_map>

namespace fedcase::client {

std::vector<size_t> plan_round_order(const ImportanceSampler& sampler, Sampling sampling,
                                     uint64_t budget, SampleCache* cache,
                                     const Repeats& repeats) {
  std::vector<size_t> order;
  if (sampling == Sampling::kImportance) {
    order = sampler.draw(budget);
    if (sampler.orders_by_frequency()) order_by_frequency(order, sampler.round_seed() + 1);
  } else if (sampler.size() > 0) {
    std::mt19937_64 rng(sampler.round_seed());
    std::vector<size_t> pass(sampler.size());
    for (size_t i = 0; i < pass.size(); ++i) pass[i] = i;
    while (order.size() < budget) {
      std::shuffle(pass.begin(), pass.end(), rng);
      order.insert(order.end(), pass.begin(),
                   pass.begin() + std::min<uint64_t>(pass.size(), budget - order.size()));
    }
  }
  if (cache) {
    const size_t reused = plan_reuse(order, *cache, sampler, repeats);
    cache->adopt_plan(order, reused);
  }
  return order;
}

size_t adaptive_repetition_factor(size_t hits, size_t budget, uint32_t batch_size) {
  if (hits == 0) return 1;
  const size_t fill = budget / hits + 1;
  if (fill <= 3) return fill;
  const double batch = double(batch_size);
  if (double(hits) > 0.6 * batch) return std::max<size_t>(3, (fill + 1) / 2);
  return std::max<size_t>(3, size_t(std::floor(0.2 * batch)));
}

size_t plan_reuse(std::vector<size_t>& order, const SampleCache& cache,
                  const ImportanceSampler& sampler, const Repeats& repeats) {
  const bool adaptive = repeats.rule == Repetition::kAdaptive;
  if (!adaptive && (!std::isfinite(repeats.factor) || repeats.factor < 1)) return 0;
  std::unordered_map<size_t, size_t> draws;  // of each cached sample: the hits
  std::vector<size_t> hit;                   // the hit samples, by first draw
  std::vector<size_t> misses;                // positions of draws that would miss
  for (size_t p = 0; p < order.size(); ++p) {
    if (!cache.contains(order[p])) {
      misses.push_back(p);
    } else if (draws[order[p]]++ == 0) {
      hit.push_back(order[p]);
    }
  }
  const size_t factor =
      adaptive ? adaptive_repetition_factor(order.size() - misses.size(), order.size(),
                                            repeats.batch_size)
               : size_t(std::floor(std::min(repeats.factor, 1e6)));
  auto weight = [&](size_t id) { return sampler.weight(id); };
  std::stable_sort(misses.begin(), misses.end(),
                   [&](size_t a, size_t b) { return weight(order[a]) < weight(order[b]); });
  std::stable_sort(hit.begin(), hit.end(),
                   [&](size_t a, size_t b) { return weight(a) > weight(b); });
  // Repeats in passes over the hit samples: each pass gives one more use to every sample
  // below factor x its draws.
  std::unordered_map<size_t, size_t> uses = draws;
  size_t replaced = 0;
  for (bool granted = true; granted && replaced < misses.size();) {
    granted = false;
    for (size_t c : hit) {
      if (replaced == misses.size()) break;
      if (uses[c] >= factor * draws[c]) continue;
      uses[c]++;
      order[misses[replaced++]] = c;
      granted = true;
    }
  }
  return replaced;
}

}  // namespace fedcase::client
