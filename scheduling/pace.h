#pragma once
// Pace steering (Bonawitz et al. 2019, "Towards federated learning at scale: system design",
// section 2.3): a device that checks in and gets no task is told when to check in again, as a
// window it picks a point of at random, so that however large the fleet, about as many devices
// are checked in at any moment as the jobs' rounds want to choose among, and the rest sleep
// without a connection. docs/scaling.md, "Pace steering", states the rule and its figures.
//
// Pure: no clock and no I/O; times are seconds from the moment of the answer.

#include <cstddef>
#include <vector>

#include "common/status.h"

namespace fedcase::scheduling {

struct PaceConfig {
  // Devices the jobs want checked in, per invitation their rounds make: a round opens on a
  // pool of about pool_factor * ceil(K * overcommit) checked-in devices to choose from.
  double pool_factor = 4;
  // Bounds of a device's period (the mean time between its check-ins). min_period_s 0: when
  // the jobs want at least the whole fleet, devices check in again at once (every device is
  // in the pool, as without steering). max_period_s: the period when no job wants devices,
  // so a job created then waits up to this long for its pool.
  double min_period_s = 0;
  double max_period_s = 60;
  // A device's window is [T * (1 - jitter), T * (1 + jitter)] around its period T; it picks a
  // point in it uniformly, which spreads the fleet's check-ins evenly over time.
  double jitter = 0.5;
  // How much the device's value moves its period: T * (1 + value_spread * (1 - 2 * value)),
  // so the most valued device comes back value_spread sooner than the period, the least
  // valued that much later. 0: every device alike.
  double value_spread = 0.5;
  // Devices that lost the coordinator (an outage) spread their return uniformly over this
  // many seconds (the SDK's reconnect schedule), told with every window.
  double reconnect_window_s = 30;
};

// kInvalidArgument naming the field unless pool_factor >= 1, 0 <= min_period_s <=
// max_period_s <= 86400, jitter and value_spread in [0, 1), reconnect_window_s in [0, 3600].
Status check_pace_config(const PaceConfig& config);

// The period that keeps about `wanted` of `fleet` devices checked in when each check-in stays
// open `awake_s` seconds: a device is checked in awake_s of every awake_s + T seconds, so
// T = awake_s * (fleet / wanted - 1), within [min_period_s, max_period_s]; max_period_s when
// nothing is wanted (wanted <= 0).
double check_in_period(const PaceConfig& config, size_t fleet, double wanted, double awake_s);

// When to check in again, in seconds from now.
struct CheckInWindow {
  double earliest_s = 0;
  double latest_s = 0;
};

// The window of a device of `value` (in [0, 1]: its rank in the fleet by the measure the
// selection policies rank by; 0.5 when unknown) for the fleet's `period_s`: its own period
// (value_spread above), within [min_period_s, max_period_s], widened by jitter. Over a fleet
// whose values are spread uniformly the mean period is period_s.
CheckInWindow check_in_window(const PaceConfig& config, double period_s, double value);

// The rank in [0, 1] of `value` among `ascending` (sorted), ties sharing their middle rank:
// a device's `value` for check_in_window from its utility among the fleet's. 0.5 when
// `ascending` is empty.
double rank_among(const std::vector<double>& ascending, double value);

}  // namespace fedcase::scheduling
