#pragma once
// Round planning: from a job's training parameters and the selected clients' profiles, the
// task each client gets and the round's deadline. Also builds the selection candidates, since
// a candidate's expected duration is that of the task it would get.
// Pure: no I/O, no clock.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"
#include "protocol/sampling.h"
#include "protocol/task_offer.h"
#include "scheduling/duration.h"
#include "scheduling/profile.h"
#include "scheduling/selection.h"

namespace fedcase::scheduling {

enum class DeadlineMode {
  kFixed,       // the same number of seconds every round
  kPercentile,  // slack x a percentile of the selected clients' expected durations
};

struct DeadlineConfig {
  DeadlineMode mode = DeadlineMode::kPercentile;
  double fixed_s = 300;     // kFixed
  double percentile = 0.9;  // kPercentile: quantile in [0, 1] ...
  double slack = 1.5;       // ... times this factor ...
  double min_s = 30;        // ... clamped to [min_s, max_s]
  double max_s = 3600;
};

struct TrainingParams {
  uint32_t local_epochs = 1;   // passes over the client's data, when sample_budget is 0
  uint64_t sample_budget = 0;  // samples per task; 0 = local_epochs x dataset size
  uint32_t batch_size = 32;
  double learning_rate = 0.01;
  double momentum = 0;      // the client's local SGD momentum
  double weight_decay = 0;  // the client's local L2 penalty
  double prox_mu = 0;       // FedProx proximal term; 0 = plain local SGD
  protocol::Sampling sampling = protocol::Sampling::kUniform;
  DeadlineConfig deadline;
  // Every task's default cache directives (the budget is capped at the client's capacity).
  protocol::CacheDirectives cache;
  DurationPriors priors;  // for what a profile has not measured yet
};

// Parses a job's `training` config (keys and defaults in docs/scheduling.md). The client's
// settings are held to the ranges of the task offer (protocol/task_offer.h), so every task
// planned from them is one an SDK accepts. kInvalidArgument naming the key for an unknown key
// or a bad value.
Result<TrainingParams> parse_training_params(const nlohmann::json& training);

// What one client's task asks of it: its samples (at least one batch), the model down and the
// update (same size) up.
TaskShape task_shape(const TrainingParams& params, const ClientProfile& profile,
                     uint64_t model_bytes);

// The selection candidate for `profile`, with the expected duration and the distinct samples
// of its task. The candidate points at `profile`, which must outlive the select() call it is
// used in.
Candidate make_candidate(const ClientProfile& profile, bool available, const TrainingParams& params,
                         uint64_t model_bytes);

struct ClientTask {
  ClientId client = 0;
  uint64_t samples = 0;         // sample budget of the task
  uint64_t unique_samples = 0;  // distinct samples it can train on: |B| of its utility
  uint64_t local_steps = 0;     // ceil(samples / batch_size)
  uint32_t batch_size = 0;
  double learning_rate = 0;
  double momentum = 0;
  double weight_decay = 0;
  double prox_mu = 0;
  protocol::Sampling sampling = protocol::Sampling::kUniform;
  protocol::CacheDirectives cache;
  double expected_duration_s = 0;
};

struct RoundPlan {
  double deadline_s = 0;          // seconds after the round opens
  std::vector<ClientTask> tasks;  // one per selected client, in the order given
};

// Plans a round for `selected` (profiles of the invited clients, none null). kInvalidArgument
// when `selected` is empty or holds a null profile.
Result<RoundPlan> plan_round(const TrainingParams& params,
                             const std::vector<const ClientProfile*>& selected,
                             uint64_t model_bytes);

}  // namespace fedcase::scheduling
