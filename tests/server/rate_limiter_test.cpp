#include "server/api/rate_limiter.h"

#include <doctest/doctest.h>

using fedcase::server::RateLimiter;

TEST_CASE("token bucket allows the burst, then the rate, per key") {
  RateLimiter limiter(10, 20);
  auto t0 = RateLimiter::Clock::time_point{} + std::chrono::hours(1);
  double retry = 0;
  int allowed = 0;
  for (int i = 0; i < 30; ++i) allowed += limiter.allow("a", t0, retry);
  CHECK(allowed == 20);
  CHECK(retry == doctest::Approx(0.1));
  CHECK(limiter.allow("b", t0, retry));  // another caller has its own bucket
  // Half a second refills five requests.
  allowed = 0;
  for (int i = 0; i < 10; ++i)
    allowed += limiter.allow("a", t0 + std::chrono::milliseconds(500), retry);
  CHECK(allowed == 5);
}
