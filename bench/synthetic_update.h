#pragma once
// Deterministic pseudo-random deltas in [-0.01, 0.01), like a round's client updates: the inputs
// of the benchmarks that fold updates (xorshift64, seeded; not for anything but benchmarks).

#include <cstdint>
#include <vector>

namespace fedcase::bench {

inline void fill_update(std::vector<float>& out, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& v : out) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    v = (static_cast<float>(s >> 40) * 0x1.0p-24f - 0.5f) * 0.02f;
  }
}

}  // namespace fedcase::bench
