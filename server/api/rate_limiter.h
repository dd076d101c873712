#pragma once
// Token-bucket rate limiting per caller: `rate` requests a second on average, bursts up to
// `burst`. Thread-safe. Buckets idle for a minute are forgotten.

#include <chrono>
#include <string>
#include <unordered_map>

#include "common/mutex.h"

namespace fedcase::server {

class RateLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  RateLimiter(double rate, double burst) : rate_(rate), burst_(burst) {}

  // True when `key` may make a request at `now`; otherwise false and `retry_after_s` says
  // when the next one will be allowed.
  bool allow(const std::string& key, Clock::time_point now, double& retry_after_s);

 private:
  struct Bucket {
    double tokens;
    Clock::time_point updated;
  };
  double rate_, burst_;
  Mutex mu_;
  std::unordered_map<std::string, Bucket> buckets_ FEDCASE_GUARDED_BY(mu_);
  Clock::time_point last_sweep_ FEDCASE_GUARDED_BY(mu_){};
};

}  // namespace fedcase::server
