#include "scheduling/fair_share.h"

#include <algorithm>
#include <limits>
#include <string>

#include "common/json_read.h"
#include "scheduling/percentile.h"

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

double SlidingWindowLimit::oldest_leaves() const {
  return events_.empty() ? -std::numeric_limits<double>::infinity() : events_.front() + window_s_;
}

bool SlidingWindowLimit::allow(double now, double& retry_after_s) {
  if (would_allow(now)) {
    events_.push_back(now);
    retry_after_s = 0;
    return true;
  }
  retry_after_s = events_.empty() ? window_s_ : std::max(0.0, oldest_leaves() - now);
  return false;
}

FairShare::Tenant& FairShare::tenant(TenantId id) { return tenants_[id]; }

std::optional<double> FairShare::throttle_ends(double now) const {
  std::optional<double> ends;
  for (const auto& [id, t] : tenants_) {
    if (!t.round_throttled || !t.round_starts) continue;
    const double at = t.round_starts->oldest_leaves();
    if (at > now && (!ends || at < *ends)) ends = at;
  }
  return ends;
}

uint64_t FairShare::consumer(TenantId tenant, JobId job) const {
  return mode_ == Mode::kPerJob ? job : tenant;
}

void FairShare::set_tenant(TenantId id, double weight, TenantLimits limits) {
  Tenant& t = tenant(id);
  t.limits = limits;
  t.submissions.reset();
  t.round_starts.reset();
  if (limits.max_submissions > 0) {
    t.submissions.emplace(limits.max_submissions, limits.submission_window_s);
  }
  if (limits.max_round_starts > 0) {
    t.round_starts.emplace(limits.max_round_starts, limits.round_window_s);
  }
  if (mode_ == Mode::kPerTenant) counters_.set_weight(id, weight);
}

void FairShare::set_tenant_active(TenantId id, bool active) {
  if (mode_ == Mode::kPerTenant) counters_.set_active(id, active);
}

void FairShare::set_active_tenants(const std::set<TenantId>& active) {
  for (const auto& [id, t] : tenants_) {
    if (!active.count(id)) set_tenant_active(id, false);
  }
  for (TenantId id : active) set_tenant_active(id, true);
}

void FairShare::set_job_active(JobId job, bool active) {
  if (mode_ == Mode::kPerJob) counters_.set_active(job, active);
}

bool FairShare::admit_job(TenantId id, size_t running_jobs, bool overload, double now,
                          double& retry_after_s) {
  retry_after_s = 0;
  if (mode_ != Mode::kPerTenant) return true;
  Tenant& t = tenant(id);
  if (overload && t.limits.max_running_jobs > 0 && running_jobs >= t.limits.max_running_jobs) {
    // A running job frees a place only when it ends: retry after one window.
    retry_after_s = t.limits.submission_window_s;
    ++t.throttle_events;
    return false;
  }
  // Recorded with or without overload (as round starts are), so that the window holds the
  // tenant's recent submissions when an overload begins.
  if (!t.submissions || t.submissions->allow(now, retry_after_s) || !overload) {
    retry_after_s = 0;
    return true;
  }
  ++t.throttle_events;
  return false;
}

std::optional<size_t> FairShare::next_round(const std::vector<WaitingJob>& waiting, bool overload,
                                            double now) {
  std::vector<WaitingJob> allowed;
  std::vector<size_t> index;
  for (size_t i = 0; i < waiting.size(); ++i) {
    if (mode_ == Mode::kPerTenant && overload) {
      Tenant& t = tenant(waiting[i].consumer);
      if (t.round_starts && !t.round_starts->would_allow(now)) {
        // Counted once per held-back wait, and only for a round that could open now.
        if (!t.round_throttled && waiting[i].can_open) ++t.throttle_events;
        t.round_throttled = t.round_throttled || waiting[i].can_open;
        continue;
      }
    }
    allowed.push_back(waiting[i]);
    index.push_back(i);
  }
  if (allowed.empty()) return std::nullopt;
  if (mode_ == Mode::kPerTenant && overload) {
    const size_t first = next_to_open(allowed, counters_);
    if (!allowed[first].fits) return std::nullopt;  // the others wait with it
    return index[first];
  }
  // Only the jobs that can open now compete.
  for (size_t i = allowed.size(); i-- > 0;) {
    if (!allowed[i].can_open) {
      allowed.erase(allowed.begin() + i);
      index.erase(index.begin() + i);
    }
  }
  if (allowed.empty()) return std::nullopt;
  if (mode_ == Mode::kFirstCome) {
    size_t first = 0;
    for (size_t i = 1; i < allowed.size(); ++i) {
      if (allowed[i].job < allowed[first].job) first = i;
    }
    return index[first];
  }
  if (mode_ == Mode::kPerJob) {
    for (WaitingJob& w : allowed) w.consumer = w.job;
  }
  return index[next_to_open(allowed, counters_)];
}

void FairShare::round_opened(TenantId id, JobId job, double now, double expected_client_s,
                             double class_cost) {
  Tenant& t = tenant(id);
  double ignored = 0;
  if (t.round_starts) t.round_starts->allow(now, ignored);
  t.round_throttled = false;
  counters_.charge(consumer(id, job), expected_client_s, class_cost);
}

void FairShare::slots_opened(TenantId id, JobId job, double expected_client_s,
                             double class_cost) {
  counters_.charge(consumer(id, job), expected_client_s, class_cost);
}

void FairShare::round_concluded(TenantId id, JobId job, double expected_client_s, double client_s,
                                double class_cost) {
  tenant(id).client_seconds += client_s;
  counters_.charge(consumer(id, job), client_s - expected_client_s, class_cost);
}

uint64_t FairShare::throttle_events(TenantId id) const {
  auto it = tenants_.find(id);
  return it == tenants_.end() ? 0 : it->second.throttle_events;
}

nlohmann::json FairShare::to_json() const {
  double total = 0;
  for (const auto& [id, t] : tenants_) total += t.client_seconds;
  const nlohmann::json counters = counters_.to_json();
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [id, t] : tenants_) {
    const std::string key = std::to_string(id);
    nlohmann::json entry = {{"client_seconds", t.client_seconds},
                            {"share", total > 0 ? t.client_seconds / total : 0.0},
                            {"throttle_events", t.throttle_events}};
    if (mode_ == Mode::kPerTenant && counters.contains(key)) entry.update(counters[key]);
    out[key] = entry;
  }
  return {{"tenants", out}};
}

Result<TenantLimits> parse_tenant_limits(const nlohmann::json& limits) {
  TenantLimits l;
  ObjectReader r(limits, "limits");
  r.integer("max_running_jobs", l.max_running_jobs)
      .integer("max_submissions", l.max_submissions)
      .number("submission_window_s", l.submission_window_s, 1, 86400)
      .integer("max_round_starts", l.max_round_starts)
      .number("round_window_s", l.round_window_s, 1, 86400);
  FEDCASE_RETURN_IF_ERROR(r.strict_status());
  return l;
}

nlohmann::json tenant_limits_json(const TenantLimits& l) {
  return {{"max_running_jobs", l.max_running_jobs},
          {"max_submissions", l.max_submissions},
          {"submission_window_s", l.submission_window_s},
          {"max_round_starts", l.max_round_starts},
          {"round_window_s", l.round_window_s}};
}

double class_cost(std::vector<double> expected_task_seconds) {
  if (expected_task_seconds.empty()) return 0;
  return percentile(std::move(expected_task_seconds), 0.5);
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
