#include "scheduling/selection.h"

#include <algorithm>
#include <cmath>

#include "common/json_read.h"
#include "scheduling/fedcase.h"
#include "scheduling/oort.h"
#include "scheduling/rng.h"
#include "scheduling/selection_util.h"

namespace fedcase::scheduling {
namespace {

constexpr const char* kRandomName = "random";

// Uniform draw without replacement among available clients. Learns nothing.
class RandomPolicy : public SelectionPolicy {
 public:
  explicit RandomPolicy(uint64_t seed) : rng_(seed) {}
  std::string name() const override { return kRandomName; }
  std::vector<ClientId> select(const SelectionRequest& request,
                               const std::vector<Candidate>& candidates) override {
    std::vector<uint32_t> pool = available_indices(candidates);
    const size_t n = std::min(pool.size(), invited_count(request.target, request.overcommit));
    partial_shuffle(pool, n, rng_);
    pool.resize(n);
    return ids_of(candidates, pool);
  }
  void on_round_end(const RoundOutcome&) override {}
  nlohmann::json save_state() const override { return policy_state(kRandomName, rng_); }
  Status load_state(const nlohmann::json& state) override {
    Rng rng = rng_;
    ObjectReader r(state, "random state");
    FEDCASE_RETURN_IF_ERROR(read_policy_state(r, kRandomName, rng));
    rng_ = rng;
    return ok_status();
  }

 private:
  Rng rng_;
};

template <class Policy, class Config>
Result<std::unique_ptr<SelectionPolicy>> build(const Result<Config>& config, uint64_t seed) {
  if (!config.ok()) return config.status();
  return std::unique_ptr<SelectionPolicy>(new Policy(*config, seed));
}

}  // namespace

double mean_kept_utility(const RoundOutcome& outcome) {
  double sum = 0;
  size_t kept = 0;
  for (const ClientOutcome& c : outcome.clients) {
    if (!c.finished || !(c.utility >= 0) || !std::isfinite(c.utility)) continue;
    sum += c.utility;
    ++kept;
  }
  return kept > 0 ? sum / static_cast<double>(kept) : 0.0;
}

size_t invited_count(size_t target, double overcommit) {
  return static_cast<size_t>(
      std::ceil(static_cast<double>(target) * std::max(1.0, overcommit) - 1e-9));
}

Result<double> selection_overcommit(const nlohmann::json& config) {
  double overcommit = kDefaultOvercommit;
  ObjectReader r(config, "selection");
  r.number("overcommit", overcommit, 1, 100);
  FEDCASE_RETURN_IF_ERROR(r.status());
  return overcommit;
}

Result<std::unique_ptr<SelectionPolicy>> make_selection_policy(const nlohmann::json& config,
                                                               uint64_t seed) {
  Result<double> overcommit = selection_overcommit(config);
  if (!overcommit.ok()) return overcommit.status();
  std::string policy = kRandomName;
  ObjectReader r(config, "selection");
  r.text("policy", policy);
  FEDCASE_RETURN_IF_ERROR(r.status());
  if (policy == kRandomName) {
    r.skip("overcommit");
    FEDCASE_RETURN_IF_ERROR(r.strict_status());
    return std::unique_ptr<SelectionPolicy>(new RandomPolicy(seed));
  }
  if (policy == "oort") return build<OortPolicy>(parse_oort_config(config), seed);
  if (policy == "fedcase") return build<FedCasePolicy>(parse_fedcase_config(config), seed);
  return invalid_argument("unknown selection policy '" + policy + "'");
}

}  // namespace fedcase::scheduling
