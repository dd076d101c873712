#include "scheduling/fair_share.h"

#include <algorithm>
#include <limits>
#include <string>

namespace fedcase::scheduling {

void ServiceCounters::set_weight(uint64_t id, double weight) {
  entries_[id].weight = weight > 0 ? weight : 1;
}

void ServiceCounters::set_active(uint64_t id, bool active) {
  Entry& entry = entries_[id];
  if (active && !entry.active) {
    double least = std::numeric_limits<double>::infinity();
    for (const auto& [other, e] : entries_) {
      if (other != id && e.active) least = std::min(least, e.counter);
    }
    if (least != std::numeric_limits<double>::infinity()) {
      entry.counter = std::max(entry.counter, least);
    }
  }
  entry.active = active;
}

void ServiceCounters::charge(uint64_t id, double client_seconds, double class_cost) {
  Entry& entry = entries_[id];
  if (!(class_cost > 0)) return;
  entry.counter = std::max(0.0, entry.counter + client_seconds / (class_cost * entry.weight));
}

double ServiceCounters::counter(uint64_t id) const {
  auto it = entries_.find(id);
  return it == entries_.end() ? 0 : it->second.counter;
}

bool ServiceCounters::active(uint64_t id) const {
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.active;
}

std::vector<uint64_t> ServiceCounters::order(std::vector<uint64_t> candidates) const {
  std::stable_sort(candidates.begin(), candidates.end(), [this](uint64_t a, uint64_t b) {
    const double ca = counter(a), cb = counter(b);
    return ca != cb ? ca < cb : a < b;
  });
  return candidates;
}

nlohmann::json ServiceCounters::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [id, e] : entries_) {
    out[std::to_string(id)] = {{"weight", e.weight}, {"counter", e.counter}, {"active", e.active}};
  }
  return out;
}

size_t next_to_open(const std::vector<WaitingJob>& waiting, const ServiceCounters& counters) {
  size_t best = 0;
  for (size_t i = 1; i < waiting.size(); ++i) {
    const double a = counters.counter(waiting[i].consumer);
    const double b = counters.counter(waiting[best].consumer);
    if (a < b || (a == b && waiting[i].job < waiting[best].job)) best = i;
  }
  return best;
}

SlidingWindowLimit::SlidingWindowLimit(size_t max_events, double window_s)
    : max_events_(max_events), window_s_(window_s) {}

void SlidingWindowLimit::expire(double now) {
  while (!events_.empty() && events_.front() <= now - window_s_) events_.pop_front();
}

bool SlidingWindowLimit::would_allow(double now) {
  expire(now);
  return events_.size() < max_events_;
}

bool SlidingWindowLimit::allow(double now, double& retry_after_s) {
  if (would_allow(now)) {
    events_.push_back(now);
    retry_after_s = 0;
    return true;
  }
  retry_after_s = events_.empty() ? window_s_ : std::max(0.0, events_.front() + window_s_ - now);
  return false;
}

double jain_index(const std::vector<double>& shares) {
  if (shares.empty()) return 1;
  double sum = 0, squares = 0;
  for (double x : shares) {
    sum += x;
    squares += x * x;
  }
  return squares > 0 ? sum * sum / (double(shares.size()) * squares) : 1;
}

}  // namespace fedcase::scheduling
