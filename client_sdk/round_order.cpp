#include "client_sdk/round_order.h"

#include <algorithm>
#include <random>
#include <string>

namespace fedcase::client {

const char* sampling_name(Sampling sampling) {
  return sampling == Sampling::kImportance ? "importance" : "uniform";
}

Result<Sampling> parse_sampling(std::string_view name) {
  for (Sampling s : {Sampling::kUniform, Sampling::kImportance}) {
    if (name == sampling_name(s)) return s;
  }
  return invalid_argument("unknown sampling '" + std::string(name) +
                          "' (expected uniform or importance)");
}

std::vector<size_t> plan_round_order(const ImportanceSampler& sampler, Sampling sampling,
                                     uint64_t budget, SampleCache* cache,
                                     double repetition_factor) {
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
  if (cache) cache->plan_reuse(order, repetition_factor);
  return order;
}

}  // namespace fedcase::client
