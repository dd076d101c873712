#include "client_sdk/importance_sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <unordered_map>

namespace fedcase::client {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool finite_non_negative(double v) { return std::isfinite(v) && v >= 0; }

}  // namespace

const char* frequency_order_name(FrequencyOrder order) {
  return order == FrequencyOrder::kWhileImproving ? "while_improving" : "periodic";
}

Result<FrequencyOrder> parse_frequency_order(std::string_view name) {
  for (FrequencyOrder o : {FrequencyOrder::kPeriodic, FrequencyOrder::kWhileImproving}) {
    if (name == frequency_order_name(o)) return o;
  }
  return invalid_argument("unknown frequency order '" + std::string(name) +
                          "' (expected periodic or while_improving)");
}

ImportanceSampler::ImportanceSampler(size_t samples, SamplerOptions options) : options_(options) {
  state_.weights.assign(samples, 1.0);
}

Result<ImportanceSampler> ImportanceSampler::restore(size_t samples, SamplerOptions options,
                                                     SamplerState state) {
  if (state.weights.size() != samples) {
    return invalid_argument("sampler state has " + std::to_string(state.weights.size()) +
                            " weights for " + std::to_string(samples) + " samples");
  }
  for (double w : state.weights) {
    if (!std::isfinite(w) || w <= 0) return invalid_argument("sampler state has a bad weight");
  }
  if (!finite_non_negative(state.smoothing) || !finite_non_negative(state.previous_loss)) {
    return invalid_argument("sampler state has a bad smoothing term or loss");
  }
  ImportanceSampler sampler(0, options);
  sampler.state_ = std::move(state);
  return sampler;
}

void ImportanceSampler::observe_batch(const std::vector<size_t>& ids,
                                      const std::vector<float>& losses) {
  const size_t n = std::min(ids.size(), losses.size());
  std::vector<size_t> by_loss(n);
  std::iota(by_loss.begin(), by_loss.end(), 0);
  std::stable_sort(by_loss.begin(), by_loss.end(),
                   [&](size_t a, size_t b) { return losses[a] < losses[b]; });
  for (size_t rank = 0; rank < n; ++rank) {
    state_.weights[ids[by_loss[rank]]] = std::log(double(rank) + 10.0);
  }
}

void ImportanceSampler::end_round(double mean_loss) {
  if (finite_non_negative(mean_loss)) {
    state_.loss_fell = state_.rounds > 0 && mean_loss < state_.previous_loss;
    if (state_.rounds == 0) {
      state_.smoothing = options_.smoothing_factor * mean_loss;
    } else if (state_.previous_loss > 0) {
      state_.smoothing *= std::exp((mean_loss - state_.previous_loss) / state_.previous_loss);
    }
    state_.previous_loss = mean_loss;
  }
  state_.rounds++;
}

std::vector<size_t> ImportanceSampler::draw(size_t count) const {
  std::vector<size_t> out;
  if (size() == 0) return out;
  std::vector<double> cumulative(size());
  double total = 0;
  for (size_t i = 0; i < size(); ++i) {
    total += state_.weights[i] + state_.smoothing;
    cumulative[i] = total;
  }
  std::mt19937_64 rng(round_seed());
  out.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    const double u = double(rng() >> 11) * 0x1.0p-53 * total;  // uniform in [0, total)
    size_t i =
        size_t(std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin());
    out.push_back(std::min(i, size() - 1));
  }
  return out;
}

bool ImportanceSampler::orders_by_frequency() const {
  if (options_.frequency_order == FrequencyOrder::kWhileImproving) return state_.loss_fell;
  const uint32_t k = options_.frequency_order_period;
  return k > 0 && (state_.rounds + 1) % k == 0;
}

uint64_t ImportanceSampler::round_seed() const {
  return splitmix64(options_.seed ^ splitmix64(state_.rounds));
}

void order_by_frequency(std::vector<size_t>& ids, uint64_t seed) {
  std::unordered_map<size_t, size_t> count;
  std::vector<size_t> distinct;
  for (size_t id : ids) {
    if (count[id]++ == 0) distinct.push_back(id);
  }
  std::mt19937_64 rng(seed);
  std::shuffle(distinct.begin(), distinct.end(), rng);
  std::stable_sort(distinct.begin(), distinct.end(),
                   [&](size_t a, size_t b) { return count[a] > count[b]; });
  ids.clear();
  for (size_t pass = 0; !distinct.empty() && count[distinct.front()] > pass; ++pass) {
    for (size_t id : distinct) {
      if (count[id] <= pass) break;  // sorted: no later id occurs more often
      ids.push_back(id);
    }
  }
}

}  // namespace fedcase::client
