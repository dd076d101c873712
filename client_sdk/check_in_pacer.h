#pragma once
// When a device checks in with its coordinator for work next (docs/protocol.md, "Pace
// steering"): at the point of the window a task poll's 204 gave it (drawn uniformly, so a
// fleet's check-ins spread evenly), and after losing the coordinator on a schedule that spreads
// the fleet's returns uniformly over the reconnect window, however long the outage lasted.
//
// Pure: times are seconds on the caller's clock; draws come from the pacer's own generator.
// Not thread-safe: one pacer per session.

#include <cstdint>
#include <optional>
#include <random>

#include "protocol/check_in.h"

namespace fedcase::client {

class CheckInPacer {
 public:
  // `reconnect_window_s`: the spread of returns until a coordinator says otherwise.
  CheckInPacer(double reconnect_window_s, uint64_t seed);

  // A task poll was answered at `now` (any answer ends a time without the coordinator):
  // `check_in` is a 204's window (nullopt: none given). Returns when to poll next: a uniform
  // point of the window, or `now` without one. The window's reconnect_s is kept.
  double answered(double now, const std::optional<protocol::CheckIn>& check_in);

  // A check-in (a task poll or a registration) found no coordinator at `now`. Returns when to
  // try again: the first time, a uniform point within the reconnect window; after that, one
  // whole window after the previous try. A device's tries keep the phase it drew, so once
  // the coordinator is back, the next tries of a fleet are spread uniformly over one window
  // from then. Tries are at least kMinRetryS apart.
  double unreachable(double now);

  double reconnect_window_s() const { return window_s_; }

  static constexpr double kMinRetryS = 0.5;

 private:
  std::mt19937_64 rng_;
  double window_s_;
  std::optional<double> last_try_;  // while unreachable: when the schedule tried last
};

}  // namespace fedcase::client
