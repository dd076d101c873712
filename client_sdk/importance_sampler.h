#pragma once
// SHADE's importance sampler over a client's local samples (ids 0..n-1).
//
// After each batch, the batch's samples are ranked by loss (rank j = 0 for the lowest loss)
// and sample of rank j gets the weight ln(j + 10); weights start at 1 and persist across
// rounds until the sample is trained on again. A round draws its samples with replacement,
// with probability proportional to weight + s, where the smoothing term s is 1e-2 x the first
// round's mean loss and is then scaled after every round by exp((L_now - L_prev) / L_prev):
// it shrinks while the loss falls, keeping rarely-seen samples in play, and grows back if the
// loss rises. Every `frequency_order_period`-th round orders its draws by draw frequency
// (order_by_frequency) so the most important samples are read, and cached, first; or, with
// FrequencyOrder::kWhileImproving (SHADE's `ShadeSampler.__iter__`, which sorts only while its
// score improves), the rounds after one whose mean loss fell (a round without a known loss
// keeps the last trend), the others keeping the draws' random order.
//
// Pure logic: no I/O, no clock. Draws depend only on the seed, the round number and the
// weights, so a restored sampler draws what the saved one would have. Not thread-safe.

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fedcase::client {

enum class FrequencyOrder {
  kPeriodic,        // every frequency_order_period-th round
  kWhileImproving,  // after a round whose mean loss fell below the round before's
};

// "periodic", "while_improving".
const char* frequency_order_name(FrequencyOrder order);
// The ordering named `name`; kInvalidArgument for any other name.
Result<FrequencyOrder> parse_frequency_order(std::string_view name);

struct SamplerOptions {
  uint64_t seed = 1;
  double smoothing_factor = 1e-2;       // s = factor x the first round's mean loss
  uint32_t frequency_order_period = 1;  // kPeriodic: every k-th round; 0 = never
  FrequencyOrder frequency_order = FrequencyOrder::kPeriodic;
};

// What persists between runs (see client_state.h).
struct SamplerState {
  uint64_t rounds = 0;          // rounds completed
  double smoothing = 0;         // current smoothing term
  double previous_loss = 0;     // mean loss of the last round (meaningful when rounds > 0)
  bool loss_fell = false;       // the last round's mean loss was below the round before's
  std::vector<double> weights;  // one per sample
};

class ImportanceSampler {
 public:
  // A fresh sampler over `samples` samples, every weight 1 and no smoothing yet.
  ImportanceSampler(size_t samples, SamplerOptions options);
  // A sampler continuing from `state`. kInvalidArgument when its weights are not `samples`
  // finite positive numbers or its smoothing or loss is negative or not finite.
  static Result<ImportanceSampler> restore(size_t samples, SamplerOptions options,
                                           SamplerState state);

  size_t size() const { return state_.weights.size(); }
  double weight(size_t id) const { return state_.weights[id]; }
  double smoothing() const { return state_.smoothing; }
  uint64_t rounds() const { return state_.rounds; }
  const SamplerState& state() const { return state_; }

  // Ranks one batch by loss and sets its samples' weights. `ids` and `losses` are parallel
  // (ids < size()); ties keep batch order. A sample repeated in the batch keeps its last rank.
  void observe_batch(const std::vector<size_t>& ids, const std::vector<float>& losses);

  // Closes a round whose mean per-sample training loss was `mean_loss`: updates the smoothing
  // term and advances the round number. A non-finite or negative loss leaves the smoothing
  // as it is.
  void end_round(double mean_loss);

  // `count` ids drawn independently with probability proportional to weight + smoothing,
  // seeded by (seed, rounds()): the same state draws the same ids.
  std::vector<size_t> draw(size_t count) const;

  // Whether the current round orders its draws by frequency.
  bool orders_by_frequency() const;
  // A seed for the current round's other random choices (shuffles, ties), derived from
  // (seed, rounds()).
  uint64_t round_seed() const;

 private:
  SamplerOptions options_;
  SamplerState state_;
};

// Reorders a multiset of ids by draw frequency: the distinct ids sorted by how often they
// occur (most often first, ties in an order seeded by `seed`), laid out in passes, where pass
// p holds the ids that occur more than p times. Frequent ids come first and a pass never
// holds one id twice, so a batch rarely does.
void order_by_frequency(std::vector<size_t>& ids, uint64_t seed);

}  // namespace fedcase::client
