#pragma once
// Hand-made profiles and candidates for the scheduling tests.

#include "scheduling/profile.h"
#include "scheduling/selection.h"

namespace fedcase::scheduling::testing {

// A client that has completed a task with `utility` and was last selected (and given
// feedback) in `last_selected`.
inline ClientProfile explored_profile(ClientId id, double utility, RoundIndex last_selected) {
  ClientProfile p;
  p.id = id;
  p.utility = utility;
  p.utility_round = last_selected;
  p.feedback_round = last_selected;
  p.feedback_utility = utility;
  p.last_selected_round = last_selected;
  p.times_selected = 1;
  p.completions = 1;
  return p;
}

inline ClientProfile fresh_profile(ClientId id) {
  ClientProfile p;
  p.id = id;
  return p;
}

inline Candidate candidate_of(const ClientProfile& p, double duration_s, bool available = true) {
  Candidate c;
  c.id = p.id;
  c.available = available;
  c.profile = &p;
  c.expected_duration_s = duration_s;
  return c;
}

}  // namespace fedcase::scheduling::testing
