#include "server/api/rate_limiter.h"

#include <algorithm>

namespace fedcase::server {

bool RateLimiter::allow(const std::string& key, Clock::time_point now, double& retry_after_s) {
  MutexLock lock(mu_);
  if (now - last_sweep_ > std::chrono::minutes(1)) {
    for (auto it = buckets_.begin(); it != buckets_.end();) {
      it = now - it->second.updated > std::chrono::minutes(1) ? buckets_.erase(it) : std::next(it);
    }
    last_sweep_ = now;
  }
  auto [it, inserted] = buckets_.try_emplace(key, Bucket{burst_, now});
  Bucket& b = it->second;
  double elapsed = std::chrono::duration<double>(now - b.updated).count();
  b.tokens = std::min(burst_, b.tokens + elapsed * rate_);
  b.updated = now;
  if (b.tokens >= 1.0) {
    b.tokens -= 1.0;
    return true;
  }
  retry_after_s = (1.0 - b.tokens) / rate_;
  return false;
}

}  // namespace fedcase::server
