#pragma once
// How a task asks a client to sample and cache its local data: the one place the names of the
// sampling modes, cache policies and repetition rules are spelled, for the job config, the task offer, the SDK
// and the simulator.
//
// Pure functions; thread-safe.

#include <string_view>

#include "common/status.h"

namespace fedcase::protocol {

enum class Sampling {
  kUniform,     // "uniform": shuffled passes over the local samples
  kImportance,  // "importance": draws weighted by loss rank (SHADE)
};

enum class CachePolicy {
  kNone,        // "none": nothing is kept, every read goes to storage
  kLru,         // "lru": the most recently used records
  kImportance,  // "importance": the most important records (SHADE's cache)
};

// How many uses each draw of a cached sample may serve within a task (client::plan_reuse).
enum class Repetition {
  kFixed,     // "fixed": the task's repetition_factor
  kAdaptive,  // "adaptive": the FedCaSe artifact's rule, from the task's hits, budget and batch
};

const char* sampling_name(Sampling sampling);
// The mode named `name`; kInvalidArgument listing the names for any other.
Result<Sampling> parse_sampling(std::string_view name);

const char* cache_policy_name(CachePolicy policy);
// The policy named `name`; kInvalidArgument listing the names for any other.
Result<CachePolicy> parse_cache_policy(std::string_view name);

const char* repetition_name(Repetition repetition);
// The rule named `name`; kInvalidArgument listing the names for any other.
Result<Repetition> parse_repetition(std::string_view name);

}  // namespace fedcase::protocol
