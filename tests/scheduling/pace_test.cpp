#include "scheduling/pace.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "scheduling/rng.h"

using namespace fedcase;
using namespace fedcase::scheduling;

namespace {

// The devices checked in at the end of `horizon_s` when each of `fleet` devices (values spread
// uniformly) checks in, stays `awake_s`, gets no task and sleeps a uniform point of its window
// for the fleet's period; devices start at random phases.
size_t checked_in_at_end(const PaceConfig& config, size_t fleet, double wanted, double awake_s,
                         double horizon_s, uint64_t seed) {
  Rng rng(seed);
  const double period = check_in_period(config, fleet, wanted, awake_s);
  size_t awake = 0;
  for (size_t d = 0; d < fleet; ++d) {
    const double value = (d + 0.5) / fleet;
    const CheckInWindow w = check_in_window(config, period, value);
    double t = -rng.unit() * (awake_s + w.latest_s);  // a check-in before the start
    for (;;) {
      if (horizon_s < t + awake_s) {
        awake += horizon_s >= t;
        break;
      }
      t += awake_s + w.earliest_s + rng.unit() * (w.latest_s - w.earliest_s);
    }
  }
  return awake;
}

}  // namespace

TEST_CASE("the period keeps the wanted pool checked in, within its bounds") {
  PaceConfig config;
  config.max_period_s = 3600;
  // 100,000 devices, rounds of K = 1,000 at overcommit 1.3 and pool factor 4, polls of 30 s.
  CHECK(check_in_period(config, 100000, 5200, 30) == doctest::Approx(30 * (100000 / 5200.0 - 1)));
  // The jobs want the whole fleet or more: every device checks in again at once.
  CHECK(check_in_period(config, 50, 52, 30) == 0);
  config.min_period_s = 2;
  CHECK(check_in_period(config, 50, 52, 30) == 2);
  // Nothing wanted (no running job): the longest period.
  CHECK(check_in_period(config, 100000, 0, 30) == 3600);
  config.max_period_s = 60;
  CHECK(check_in_period(config, 100000, 5200, 30) == 60);
}

TEST_CASE("a valued device comes back sooner; over the fleet the mean period is the period") {
  PaceConfig config;
  config.max_period_s = 3600;
  const CheckInWindow best = check_in_window(config, 100, 1);
  const CheckInWindow unknown = check_in_window(config, 100, 0.5);
  const CheckInWindow worst = check_in_window(config, 100, 0);
  CHECK(best.earliest_s == doctest::Approx(25));  // 100 * (1 - 0.5), jittered by 0.5
  CHECK(best.latest_s == doctest::Approx(75));
  CHECK(unknown.earliest_s == doctest::Approx(50));
  CHECK(unknown.latest_s == doctest::Approx(150));
  CHECK(worst.latest_s == doctest::Approx(225));
  double sum = 0;
  for (int i = 0; i < 1000; ++i) {
    const CheckInWindow w = check_in_window(config, 100, (i + 0.5) / 1000);
    sum += (w.earliest_s + w.latest_s) / 2;
  }
  CHECK(sum / 1000 == doctest::Approx(100));
  // A value out of range, or not a number, is taken within [0, 1] or as unknown.
  CHECK(check_in_window(config, 100, 7).latest_s == doctest::Approx(75));
  CHECK(check_in_window(config, 100, std::nan("")).latest_s == doctest::Approx(150));
  // The bounds hold for each device's own period.
  config.max_period_s = 120;
  CHECK(check_in_window(config, 100, 0).latest_s == doctest::Approx(180));
}

TEST_CASE("a fleet that follows its windows keeps about the wanted pool checked in") {
  PaceConfig config;
  config.max_period_s = 3600;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    // Alike devices: the pool is the wanted one.
    config.value_spread = 0;
    CHECK(checked_in_at_end(config, 20000, 400, 20, 5000, seed) ==
          doctest::Approx(400).epsilon(0.15));
    // Valued devices come back sooner, so a few more are checked in at once (the mean of
    // 1 / period over uniformly spread values is ln(3) / 2 / 0.5 = 1.10 times 1 / period).
    config.value_spread = 0.5;
    CHECK(checked_in_at_end(config, 20000, 400, 20, 5000, seed) ==
          doctest::Approx(440).epsilon(0.15));
  }
}

TEST_CASE("a pace config out of range is refused, naming the field") {
  PaceConfig config;
  CHECK(check_pace_config(config).ok());
  config.pool_factor = 0.5;
  CHECK(check_pace_config(config).message().find("pool_factor") != std::string::npos);
  config = {};
  config.min_period_s = 100;  // above max_period_s
  CHECK(check_pace_config(config).message().find("min_period_s") != std::string::npos);
  config = {};
  config.jitter = 1;
  CHECK(check_pace_config(config).message().find("jitter") != std::string::npos);
  config = {};
  config.reconnect_window_s = -1;
  CHECK(check_pace_config(config).message().find("reconnect_window_s") != std::string::npos);
}

TEST_CASE("a value's rank among the fleet's: ties share their middle rank") {
  CHECK(rank_among({}, 3) == 0.5);
  const std::vector<double> fleet = {1, 2, 2, 3};
  CHECK(rank_among(fleet, 0) == 0);
  CHECK(rank_among(fleet, 1) == doctest::Approx(0.125));
  CHECK(rank_among(fleet, 2) == doctest::Approx(0.5));
  CHECK(rank_among(fleet, 3) == doctest::Approx(0.875));
  CHECK(rank_among(fleet, 9) == 1);
}
