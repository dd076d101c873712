#pragma once
// The random generator of every selection policy: xoshiro256** seeded through splitmix64.
// Its whole state is four words, so a policy saves and restores it exactly, and its draws are
// the same on every platform and standard library (no std distributions are involved).
// Not thread-safe; each policy owns one.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "common/status.h"

namespace fedcase::scheduling {

class Rng {
 public:
  explicit Rng(uint64_t seed);

  uint64_t next();
  // Uniform integer in [0, n). Precondition: n > 0.
  uint64_t below(uint64_t n);
  // Uniform double in [0, 1).
  double unit();

  // The state as a JSON array of four unsigned integers; load() accepts exactly that
  // (kInvalidArgument otherwise, leaving the generator unchanged).
  nlohmann::json save() const;
  Status load(const nlohmann::json& state);

 private:
  uint64_t s_[4];
};

// Partial Fisher-Yates: afterwards the first min(n, items.size()) entries of `items` are a
// uniform random sample of the whole, in random order.
template <class T>
void partial_shuffle(std::vector<T>& items, size_t n, Rng& rng) {
  if (n > items.size()) n = items.size();
  for (size_t i = 0; i < n; ++i) {
    std::swap(items[i], items[i + rng.below(items.size() - i)]);
  }
}

}  // namespace fedcase::scheduling
