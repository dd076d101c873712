#include "client_sdk/check_in_pacer.h"

#include <algorithm>
#include <cmath>

namespace fedcase::client {

CheckInPacer::CheckInPacer(double reconnect_window_s, uint64_t seed)
    : rng_(seed), window_s_(std::max(reconnect_window_s, 0.0)) {}

double CheckInPacer::answered(double now, const std::optional<protocol::CheckIn>& check_in) {
  last_try_.reset();
  if (!check_in) return now;
  window_s_ = check_in->reconnect_s;
  std::uniform_real_distribution<double> within(check_in->after_s, check_in->before_s);
  return now + within(rng_);
}

double CheckInPacer::unreachable(double now) {
  double next;
  if (!last_try_) {
    next = now + std::uniform_real_distribution<double>(0, window_s_)(rng_);
  } else {
    next = *last_try_ + window_s_;
    // A try that took longer than a window (a connection timing out) keeps the phase.
    if (window_s_ > 0 && next < now) next += std::ceil((now - next) / window_s_) * window_s_;
  }
  next = std::max(next, now + kMinRetryS);
  last_try_ = next;
  return next;
}

}  // namespace fedcase::client
