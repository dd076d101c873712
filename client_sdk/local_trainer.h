#pragma once
// A client's local data pipeline: plans each round's samples (uniform epochs or importance
// draws), reads them batch by batch through the sample cache from the sample store, trains
// the model on them, feeds the per-sample losses back to the sampler and the cache, and
// keeps the sampler's weights in the client state file.
//
// Two modes:
//   memory  (state_dir empty) samples come from the in-memory dataset: no store, no cache,
//           no I/O time, nothing persisted. Sampling directives still apply.
//   store   (state_dir set) the partition lives in <state_dir>/samples.bin, read through the
//           emulated device and the task's cache; the sampler state lives in
//           <state_dir>/state.bin and is saved after every round.
//
// Samples stream through a one-batch buffer: the next batch is read while the model trainer
// waits between batches, so the cache sees each batch's fresh weights before the next read.
// Not thread-safe: one LocalTrainer per client thread.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client_sdk/importance_sampler.h"
#include "client_sdk/round_order.h"
#include "client_sdk/sample_cache.h"
#include "client_sdk/sample_store.h"
#include "common/status.h"
#include "ml/dataset.h"
#include "ml/model.h"

namespace fedcase::client {

// What a task asks of the local data.
struct DataDirectives {
  Sampling sampling = Sampling::kUniform;
  uint64_t sample_budget = 0;  // samples per round, repeats included; 0 = epochs x partition
  uint64_t epochs = 1;
  CachePolicy cache_policy = CachePolicy::kNone;
  uint64_t cache_budget_bytes = 0;
  double repetition_factor = 1;  // uses a cached sample may serve per round (>= 1)
};

// Reads a task's directives: "sampling" ("uniform" | "importance"), "sample_budget",
// "cache": {"policy", "budget_bytes", "repetition_factor"} and "train": {"epochs"}. Absent
// fields keep the defaults above. kInvalidArgument naming the field for a bad value.
Result<DataDirectives> parse_data_directives(const nlohmann::json& task);

struct LocalDataConfig {
  const ml::Dataset* data = nullptr;  // shared, read-only; must outlive the trainer
  std::vector<size_t> indices;        // the client's partition of `data`
  SamplerOptions sampler;             // seed also drives uniform shuffles
  std::string state_dir;              // empty = memory mode
  StorageEmulation storage;           // store mode only
  uint64_t cache_capacity_bytes = 0;  // caps every task's cache budget; 0 = no cap
};

// One round's figures (store mode fills the cache and I/O ones; memory mode leaves them 0).
struct RoundStats {
  uint64_t samples = 0;  // samples trained on, repeats included
  double loss_sum = 0;
  double loss_sq_sum = 0;
  double compute_s = 0;  // training time, reads excluded
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t reused = 0;  // draws replaced by cached samples (included in cache_hits)
  uint64_t bytes_read = 0;
  double io_s = 0;  // device time of the reads (see ReadStats)
};

class LocalTrainer {
 public:
  // Sets up the local data. In store mode: creates state_dir, writes the sample store unless
  // one of this partition and record size is there, and restores the sampler from the state
  // file; a missing state starts afresh, an unreadable one or one of another partition is
  // logged and replaced. kInvalidArgument for no data, an empty partition, an index out of
  // range or a bad storage emulation; kInternal on I/O failure.
  static Result<std::unique_ptr<LocalTrainer>> open(LocalDataConfig config);

  // Trains `model` for one round as `directives` ask. Errors: kInvalidArgument for a
  // repetition factor below 1 or a zero budget; kInternal when a read fails (the model has
  // then trained on incomplete data and must be discarded). A failure to save the state is
  // logged, not returned: the round itself succeeded.
  Result<RoundStats> train_round(ml::Model& model, const ml::TrainOptions& options,
                                 const DataDirectives& directives);

  size_t size() const { return sampler_.size(); }
  const ImportanceSampler& sampler() const { return sampler_; }
  // The current cache (nullptr in memory mode or before the first round).
  const SampleCache* cache() const { return cache_.get(); }
  // Bytes per stored sample in store mode; 0 in memory mode.
  uint64_t sample_bytes() const { return store_ ? store_->record_bytes() : 0; }

 private:
  LocalTrainer(LocalDataConfig config, ImportanceSampler sampler,
               std::unique_ptr<SampleStore> store);
  // Keeps the cache when the policy and budget are unchanged, else starts a new one.
  void prepare_cache(const DataDirectives& directives);
  // Copies samples order[first, first + count) into the batch buffer.
  Status stage(const std::vector<size_t>& order, size_t first, size_t count);
  void save_state() const;

  LocalDataConfig config_;
  uint64_t fingerprint_ = 0;
  ImportanceSampler sampler_;
  std::unique_ptr<SampleStore> store_;  // store mode only
  std::unique_ptr<SampleCache> cache_;  // store mode only
  ml::Dataset batch_;                   // the batch being trained
  std::string record_;                  // scratch for one record
};

}  // namespace fedcase::client
