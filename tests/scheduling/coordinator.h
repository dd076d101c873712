#pragma once
// The end of a replayed round, as the round engine concludes one (rounds/job_runtime.cpp), for
// the scheduling tests that drive a policy without the engine.

#include <doctest/doctest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "scheduling/profile.h"
#include "scheduling/selection.h"

namespace fedcase::scheduling::testing {

// An invitee's update arriving `at_s` seconds after the round opened, with its report.
struct Arrival {
  double at_s = 0;
  ClientId id = 0;
  RoundReport report;
};

// The round closes at the target-th arrival within `deadline_s`, or at the deadline. The
// updates that arrived by then are kept (observe_completion); every other invitee is given
// the not-kept feedback: the mean utility of the kept updates, and the round's length (all
// tasks start at the open) as a lower bound on its duration; if the round did not fill, it
// also missed the deadline. `profiles[id - 1]` is client id's profile.
inline RoundOutcome conclude_replayed_round(std::vector<ClientProfile>& profiles, RoundIndex round,
                                            const std::vector<ClientId>& invited,
                                            std::vector<Arrival> arrivals, size_t target,
                                            double deadline_s, const ProfileParams& params) {
  std::sort(arrivals.begin(), arrivals.end(),
            [](const Arrival& a, const Arrival& b) { return a.at_s < b.at_s; });
  arrivals.erase(std::remove_if(arrivals.begin(), arrivals.end(),
                                [&](const Arrival& a) { return a.at_s > deadline_s; }),
                 arrivals.end());
  if (arrivals.size() > target) arrivals.resize(target);
  const bool filled = arrivals.size() == target;
  RoundOutcome outcome;
  outcome.round = round;
  outcome.duration_s = filled ? arrivals.back().at_s : deadline_s;
  double loss_sum = 0;
  uint64_t samples = 0;
  std::set<ClientId> kept;
  for (const Arrival& a : arrivals) {
    ClientProfile& p = profiles[a.id - 1];
    RoundReport report = a.report;
    report.round = round;
    REQUIRE(observe_completion(p, report, params).ok());
    outcome.clients.push_back({a.id, true, a.at_s, p.utility});
    loss_sum += report.loss_sum;
    samples += report.samples;
    kept.insert(a.id);
  }
  for (ClientId id : invited) {
    if (kept.count(id) != 0) continue;
    if (!filled) observe_missed_deadline(profiles[id - 1]);
    outcome.clients.push_back({id, false, outcome.duration_s, 0});
  }
  const double mean = mean_kept_utility(outcome);
  for (const ClientOutcome& c : outcome.clients) {
    if (!c.finished)
      REQUIRE(observe_not_kept(profiles[c.id - 1], {round, mean, c.duration_s}).ok());
  }
  if (samples > 0) outcome.loss = loss_sum / static_cast<double>(samples);
  return outcome;
}

}  // namespace fedcase::scheduling::testing
