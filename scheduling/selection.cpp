#include "scheduling/selection.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace fedcase::scheduling {
namespace {

// Uniform draw without replacement among available clients.
class RandomPolicy : public SelectionPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : rng_(seed) {}
  std::string name() const override { return "random"; }
  std::vector<ClientId> select(const SelectionRequest& request,
                               const std::vector<Candidate>& candidates) override {
    std::vector<ClientId> pool;
    for (const auto& c : candidates) {
      if (c.available) pool.push_back(c.id);
    }
    size_t n = std::min(pool.size(), invited_count(request.target, request.overcommit));
    // Partial Fisher-Yates: the first n entries become a uniform sample.
    for (size_t i = 0; i < n; ++i) {
      std::uniform_int_distribution<size_t> pick(i, pool.size() - 1);
      std::swap(pool[i], pool[pick(rng_)]);
    }
    pool.resize(n);
    return pool;
  }

 private:
  std::mt19937_64 rng_;
};

}  // namespace

size_t invited_count(size_t target, double overcommit) {
  return static_cast<size_t>(std::ceil(static_cast<double>(target) * std::max(1.0, overcommit) -
                                       1e-9));
}

Result<std::unique_ptr<SelectionPolicy>> make_selection_policy(const nlohmann::json& config,
                                                                uint64_t seed) {
  if (!config.is_object()) return invalid_argument("selection must be an object");
  std::string policy = config.value("policy", std::string("random"));
  if (policy == "random") return std::unique_ptr<SelectionPolicy>(new RandomPolicy(seed));
  return invalid_argument("unknown selection policy '" + policy + "'");
}

}  // namespace fedcase::scheduling
