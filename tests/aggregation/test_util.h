#pragma once
// Helpers shared by the aggregation tests: seeded random updates and naive references.

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace fedcase::aggregation::testing {

// `count` updates of `params` floats, uniform in [-1, 1), from a fixed seed.
inline std::vector<std::vector<float>> random_updates(size_t count, size_t params, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<float>> updates(count, std::vector<float>(params));
  for (auto& u : updates) {
    for (float& v : u) v = dist(rng);
  }
  return updates;
}

inline std::vector<const float*> pointers(const std::vector<std::vector<float>>& updates) {
  std::vector<const float*> out;
  for (const auto& u : updates) out.push_back(u.data());
  return out;
}

}  // namespace fedcase::aggregation::testing
