#include "client_sdk/check_in_pacer.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <vector>

using namespace fedcase;
using namespace fedcase::client;

TEST_CASE("a device checks in again at a uniform point of the window it was given") {
  CheckInPacer pacer(30, 7);
  CHECK(pacer.answered(100, std::nullopt) == 100);  // no window: at once
  double sum = 0;
  for (int i = 0; i < 10000; ++i) {
    const double next = pacer.answered(100, protocol::CheckIn{10, 50, 12});
    REQUIRE(next >= 110);
    REQUIRE(next <= 150);
    sum += next - 100;
  }
  CHECK(sum / 10000 == doctest::Approx(30).epsilon(0.02));
  CHECK(pacer.reconnect_window_s() == 12);  // the coordinator's reconnect window is kept
}

TEST_CASE("an unreachable coordinator is tried again at the drawn phase, a window apart") {
  CheckInPacer pacer(20, 3);
  const double first = pacer.unreachable(1000);
  CHECK(first >= 1000 + CheckInPacer::kMinRetryS);
  CHECK(first <= 1020);
  CHECK(pacer.unreachable(first) == doctest::Approx(first + 20));
  // A try that hung past its next point (a connection timing out) keeps the phase.
  CHECK(pacer.unreachable(first + 75) == doctest::Approx(first + 80));
  // An answer ends the outage: the next loss draws a new phase within one window.
  pacer.answered(2000, std::nullopt);
  const double again = pacer.unreachable(2000);
  CHECK(again <= 2020);
  // A reconnect window of 0 still leaves kMinRetryS between tries.
  CheckInPacer eager(0, 1);
  CHECK(eager.unreachable(5) == 5 + CheckInPacer::kMinRetryS);
  CHECK(eager.unreachable(5.5) == 5.5 + CheckInPacer::kMinRetryS);
}

TEST_CASE("after an outage of any length a fleet's returns spread evenly over one window") {
  constexpr size_t kFleet = 4000;
  constexpr double kWindow = 20;
  for (double outage : {7.0, 60.0, 333.0}) {
    // Every device finds the coordinator gone at a random moment of the outage (its next
    // check-in fell then), and retries on its schedule until the coordinator is back.
    std::vector<size_t> bins(10, 0);
    double last = 0;
    for (size_t d = 0; d < kFleet; ++d) {
      CheckInPacer pacer(kWindow, d + 1);
      double t = outage * double(d) / kFleet;
      while (t < outage) t = pacer.unreachable(t);
      last = std::max(last, t - outage);
      bins[std::min<size_t>(9, size_t((t - outage) / (kWindow / 10)))] += 1;
    }
    CHECK(last <= kWindow);
    const double mean = double(kFleet) / 10;
    const size_t peak = *std::max_element(bins.begin(), bins.end());
    CHECK_MESSAGE(peak <= 1.25 * mean, "outage " << outage << " s: peak " << peak << " per "
                                                 << kWindow / 10 << " s, mean " << mean);
  }
}
