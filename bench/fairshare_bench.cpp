// Sharing one fleet between tenants' jobs: the real round engine (rounds::JobRuntime, Round)
// and the real sharing decisions (scheduling::FairShare) in virtual time.
//
//   fairshare_bench [--clients N] [--seeds S] [--rounds R] [--clients-per-round K[,K...]]
//                   [--overcommit X] [--a-jobs N] [--min-clients M] [--jitter SIGMA]
//
// Three tenants of weight 1 share N = 500 clients: A submits 10 jobs, B and C one each, all at
// t = 0, A's first. Every job needs R = 20 committed rounds ("time to target" is the time of
// the R-th committed round: nothing is trained). A round opens when at least min_clients (the
// job config's default, K) clients are free and invites up to ceil(K x overcommit) of them (a
// client holds one task at a time across all jobs). Each job size K is run in turn (default
// 120, 200 and 250: 156, 260 and 325 invited, below and above a third of the fleet, so that a
// tenant with one job cannot or can use its equal share); a round closes at the K-th upload or at
// its deadline (the job config's percentile deadline), and a client is free again once it uploaded
// or its round closed. A task takes its expected duration (make_candidate over the client's known
// speeds) times a log-normal jitter. Every scheduling step asks FairShare which waiting job opens
// next, as the round driver does; submissions go through admit_job, a refused one is retried after
// its retry_after.
//
// Per sharing mode, fleet and seed, while all three tenants have jobs running (until one
// tenant's last job reaches its target): each tenant's share of client-seconds (each invitee
// from the open until its upload or the round's close, what round_concluded is charged with)
// and of normalised service (client-seconds / the job's class cost), the fleet's utilisation
// and B's and C's fractions of it; B's and C's time to target, against a baseline run where A
// submits a single job; Jain's index; rounds cut (closed before being filled or due: must be
// 0). A second variant gives B a model 10x as large. The last line of output is one JSON
// object with every figure, the medians over the seeds with their spread, and the targets.

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "rounds/job_config.h"
#include "rounds/job_runtime.h"
#include "scheduling/fair_share.h"
#include "scheduling/rng.h"
#include "scheduling/round_plan.h"
#include "scheduling/selection.h"

namespace {

using fedcase::ClientId;
using fedcase::JobId;
using fedcase::TenantId;
using fedcase::scheduling::ClientProfile;
using fedcase::scheduling::FairShare;
using fedcase::scheduling::Rng;
using Json = nlohmann::ordered_json;
using Mode = FairShare::Mode;
namespace rounds = fedcase::rounds;
namespace scheduling = fedcase::scheduling;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kPi = 3.14159265358979323846;
constexpr TenantId kTenantA = 1, kTenantB = 2, kTenantC = 3;
constexpr TenantId kTenants[] = {kTenantA, kTenantB, kTenantC};
constexpr const char* kTenantNames[] = {"A", "B", "C"};
constexpr size_t kModelParams = 8192;  // 32 KB of floats
constexpr uint64_t kSamplesPerTask = 200;
// Targets for the per-tenant mode.
constexpr double kMinShareOfFair = 0.8;  // of 1/3
constexpr double kMinJain = 0.95;
constexpr double kMaxTimeToTargetRatio = 1.5;

struct Options {
  size_t clients = 500;
  size_t seeds = 3;
  size_t rounds = 20;
  size_t clients_per_round = 120;  // the job size of the current run
  std::vector<size_t> job_sizes = {120, 200, 250};
  double overcommit = 1.3;
  size_t a_jobs = 10;
  size_t min_clients = 0;  // free clients a round needs to open; 0 = K
  double jitter_sigma = 0.3;
};

// A fleet's heterogeneity: log-normal sigmas around a median phone on a slow mobile link.
struct FleetSpec {
  const char* name;
  double compute_sigma;
  double network_sigma;
};
constexpr FleetSpec kFleets[] = {{"moderate", 0.5, 0.6}, {"wide", 1.0, 1.2}};

// B's model is `b_model_factor` times as large as everyone else's.
struct Variant {
  const char* name;
  size_t b_model_factor;
};
constexpr Variant kVariants[] = {{"equal_jobs", 1}, {"b_model_10x", 10}};

constexpr Mode kModes[] = {Mode::kFirstCome, Mode::kPerJob, Mode::kPerTenant};
const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kFirstCome:
      return "first_come";
    case Mode::kPerJob:
      return "per_job";
    case Mode::kPerTenant:
      return "per_tenant";
  }
  return "?";
}

scheduling::TenantLimits tenant_limits() {
  scheduling::TenantLimits limits;
  limits.max_running_jobs = 3;
  limits.max_submissions = 5;
  limits.submission_window_s = 60;
  limits.max_round_starts = 30;
  limits.round_window_s = 60;
  return limits;
}

double lognormal(Rng& rng, double median, double sigma) {
  const double u1 = 1.0 - rng.unit(), u2 = rng.unit();
  const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
  return median * std::exp(sigma * normal);
}

std::vector<ClientProfile> make_fleet(const FleetSpec& spec, size_t clients, uint64_t seed) {
  Rng rng(seed);
  std::vector<ClientProfile> fleet(clients);
  for (size_t i = 0; i < clients; ++i) {
    ClientProfile& p = fleet[i];
    p.id = i + 1;
    p.dataset_size = kSamplesPerTask;
    p.compute_ms_per_sample.fold(lognormal(rng, 20, spec.compute_sigma), 0.3);
    p.download_bytes_per_s.fold(lognormal(rng, 125e3, spec.network_sigma), 0.3);  // 1 Mbit/s
    p.upload_bytes_per_s.fold(lognormal(rng, 62.5e3, spec.network_sigma), 0.3);
    p.storage_read_bytes_per_s.fold(lognormal(rng, 10e6, 0.5), 0.3);
    p.sample_bytes.fold(784, 0.3);
  }
  return fleet;
}

rounds::JobParts job_parts(const Options& options, JobId job, uint64_t seed) {
  const nlohmann::json config = {
      {"name", "job-" + std::to_string(job)},
      {"model", "mlp"},
      {"seed", seed * 1000 + job},
      {"rounds", options.rounds},
      {"clients_per_round", options.clients_per_round},
      {"min_clients", options.min_clients},
      {"selection", {{"policy", "random"}, {"overcommit", options.overcommit}}},
      {"training",
       {{"sample_budget", kSamplesPerTask},
        {"batch_size", 20},
        {"deadline", {{"mode", "percentile"}, {"percentile", 0.9}, {"slack", 1.5}}}}},
      {"aggregation", {{"rule", "fedavg"}}},
      {"server_optimizer", {{"name", "fedavg"}, {"lr", 1.0}}}};
  auto parts = rounds::build_job(config);
  if (!parts.ok()) {
    std::fprintf(stderr, "job config: %s\n", parts.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(parts).value();
}

std::shared_ptr<const rounds::GlobalModel> initial_model(size_t params) {
  fedcase::ModelLayout layout{{{"w", {params}}}};
  return rounds::make_global_model(0, layout, std::vector<float>(params, 0.0f));
}

// What one of the job's tasks is expected to cost over the whole fleet (every client could take
// it), as the coordinator's round driver computes it.
double job_class_cost(const rounds::JobRuntime& job, const std::vector<ClientProfile>& fleet) {
  std::vector<double> seconds;
  for (const ClientProfile& p : fleet) {
    seconds.push_back(
        scheduling::make_candidate(p, true, job.config().training, job.model()->blob.size())
            .expected_duration_s);
  }
  return scheduling::class_cost(std::move(seconds));
}

struct JobSpec {
  JobId id;
  TenantId tenant;
  size_t model_params;
};

// A submits `a_jobs` jobs, then B and C one each; B's and C's ids do not depend on `a_jobs`.
std::vector<JobSpec> submissions(const Options& options, size_t a_jobs, const Variant& variant) {
  std::vector<JobSpec> jobs;
  for (JobId id = 1; id <= a_jobs; ++id) jobs.push_back({id, kTenantA, kModelParams});
  jobs.push_back({options.a_jobs + 1, kTenantB, kModelParams * variant.b_model_factor});
  jobs.push_back({options.a_jobs + 2, kTenantC, kModelParams});
  return jobs;
}

struct Upload {
  double at;
  ClientId client;
};

struct OpenRound {
  rounds::Round round;
  std::vector<Upload> uploads;  // every invitee's, in time order
  size_t next_upload = 0;
  double expected_client_s = 0;
};

struct Job {
  JobSpec spec;
  std::unique_ptr<rounds::JobRuntime> runtime;
  double class_cost = 0;
  size_t invitees = 0;  // of one round
  size_t committed = 0;
  bool admitted = false;
  bool done = false;
  std::optional<OpenRound> round;
};

// Service a tenant received: client-seconds, and the same in the job's class-cost units.
struct Service {
  double client_s = 0;
  double normalised = 0;
};

struct RunResult {
  std::map<TenantId, Service> shared;  // while all three tenants had jobs running
  double contention_end_s = 0;
  Json counters;                                // FairShare's view at the contention end
  std::map<TenantId, double> time_to_target_s;  // of the tenant's last job to reach it
  std::map<TenantId, uint64_t> throttle_events;
  size_t rounds_opened = 0;
  size_t rounds_failed = 0;
  size_t rounds_cut = 0;
};

class Simulation {
 public:
  Simulation(const Options& options, Mode mode, const std::vector<ClientProfile>& fleet,
             const std::vector<JobSpec>& jobs, uint64_t seed)
      : options_(options),
        fleet_(fleet),
        share_(mode),
        busy_(fleet.size(), false),
        free_(fleet.size()),
        jitter_(seed ^ 0x5bd1e995u) {
    for (TenantId tenant : kTenants) share_.set_tenant(tenant, 1, tenant_limits());
    for (const JobSpec& spec : jobs) add_job(spec, seed);
  }

  RunResult run() {
    while (!tenant_done(kTenantB) || !tenant_done(kTenantC)) {
      now_ = next_event_time();
      if (now_ == kInf) {
        std::fprintf(stderr, "stalled: no event left before B and C reached their targets\n");
        std::exit(1);
      }
      for (Job& job : jobs_) deliver_uploads(job);
      for (Job& job : jobs_) conclude_if_due(job);
      if (!contention_over_ && any_tenant_done()) end_contention();
      retry_submissions();
      open_rounds();
    }
    for (TenantId tenant : kTenants)
      result_.throttle_events[tenant] = share_.throttle_events(tenant);
    return result_;
  }

 private:
  void add_job(const JobSpec& spec, uint64_t seed) {
    Job job;
    job.spec = spec;
    auto runtime =
        rounds::JobRuntime::create(job_parts(options_, spec.id, seed),
                                   initial_model(spec.model_params), nlohmann::json::object(), "");
    if (!runtime.ok()) {
      std::fprintf(stderr, "job %llu: %s\n", (unsigned long long)spec.id,
                   runtime.status().to_string().c_str());
      std::exit(1);
    }
    job.runtime = std::move(runtime).value();
    job.class_cost = job_class_cost(*job.runtime, fleet_);
    job.invitees = scheduling::invited_count(options_.clients_per_round, options_.overcommit);
    zeros_.resize(std::max(zeros_.size(), spec.model_params), 0.0f);
    jobs_.push_back(std::move(job));
    queued_[spec.tenant].push_back(jobs_.size() - 1);
    next_submission_[spec.tenant] = 0;
  }

  bool tenant_done(TenantId tenant) const {
    for (const Job& job : jobs_) {
      if (job.spec.tenant == tenant && !job.done) return false;
    }
    return true;
  }

  bool any_tenant_done() const {
    return std::any_of(std::begin(kTenants), std::end(kTenants),
                       [this](TenantId tenant) { return tenant_done(tenant); });
  }

  size_t running_jobs(TenantId tenant) const {
    size_t n = 0;
    for (const Job& job : jobs_) n += job.spec.tenant == tenant && job.admitted && !job.done;
    return n;
  }

  bool waiting(const Job& job) const { return job.admitted && !job.done && !job.round; }

  size_t clients_wanted() const {
    size_t wanted = 0;
    for (const Job& job : jobs_) wanted += waiting(job) ? job.invitees : 0;
    return wanted;
  }

  double next_event_time() const {
    double next = kInf;
    for (const Job& job : jobs_) {
      if (!job.round) continue;
      const OpenRound& open = *job.round;
      next = std::min(next, open.round.deadline());
      if (open.next_upload < open.uploads.size()) {
        next = std::min(next, open.uploads[open.next_upload].at);
      }
    }
    for (const auto& [tenant, queue] : queued_) {
      if (!queue.empty()) next = std::min(next, next_submission_.at(tenant));
    }
    return next;
  }

  void take_client(ClientId client) {
    busy_[client - 1] = true;
    --free_;
  }
  void release_client(ClientId client) {
    busy_[client - 1] = false;
    ++free_;
  }

  // Uploads due by now are reserved, folded and accepted as the coordinator does; those the
  // round no longer wants (filled, past its deadline) are dropped and freed at its close.
  void deliver_uploads(Job& job) {
    if (!job.round) return;
    OpenRound& open = *job.round;
    while (open.next_upload < open.uploads.size() && open.uploads[open.next_upload].at <= now_) {
      const Upload upload = open.uploads[open.next_upload++];
      auto aggregate = open.round.reserve(upload.client, upload.at);
      if (!aggregate.ok()) continue;
      const scheduling::ClientTask& task = *open.round.task_for(upload.client);
      if (!(*aggregate)->add(zeros_.data(), job.spec.model_params, double(task.samples)).ok()) {
        open.round.release(upload.client);
        continue;
      }
      scheduling::RoundReport report;
      report.samples = task.samples;
      report.loss_sum = double(task.samples);
      report.loss_sq_sum = double(task.samples);
      open.round.accept(upload.client, report, upload.at);
      release_client(upload.client);
    }
  }

  void conclude_if_due(Job& job) {
    if (!job.round || !job.round->round.due(now_)) return;
    rounds::Round& round = job.round->round;
    const double used = round.client_seconds(now_);
    const rounds::Conclusion conclusion = job.runtime->conclude(round, now_);
    result_.rounds_cut += conclusion.closed_at < round.deadline() && !round.filled();
    for (const scheduling::ClientTask& task : round.tasks()) {
      if (!round.accepted_updates().count(task.client)) release_client(task.client);
    }
    share_.round_concluded(job.spec.tenant, job.spec.id, job.round->expected_client_s, used,
                           job.class_cost);
    if (!contention_over_) add_service(job, used);
    job.round.reset();
    if (conclusion.state != fedcase::RoundState::kCommitted) {
      ++result_.rounds_failed;
      return;
    }
    job.runtime->adopt(conclusion);
    if (++job.committed == options_.rounds) finish(job);
  }

  void add_service(const Job& job, double client_s) {
    Service& service = result_.shared[job.spec.tenant];
    service.client_s += client_s;
    service.normalised += client_s / job.class_cost;
  }

  void finish(Job& job) {
    job.done = true;
    result_.time_to_target_s[job.spec.tenant] = now_;
    share_.set_job_active(job.spec.id, false);
    if (running_jobs(job.spec.tenant) == 0) share_.set_tenant_active(job.spec.tenant, false);
  }

  // A tenant's last job reached its target: the service of rounds still open counts up to now.
  void end_contention() {
    for (const Job& job : jobs_) {
      if (job.round) add_service(job, job.round->round.client_seconds(now_));
    }
    contention_over_ = true;
    result_.contention_end_s = now_;
    result_.counters = share_.to_json();
  }

  // Each tenant submits its queued jobs in order; a refused one is retried after retry_after.
  void retry_submissions() {
    for (auto& [tenant, queue] : queued_) {
      while (!queue.empty() && next_submission_[tenant] <= now_) {
        Job& job = jobs_[queue.front()];
        double retry_after = 0;
        const bool overload = scheduling::overloaded(clients_wanted() + job.invitees, free_);
        if (!share_.admit_job(tenant, running_jobs(tenant), overload, now_, retry_after)) {
          next_submission_[tenant] = now_ + retry_after;
          break;
        }
        job.admitted = true;
        share_.set_job_active(job.spec.id, true);
        share_.set_tenant_active(tenant, true);
        queue.pop_front();
      }
    }
  }

  // The round driver's step: while jobs that could open a round remain, FairShare says which
  // opens next over the free clients.
  void open_rounds() {
    while (true) {
      std::vector<scheduling::WaitingJob> candidates;
      std::vector<Job*> candidate_jobs;
      for (Job& job : jobs_) {
        if (!waiting(job)) continue;
        candidates.push_back({job.spec.id, job.spec.tenant,
                              free_ >= job.runtime->config().min_clients, free_ >= job.invitees});
        candidate_jobs.push_back(&job);
      }
      if (candidates.empty()) return;
      const bool overload = scheduling::overloaded(clients_wanted(), free_);
      const std::optional<size_t> next = share_.next_round(candidates, overload, now_);
      if (!next) return;
      open_round(*candidate_jobs[*next]);
    }
  }

  void open_round(Job& job) {
    std::vector<rounds::PoolClient> pool;
    pool.reserve(fleet_.size());
    for (size_t i = 0; i < fleet_.size(); ++i) pool.push_back({&fleet_[i], !busy_[i]});
    auto opened = job.runtime->open_round(pool, now_);
    if (!opened.ok() || !opened->has_value()) {
      std::fprintf(stderr, "job %llu could not open a round with %zu clients free\n",
                   (unsigned long long)job.spec.id, free_);
      std::exit(1);
    }
    OpenRound open{std::move(**opened), {}, 0, 0};
    for (const scheduling::ClientTask& task : open.round.tasks()) {
      take_client(task.client);
      open.round.hand_out(task.client, now_);
      const double duration = lognormal(jitter_, task.expected_duration_s, options_.jitter_sigma);
      open.uploads.push_back({now_ + duration, task.client});
    }
    std::sort(open.uploads.begin(), open.uploads.end(),
              [](const Upload& a, const Upload& b) { return a.at < b.at; });
    open.expected_client_s = open.round.expected_client_seconds();
    share_.round_opened(job.spec.tenant, job.spec.id, now_, open.expected_client_s, job.class_cost);
    job.round.emplace(std::move(open));
    ++result_.rounds_opened;
  }

  const Options& options_;
  const std::vector<ClientProfile>& fleet_;
  FairShare share_;
  std::vector<Job> jobs_;
  std::map<TenantId, std::deque<size_t>> queued_;  // indices into jobs_, not yet admitted
  std::map<TenantId, double> next_submission_;
  std::vector<bool> busy_;
  size_t free_;
  Rng jitter_;
  std::vector<float> zeros_;  // every upload's update: folding costs what it costs, changes nothing
  double now_ = 0;
  bool contention_over_ = false;
  RunResult result_;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Each tenant's fraction of the total.
std::vector<double> shares(const RunResult& run, double Service::*field) {
  double total = 0;
  for (TenantId tenant : kTenants) total += run.shared.at(tenant).*field;
  std::vector<double> out;
  for (TenantId tenant : kTenants)
    out.push_back(total > 0 ? run.shared.at(tenant).*field / total : 0);
  return out;
}

// The fraction of the fleet's client-seconds that `tenant`'s rounds (all tenants' for 0) used
// while all tenants had jobs.
double fleet_fraction(const RunResult& run, size_t clients, TenantId tenant = 0) {
  double used = 0;
  for (const auto& [id, service] : run.shared)
    used += tenant == 0 || id == tenant ? service.client_s : 0;
  return used / (double(clients) * run.contention_end_s);
}

void add_shares(Json& figures, const std::string& kind, const std::vector<double>& share) {
  for (size_t t = 0; t < share.size(); ++t) figures[kind + "_share_" + kTenantNames[t]] = share[t];
  figures["jain_" + kind] = scheduling::jain_index(share);
}

// The figures of one seed: the contended run against the run where A submits a single job.
Json seed_figures(const RunResult& run, const RunResult& baseline, size_t clients) {
  Json figures = Json::object();
  add_shares(figures, "client_s", shares(run, &Service::client_s));
  add_shares(figures, "service", shares(run, &Service::normalised));
  for (TenantId tenant : {kTenantB, kTenantC}) {
    const std::string name = kTenantNames[tenant - 1];
    const double tta = run.time_to_target_s.at(tenant);
    const double base = baseline.time_to_target_s.at(tenant);
    figures["tta_" + name + "_s"] = tta;
    figures["baseline_tta_" + name + "_s"] = base;
    figures["tta_ratio_" + name] = tta / base;
    figures["fleet_fraction_" + name] = fleet_fraction(run, clients, tenant);
    figures["baseline_fleet_fraction_" + name] = fleet_fraction(baseline, clients, tenant);
  }
  figures["contention_end_s"] = run.contention_end_s;
  figures["utilisation"] = fleet_fraction(run, clients);
  figures["baseline_utilisation"] = fleet_fraction(baseline, clients);
  for (TenantId tenant : kTenants) {
    figures[std::string("throttle_events_") + kTenantNames[tenant - 1]] =
        run.throttle_events.at(tenant);
  }
  figures["rounds_opened"] = run.rounds_opened;
  figures["rounds_failed"] = run.rounds_failed;
  figures["rounds_cut"] = run.rounds_cut + baseline.rounds_cut;
  return figures;
}

// {"<figure>": {"median", "min", "max"}} over the seeds.
Json summarise(const std::vector<Json>& per_seed) {
  Json summary = Json::object();
  for (const auto& item : per_seed.front().items()) {
    std::vector<double> values;
    for (const Json& seed : per_seed) values.push_back(seed[item.key()].get<double>());
    summary[item.key()] = {{"median", median(values)},
                           {"min", *std::min_element(values.begin(), values.end())},
                           {"max", *std::max_element(values.begin(), values.end())}};
  }
  return summary;
}

// Which shares a variant's targets are judged on: client-seconds when every job costs the same,
// normalised service when B's jobs cost more (what the counters equalise).
const char* judged_kind(const Variant& variant) {
  return variant.b_model_factor == 1 ? "client_s" : "service";
}

// The targets, judged on the medians, with shares of `kind` ("client_s" or "service").
Json judge(const Json& summary, const std::string& kind) {
  auto med = [&](const std::string& key) { return summary[key]["median"].get<double>(); };
  const double min_share = kMinShareOfFair / 3;
  Json targets = {{"share_B", med(kind + "_share_B") >= min_share},
                  {"share_C", med(kind + "_share_C") >= min_share},
                  {"jain", med("jain_" + kind) >= kMinJain},
                  {"tta_ratio_B", med("tta_ratio_B") <= kMaxTimeToTargetRatio},
                  {"tta_ratio_C", med("tta_ratio_C") <= kMaxTimeToTargetRatio},
                  {"no_cut", med("rounds_cut") == 0}};
  bool all = true;
  for (const auto& item : targets.items()) all = all && item.value().get<bool>();
  targets["all"] = all;
  return targets;
}

void print_row(const Variant& variant, const FleetSpec& fleet, Mode mode, const Json& summary,
               const Json& targets) {
  auto med = [&](const char* key) { return summary[key]["median"].get<double>(); };
  std::printf(
      "%-12s %-9s %-11s client-s A %.3f B %.3f C %.3f jain %.3f | service B %.3f C %.3f jain "
      "%.3f | tta B %.2fx C %.2fx | cut %.0f | targets (%s) %s\n",
      variant.name, fleet.name, mode_name(mode), med("client_s_share_A"), med("client_s_share_B"),
      med("client_s_share_C"), med("jain_client_s"), med("service_share_B"), med("service_share_C"),
      med("jain_service"), med("tta_ratio_B"), med("tta_ratio_C"), med("rounds_cut"),
      judged_kind(variant), targets["all"].get<bool>() ? "met" : "MISSED");
}

RunResult run_once(const Options& options, Mode mode, const std::vector<ClientProfile>& fleet,
                   const std::vector<JobSpec>& jobs, uint64_t seed) {
  return Simulation(options, mode, fleet, jobs, seed).run();
}

Json run_mode(const Options& options, const Variant& variant, const FleetSpec& spec, Mode mode) {
  std::vector<Json> per_seed;
  for (uint64_t seed = 1; seed <= options.seeds; ++seed) {
    const std::vector<ClientProfile> fleet = make_fleet(spec, options.clients, seed);
    const RunResult run =
        run_once(options, mode, fleet, submissions(options, options.a_jobs, variant), seed);
    const RunResult baseline =
        run_once(options, mode, fleet, submissions(options, 1, variant), seed);
    per_seed.push_back(seed_figures(run, baseline, options.clients));
    std::fprintf(stderr, "  %s %s %s seed %llu: B share %.3f, tta B %.2fx C %.2fx\n", variant.name,
                 spec.name, mode_name(mode), (unsigned long long)seed,
                 per_seed.back()["client_s_share_B"].get<double>(),
                 per_seed.back()["tta_ratio_B"].get<double>(),
                 per_seed.back()["tta_ratio_C"].get<double>());
  }
  const Json summary = summarise(per_seed);
  Json targets = {{"client_s", judge(summary, "client_s")}, {"service", judge(summary, "service")}};
  print_row(variant, spec, mode, summary, targets[judged_kind(variant)]);
  return {{"median", summary}, {"per_seed", per_seed}, {"targets", targets}};
}

Json scenario_json(const Options& options) {
  Json fleets = Json::array();
  for (const FleetSpec& f : kFleets) {
    fleets.push_back(
        {{"name", f.name}, {"compute_sigma", f.compute_sigma}, {"network_sigma", f.network_sigma}});
  }
  return {{"clients", options.clients},
          {"seeds", options.seeds},
          {"rounds_to_target", options.rounds},
          {"time_to_target", "time of the R-th committed round (no training)"},
          {"job_sizes", options.job_sizes},
          {"overcommit", options.overcommit},
          {"a_jobs", options.a_jobs},
          {"min_clients", options.min_clients > 0 ? Json(options.min_clients) : Json("K")},
          {"jitter_sigma", options.jitter_sigma},
          {"model_params", kModelParams},
          {"samples_per_task", kSamplesPerTask},
          {"tenant_limits", scheduling::tenant_limits_json(tenant_limits())},
          {"fleets", fleets}};
}

bool parse_args(int argc, char** argv, Options& options) {
  const std::map<std::string, size_t*> counts = {{"--clients", &options.clients},
                                                 {"--seeds", &options.seeds},
                                                 {"--rounds", &options.rounds},
                                                 {"--a-jobs", &options.a_jobs},
                                                 {"--min-clients", &options.min_clients}};
  const std::map<std::string, double*> reals = {{"--overcommit", &options.overcommit},
                                                {"--jitter", &options.jitter_sigma}};
  for (int i = 1; i + 1 < argc; i += 2) {
    char* end = nullptr;
    if (std::string(argv[i]) == "--clients-per-round") {
      // Distinct positive sizes, comma-separated.
      options.job_sizes.clear();
      end = argv[i + 1];
      do {
        if (*end == ',') ++end;
        if (!std::isdigit(static_cast<unsigned char>(*end))) return false;
        const size_t size = std::strtoull(end, &end, 10);
        if (std::count(options.job_sizes.begin(), options.job_sizes.end(), size)) return false;
        options.job_sizes.push_back(size);
      } while (*end == ',');
    } else if (counts.count(argv[i])) {
      *counts.at(argv[i]) = std::strtoull(argv[i + 1], &end, 10);
    } else if (reals.count(argv[i])) {
      *reals.at(argv[i]) = std::strtod(argv[i + 1], &end);
    }
    if (end == nullptr || *end != '\0') return false;
  }
  return argc % 2 == 1 && options.clients > 0 && options.seeds > 0 && options.rounds > 0 &&
         !options.job_sizes.empty() &&
         std::find(options.job_sizes.begin(), options.job_sizes.end(), 0) ==
             options.job_sizes.end() &&
         options.a_jobs > 0 && options.overcommit >= 1 && options.jitter_sigma >= 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_args(argc, argv, options)) {
    std::fprintf(stderr,
                 "usage: fairshare_bench [--clients N] [--seeds S] [--rounds R] "
                 "[--clients-per-round K[,K...]] [--overcommit X] [--a-jobs N] [--min-clients M] "
                 "[--jitter SIGMA]\n");
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  Json job_sizes = Json::object();
  for (size_t size : options.job_sizes) {
    Options sized = options;
    sized.clients_per_round = size;
    Json variants = Json::object();
    bool per_tenant_met = true;
    for (const Variant& variant : kVariants) {
      Json fleets = Json::object();
      for (const FleetSpec& fleet : kFleets) {
        Json modes = Json::object();
        for (Mode mode : kModes) modes[mode_name(mode)] = run_mode(sized, variant, fleet, mode);
        per_tenant_met = per_tenant_met &&
                         modes["per_tenant"]["targets"][judged_kind(variant)]["all"].get<bool>();
        fleets[fleet.name] = modes;
      }
      variants[variant.name] = fleets;
    }
    // Whether one round of one job can hold a tenant's equal share of the fleet at all.
    const size_t invited = scheduling::invited_count(size, options.overcommit);
    const double of_equal_share =
        double(invited) / (double(options.clients) / double(std::size(kTenants)));
    std::printf(
        "K = %zu (%zu invited: %.2f of a tenant's equal share of the fleet): per-tenant "
        "targets %s\n",
        size, invited, of_equal_share, per_tenant_met ? "met" : "MISSED");
    job_sizes[std::to_string(size)] = {{"clients_per_round", size},
                                       {"invited_per_round", invited},
                                       {"invited_of_equal_share", of_equal_share},
                                       {"variants", variants},
                                       {"per_tenant_targets_met", per_tenant_met}};
  }
  const double wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("(%.1f s)\n", wall_s);
  std::cout << Json{{"bench", "fairshare"},
                    {"scenario", scenario_json(options)},
                    {"job_sizes", job_sizes},
                    {"wall_s", wall_s}}
                   .dump()
            << std::endl;
  return 0;
}
