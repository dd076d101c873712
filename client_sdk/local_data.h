#pragma once
// A client's local data pipeline: plans each round's samples (uniform epochs or importance
// draws, the task's budget), serves them to the app's Trainer through the sample cache from
// the app's SampleSource, feeds the trainer's per-sample losses back to the sampler and the
// cache batch by batch (so the cache sees each batch's fresh weights before the next read),
// and keeps the sampler's weights in <state_dir>/state.bin across restarts.
// Not thread-safe: one LocalData per client thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "client_sdk/importance_sampler.h"
#include "client_sdk/round_order.h"
#include "client_sdk/sample_cache.h"
#include "client_sdk/sample_source.h"
#include "client_sdk/trainer.h"
#include "common/status.h"
#include "protocol/task_offer.h"

namespace fedcase::client {

// What a task asks of the local data.
struct DataDirectives {
  Sampling sampling = Sampling::kUniform;
  uint64_t sample_budget = 0;  // samples per round, repeats included; 0 = epochs x partition
  uint64_t epochs = 1;
  CachePolicy cache_policy = CachePolicy::kNone;
  uint64_t cache_budget_bytes = 0;
  double repetition_factor = 1;  // uses each draw of a cached sample may serve (>= 1)
  // kAdaptive: the artifact's rule instead of repetition_factor (client::plan_reuse), reading
  // the round's batch size.
  Repetition repetition = Repetition::kFixed;
};

// What `task` asks of the local data: its sampling, sample budget, epochs and cache.
DataDirectives data_directives(const protocol::TaskOffer& task);

struct LocalDataConfig {
  SampleSource* source = nullptr;     // the app's training samples; must outlive the LocalData
  SamplerOptions sampler;             // seed also drives uniform shuffles
  std::string state_dir;              // where the sampler's weights persist; empty = nowhere
  uint64_t cache_capacity_bytes = 0;  // caps every task's cache budget; 0 = no cap
};

// One round's figures.
struct RoundStats {
  uint64_t samples = 0;  // samples trained on, repeats included
  double loss_sum = 0;   // of the losses the trainer reported
  double loss_sq_sum = 0;
  double compute_s = 0;  // training time, reads excluded
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t reused = 0;  // draws replaced by cached samples (included in cache_hits)
  uint64_t bytes_read = 0;
  double io_s = 0;  // the source's device time for the reads, or their wall time
};

class LocalData {
 public:
  // Sets up the pipeline over config.source; with a state_dir, creates it and restores the
  // sampler from its state file: a missing state starts afresh, an unreadable one or one of
  // other data (SampleSource::fingerprint) is logged and replaced. kInvalidArgument for no
  // source or an empty one; kInternal when state_dir cannot be created.
  static Result<std::unique_ptr<LocalData>> open(LocalDataConfig config);

  struct Trained {
    std::vector<float> parameters;
    RoundStats stats;
  };
  // Has `trainer` train from `parameters` for one round as `directives` ask. Errors:
  // kInvalidArgument for a repetition factor below 1 or a zero budget; the trainer's or the
  // source's errors (the round is then to be discarded); kInternal when the trainer returns
  // the wrong number of parameters or a non-finite one. A failure to save the state is
  // logged, not returned: the round itself succeeded.
  Result<Trained> train_round(Trainer& trainer, const std::vector<float>& parameters,
                              const TrainSettings& settings, const DataDirectives& directives);

  size_t size() const { return sampler_.size(); }
  const ImportanceSampler& sampler() const { return sampler_; }
  // The current cache (nullptr before the first round).
  const SampleCache* cache() const { return cache_.get(); }
  // The mean record size of the source, in bytes.
  uint64_t mean_sample_bytes() const { return mean_sample_bytes_; }

 private:
  LocalData(LocalDataConfig config, uint64_t fingerprint, ImportanceSampler sampler);
  // Keeps the cache when the policy and budget are unchanged, else starts a new one.
  void prepare_cache(const DataDirectives& directives);
  void save_state() const;

  LocalDataConfig config_;
  uint64_t fingerprint_;
  uint64_t mean_sample_bytes_ = 0;
  ImportanceSampler sampler_;
  std::unique_ptr<SampleCache> cache_;
};

// Scores `parameters` with `trainer` on the first `max_samples` samples of `source` (all of
// them when 0), read directly. kInvalidArgument for an empty source; the trainer's and the
// source's errors.
Result<Evaluation> evaluate_held_out(Trainer& trainer, const std::vector<float>& parameters,
                                     SampleSource& source, uint64_t max_samples);

}  // namespace fedcase::client
