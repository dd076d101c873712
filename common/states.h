#pragma once
// The lifecycles of a job and of a round. Code decides on these enums; they become text only
// where they leave the process: the store's columns and the API's JSON views.

#include <optional>
#include <string_view>

namespace fedcase {

// running <-> paused; running | paused -> cancelled | finished.
enum class JobState { kRunning, kPaused, kCancelled, kFinished };
// open -> committed | failed. A committed round r produces model version r.
enum class RoundState { kOpen, kCommitted, kFailed };

// "running", "paused", "cancelled", "finished".
const char* state_name(JobState state);
// "open", "committed", "failed".
const char* state_name(RoundState state);

// The inverse of state_name; nullopt for any other text.
std::optional<JobState> parse_job_state(std::string_view name);
std::optional<RoundState> parse_round_state(std::string_view name);

}  // namespace fedcase
