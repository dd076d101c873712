#pragma once
// Expected duration of a task on a client: download the model, read and train on the samples,
// upload the update. The phases run one after the other, so the parts add up:
//
//   compute  = samples * compute_ms_per_sample / 1000
//   io       = samples * (1 - cache_hit_ratio) * sample_bytes / storage_read_bytes_per_s
//   download = download_bytes / download_bytes_per_s
//   upload   = upload_bytes / upload_bytes_per_s
//
// A cache hit is taken to cost no I/O time (memory against flash). Where a profile has not
// measured a quantity yet, the caller's priors stand in for it.

#include <cstdint>
#include <nlohmann/json.hpp>

#include "common/status.h"
#include "scheduling/profile.h"

namespace fedcase::scheduling {

// The work a task asks of a client.
struct TaskShape {
  uint64_t samples = 0;         // samples to train on, repetitions included
  uint64_t download_bytes = 0;  // the global model
  uint64_t upload_bytes = 0;    // the update
};

// Stand-ins for what a profile has not measured yet (a typical phone on a mobile network).
struct DurationPriors {
  double compute_ms_per_sample = 5;
  double download_bytes_per_s = 1.25e6;    // 10 Mbit/s
  double upload_bytes_per_s = 0.625e6;     // 5 Mbit/s
  double storage_read_bytes_per_s = 10e6;  // slow flash
  double sample_bytes = 784;               // a 28x28 8-bit image
  double cache_hit_ratio = 0;
};

struct ExpectedDuration {
  double compute_s = 0;
  double io_s = 0;
  double download_s = 0;
  double upload_s = 0;
  double total_s() const { return compute_s + io_s + download_s + upload_s; }
};

ExpectedDuration expected_duration(const ClientProfile& profile, const TaskShape& task,
                                   const DurationPriors& priors = {});

// Parses priors from a config object ({"compute_ms_per_sample": 5, ...}); absent keys keep the
// defaults above. kInvalidArgument naming `where`.key for an unknown key or a bad value
// (speeds and sizes must be > 0, the hit ratio in [0, 1]).
Result<DurationPriors> parse_duration_priors(const nlohmann::json& config,
                                             const std::string& where);

}  // namespace fedcase::scheduling
