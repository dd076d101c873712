#pragma once
// Sharing one fleet fairly between tenants (design.md, "Fair sharing between tenants"), after
// FairServe's weighted service counters: each tenant's counter grows with the service its jobs
// receive, normalised by what its kind of work costs and by its weight; when several want
// clients at once the least-served chooses first; a tenant that becomes active again starts
// at the least-served active tenant's counter, so idle time banks no credit. Throttling
// applies only under overload and to whole interactions (here a round start or a job
// submission), never to work already started.
//
// Pure logic over plain values; times are arguments. Not thread-safe: the owner serialises.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <vector>

#include "common/ids.h"
#include "common/status.h"

namespace fedcase::scheduling {

// The counters of whoever shares the fleet: tenants (or, for comparison, single jobs).
class ServiceCounters {
 public:
  // Adds a consumer or changes its weight (> 0; a weight-2 tenant is entitled to twice the
  // service of a weight-1 tenant). A new consumer starts inactive at counter 0.
  void set_weight(uint64_t id, double weight);
  // Marks whether `id` wants service (has a running job). Becoming active lifts its counter
  // to the smallest counter of the other active consumers when that is higher, so credit
  // cannot be saved up while idle. Unknown ids are added with weight 1.
  void set_active(uint64_t id, bool active);
  // Charges `client_seconds` of service (>= 0) for work whose class costs `class_cost`
  // (expected client-seconds of one task of the job, > 0): the counter grows by
  // client_seconds / (class_cost x weight), i.e. in weighted tasks. Negative amounts (a
  // correction of an earlier estimate) are allowed; the counter never goes below 0.
  void charge(uint64_t id, double client_seconds, double class_cost);

  double counter(uint64_t id) const;  // 0 for an unknown id
  // {"<id>": {"weight", "counter", "active"}}, for the admin API.
  nlohmann::json to_json() const;

 private:
  struct Entry {
    double weight = 1;
    double counter = 0;
    bool active = false;
  };
  std::map<uint64_t, Entry> entries_;
};

// A running job without an open round, whose counter it is charged to (its tenant; or the job
// itself, to compare with a per-job fair share), and how the free clients stand for it.
struct WaitingJob {
  JobId job = 0;
  uint64_t consumer = 0;
  bool can_open = true;  // enough free clients for a round now (the job's min_clients)
  bool fits = true;      // its whole invitation, ceil(K x overcommit), is free now
};
// The index in `waiting` (not empty) of the job to open first: the one whose consumer is
// least served, ties by job id. After opening it, the caller charges the round's expected
// service (invited clients x their expected task seconds) so that the next pick sees it.
size_t next_to_open(const std::vector<WaitingJob>& waiting, const ServiceCounters& counters);

// At most `max_events` events in any `window_s` seconds (a sliding window).
class SlidingWindowLimit {
 public:
  SlidingWindowLimit(size_t max_events, double window_s);
  // Whether one more event at `now` fits; if it does it is recorded. When it does not,
  // `retry_after_s` says when the oldest event leaves the window.
  bool allow(double now, double& retry_after_s);
  // Whether an event at `now` would fit, recording nothing.
  bool would_allow(double now);
  // When the oldest event leaves the window (-infinity for an empty window).
  double oldest_leaves() const;

 private:
  void expire(double now);
  size_t max_events_;
  double window_s_;
  std::deque<double> events_;
};

// The fleet is overloaded when the clients that jobs want for rounds they would open now
// exceed the free available clients: only then are tenants throttled.
inline bool overloaded(size_t clients_wanted, size_t clients_free) {
  return clients_wanted > clients_free;
}

// A tenant's throttles; each applies only while the fleet is overloaded. 0 = no limit.
struct TenantLimits {
  size_t max_running_jobs = 0;  // job submissions beyond it are refused
  size_t max_submissions = 0;   // job submissions per submission_window_s
  double submission_window_s = 60;
  size_t max_round_starts = 0;  // round openings per round_window_s
  double round_window_s = 60;
};

// Reads a tenant's limits ({"max_running_jobs", ...}, as tenant_limits_json writes them);
// kInvalidArgument naming a bad field or an unknown key.
Result<TenantLimits> parse_tenant_limits(const nlohmann::json& limits);
nlohmann::json tenant_limits_json(const TenantLimits& limits);

// How the fleet is shared between jobs that want clients at the same time: the order in which
// their rounds open, what each tenant is charged, and when a tenant is throttled. The
// coordinator's round driver and fairshare_bench decide through this one class.
class FairShare {
 public:
  enum class Mode {
    kFirstCome,  // jobs in submission order (lowest job id first), nobody throttled
    kPerJob,     // least-served job first (a counter per job), nobody throttled
    kPerTenant,  // least-served tenant first, weighted by tenant, throttled under overload
  };
  explicit FairShare(Mode mode = Mode::kPerTenant) : mode_(mode) {}

  // Adds or changes a tenant. Unknown tenants have weight 1 and no limits.
  void set_tenant(TenantId tenant, double weight, TenantLimits limits);
  // Whether `tenant` has running jobs (see ServiceCounters::set_active); for kPerJob, call
  // set_job_active for each job instead.
  void set_tenant_active(TenantId tenant, bool active);
  // Exactly the tenants in `active` are active: the others are deactivated first, so that a
  // tenant lifted now is lifted against the tenants that stay active.
  void set_active_tenants(const std::set<TenantId>& active);
  void set_job_active(JobId job, bool active);

  // A job submission by `tenant`, which has `running_jobs` running: refused (with when to
  // retry) only under overload and beyond the tenant's running-job cap or submission window.
  // An admitted submission is recorded in the window.
  bool admit_job(TenantId tenant, size_t running_jobs, bool overload, double now,
                 double& retry_after_s);
  // Of the waiting jobs (each WaitingJob's consumer is the job's tenant), the index of the one
  // to open a round now, or nullopt for none. Without overload, and in the other modes: the
  // least-served (kFirstCome: the lowest job id) of those that can open. kPerTenant under
  // overload: tenants over their round-start window wait (counted once per held-back wait),
  // and the least-served remaining job is the one to open, once its whole invitation fits;
  // until then every other job waits too, so the clients that free up gather for it instead
  // of going, one round after another, to tenants that have had more. Call round_opened for
  // the round that does open.
  std::optional<size_t> next_round(const std::vector<WaitingJob>& waiting, bool overload,
                                   double now);
  // A round of `tenant`'s `job` opened at `now`, expected to occupy `expected_client_s`
  // client-seconds (the sum of its invitees' expected task seconds); `class_cost` is the
  // expected seconds of one of its tasks. Charged at once, so the next pick sees it.
  void round_opened(TenantId tenant, JobId job, double now, double expected_client_s,
                    double class_cost);
  // An asynchronous job handed out tasks for free slots of its open buffer, expected to occupy
  // `expected_client_s` client-seconds: charged at once, as a round's open is, but no round
  // starts (a started buffer is never throttled). The buffer's round_concluded corrects the
  // charges of the slots it handed out.
  void slots_opened(TenantId tenant, JobId job, double expected_client_s, double class_cost);
  // The round concluded after consuming `client_s` client-seconds (each invitee from the open
  // until its update or the round's close): the charge is corrected to what it really used.
  void round_concluded(TenantId tenant, JobId job, double expected_client_s, double client_s,
                       double class_cost);

  // The earliest time after `now` at which a tenant whose round start next_round held back
  // gets one again (its round-start window frees), or nullopt when none waits for that.
  std::optional<double> throttle_ends(double now) const;

  // Throttle events of a tenant (also in to_json).
  uint64_t throttle_events(TenantId tenant) const;
  // {"tenants": {"<id>": {"weight", "counter", "active", "client_seconds", "share",
  // "throttle_events"}}}: share is the tenant's fraction of all client-seconds consumed.
  nlohmann::json to_json() const;

 private:
  struct Tenant {
    TenantLimits limits;
    double client_seconds = 0;
    uint64_t throttle_events = 0;
    bool round_throttled = false;  // a round start is being held back
    std::optional<SlidingWindowLimit> submissions, round_starts;
  };
  Tenant& tenant(TenantId id);
  uint64_t consumer(TenantId tenant, JobId job) const;

  Mode mode_;
  ServiceCounters counters_;  // per tenant (kPerTenant) or per job (kPerJob)
  std::map<TenantId, Tenant> tenants_;
};

// The cost of a job's class of work, what its tenant's charges are divided by: the median
// expected seconds of one of its tasks over the clients that could take it (its model bytes
// moved and its sample budget computed and read); 0 when there are none (nothing is charged).
double class_cost(std::vector<double> expected_task_seconds);

// Jain's fairness index of `shares` (1 = equal; 1/n = one takes all); 1 for no shares.
double jain_index(const std::vector<double>& shares);

}  // namespace fedcase::scheduling
