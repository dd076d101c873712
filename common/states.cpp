#include "common/states.h"

namespace fedcase {

const char* state_name(JobState state) {
  switch (state) {
    case JobState::kRunning:
      return "running";
    case JobState::kPaused:
      return "paused";
    case JobState::kCancelled:
      return "cancelled";
    case JobState::kFinished:
      return "finished";
  }
  return "unknown";
}

const char* state_name(RoundState state) {
  switch (state) {
    case RoundState::kOpen:
      return "open";
    case RoundState::kCommitted:
      return "committed";
    case RoundState::kFailed:
      return "failed";
  }
  return "unknown";
}

std::optional<JobState> parse_job_state(std::string_view name) {
  for (JobState s :
       {JobState::kRunning, JobState::kPaused, JobState::kCancelled, JobState::kFinished}) {
    if (name == state_name(s)) return s;
  }
  return std::nullopt;
}

std::optional<RoundState> parse_round_state(std::string_view name) {
  for (RoundState s : {RoundState::kOpen, RoundState::kCommitted, RoundState::kFailed}) {
    if (name == state_name(s)) return s;
  }
  return std::nullopt;
}

}  // namespace fedcase
