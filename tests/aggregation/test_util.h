#pragma once
// Helpers shared by the aggregation tests: seeded random updates and naive references.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "aggregation/vector_ops.h"

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

// The values of `values`, read a piece at a time as a spool file's are; every read of a
// value at or past `fails_from` fails (none by default), counted in reads().
class VectorReader : public ValueReader {
 public:
  explicit VectorReader(const std::vector<float>& values, size_t fails_from = SIZE_MAX)
      : values_(values), fails_from_(fails_from) {}
  void read(size_t begin, size_t end, float* out) const override {
    reads_ += 1;
    if (end > fails_from_) {
      std::fill(out, out + (end - begin), 0.0f);
      failed_ = true;
      return;
    }
    std::copy(values_.begin() + long(begin), values_.begin() + long(end), out);
  }
  Status failure() const override {
    return failed_ ? internal_error("cannot read the update") : ok_status();
  }
  UpdateValues values() const { return UpdateValues{nullptr, nullptr, this}; }
  size_t reads() const { return reads_; }

 private:
  const std::vector<float>& values_;
  const size_t fails_from_;
  mutable std::atomic<size_t> reads_{0};
  mutable std::atomic<bool> failed_{false};
};

}  // namespace fedcase::aggregation::testing
