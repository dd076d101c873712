// The coordinator's wiring: its state (coordinator_state.h) made and recovered, the driver
// started and stopped, callers identified, the database probed, the gauges collected. The
// operations themselves: client_api.cpp and admin_api.cpp.

#include "server/core/coordinator.h"

#include <unistd.h>

#include <cctype>
#include <cstring>

#include "common/crypto.h"
#include "common/log.h"
#include "server/core/base/timed_store.h"
#include "server/core/coordinator_state.h"
#include "server/core/recovery.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

// "<hostname>-<pid>": distinct for every process of a machine, and between machines.
std::string default_replica_id() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::strcpy(host, "host");
  std::string id;
  for (const char* c = host; *c != '\0' && id.size() < 48; ++c) {
    const bool plain = std::isalnum(static_cast<unsigned char>(*c)) || *c == '.' || *c == '-';
    id += plain ? *c : '_';
  }
  return id + "-" + std::to_string(getpid());
}

scheduling::ProfileParams profile_params(const CoordinatorConfig& c) {
  scheduling::ProfileParams p;
  p.offline_gap_s = c.client_timeout_s;
  return p;
}

std::unique_ptr<RoundReplication> replication_for(const CoordinatorConfig& config,
                                                  storage::Store& store,
                                                  const std::string& replica) {
  if (config.lease_s <= 0) return local_replication(store);
  return std::make_unique<SharedReplication>(store, replica, config.lease_s);
}

}  // namespace

Status job_not_found(JobId id) { return not_found("job " + std::to_string(id) + " not found"); }

Coordinator::State::State(const CoordinatorConfig& c, std::unique_ptr<storage::Store> s,
                          std::unique_ptr<ModelEvaluator> e, Clock k)
    : config(c),
      replica_id(c.replica_id.empty() ? default_replica_id() : c.replica_id),
      store(timed_store(std::move(s), metrics)),
      clock(std::move(k)),
      clients(*store, profile_params(c), [this] { driver.wake(); }),
      tenants(*store),
      jobs(*store),
      evaluator(std::move(e)),
      secure(metrics, [this] { driver.wake(); }),
      replication(replication_for(c, *store, replica_id)),
      driver(jobs, clients, tenants, *store, *replication, *evaluator, tasks_ready, secure, metrics,
             clock),
      collector(metrics.add_collector([this](Metrics& m) { collect(m); })) {}

Coordinator::State::~State() {
  if (wakeups) wakeups->stop();
  driver.stop();
  evaluator.reset();
}

void Coordinator::State::collect(Metrics& m) {
  const ClientRegistry::Census census = clients.census(clock());
  m.set(metric::kClientsRegistered, {}, double(census.registered));
  m.set(metric::kClientsConnected, {}, double(census.available));
  m.set_count(metric::kClientRowsRead, {}, double(clients.rows_read()));
  std::map<std::string, double> by_state;
  for (JobState state :
       {JobState::kRunning, JobState::kPaused, JobState::kCancelled, JobState::kFinished}) {
    by_state[state_name(state)] = 0;
  }
  std::vector<std::pair<std::string, double>> accuracy, epsilon;
  double owned = 0;
  jobs.update_each([&](const JobEntry& job, const JobStatus& status) {
    by_state[state_name(status.state)] += 1;
    owned += status.owned ? 1 : 0;
    if (status.last_accuracy) accuracy.emplace_back(std::to_string(job.id), *status.last_accuracy);
    if (status.privacy.is_object() && status.privacy.value("epsilon", json()).is_number()) {
      epsilon.emplace_back(std::to_string(job.id), status.privacy["epsilon"].get<double>());
    }
  });
  for (const auto& [state, count] : by_state) m.set(metric::kJobs, {{"state", state}}, count);
  m.set(metric::kJobsOwned, {}, owned);
  m.clear(metric::kJobTestAccuracy);
  for (const auto& [job, value] : accuracy) m.set(metric::kJobTestAccuracy, {{"job", job}}, value);
  m.clear(metric::kJobPrivacyEpsilon);
  for (const auto& [job, value] : epsilon) m.set(metric::kJobPrivacyEpsilon, {{"job", job}}, value);
}

Result<JobEntry*> Coordinator::State::find_job(JobId id, const Scope& scope) {
  if (JobEntry* job = jobs.find(id, scope)) return job;
  if (!ownership || jobs.has(id)) return job_not_found(id);
  auto stored = store->get_job(id);
  if (!stored.ok()) {
    return stored.status().code() == Code::kNotFound ? job_not_found(id) : stored.status();
  }
  if (scope && stored->tenant != *scope) return job_not_found(id);
  return not_followed_yet("job " + std::to_string(id));
}

void Coordinator::State::catch_up() {
  if (ownership) ownership->wake();
  replication->wake();
  driver.wake();
}

Status Coordinator::State::not_followed_yet(const std::string& what) {
  catch_up();
  return unavailable(what + " is not followed on this replica yet; retry shortly");
}

Coordinator::Coordinator(std::unique_ptr<State> state) : state_(std::move(state)) {}

Coordinator::~Coordinator() = default;

Result<std::unique_ptr<Coordinator>> Coordinator::open(const CoordinatorConfig& config,
                                                       std::unique_ptr<storage::Store> store,
                                                       std::unique_ptr<ModelEvaluator> evaluator,
                                                       Clock clock) {
  if (!store || !evaluator) return invalid_argument("a coordinator needs a store and an evaluator");
  auto state =
      std::make_unique<State>(config, std::move(store), std::move(evaluator), std::move(clock));
  State& s = *state;
  const CoordinatorParts parts{s.config, *s.store, s.clients, s.tenants,
                               s.jobs,   s.driver, s.metrics, s.clock};
  FEDCASE_RETURN_IF_ERROR(recover(parts));
  if (config.lease_s > 0) {
    s.ownership = std::make_unique<Ownership>(parts, s.replica_id);
    s.driver.set_pass([&ownership = *s.ownership](double now) { return ownership.pass(now); });
    // A wake-up (a job created, a lease changed, a round opened, filled, closed or committed,
    // a partial or a stage message written) makes the next tick read what it is about.
    s.wakeups = std::make_unique<WakeupThread>(
        *s.store, [&s] { s.catch_up(); },
        [&s] {
          s.ownership->clients_changed();
          s.driver.wake();
        });
    s.token_lookups = std::make_unique<TokenLookups>(
        [&clients = s.clients](const std::string& hash) { return clients.learn(hash); });
    log_info("replica " + s.replica_id + ": drives the jobs whose lease it holds (" +
             std::to_string(config.lease_s) + " s leases)");
  }
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(state)));
}

const CoordinatorConfig& Coordinator::config() const { return state_->config; }

Metrics& Coordinator::metrics() { return state_->metrics; }

const std::string& Coordinator::replica_id() const { return state_->replica_id; }

Status Coordinator::database_health() {
  constexpr auto kProbeEvery = std::chrono::seconds(1);
  State& s = *state_;
  {
    MutexLock lock(s.health_mu);
    const auto now = std::chrono::steady_clock::now();
    const bool fresh = s.health_checked_at && now - *s.health_checked_at < kProbeEvery;
    if (fresh || s.health_probing) return s.health;
    s.health_probing = true;
  }
  Status probed = s.store->ping();
  MutexLock lock(s.health_mu);
  s.health_probing = false;
  s.health_checked_at = std::chrono::steady_clock::now();
  s.health = probed;
  return probed;
}

void Coordinator::start_driver() { state_->driver.start(); }
void Coordinator::stop_driver() { state_->driver.stop(); }
void Coordinator::tick() { state_->driver.tick(); }
void Coordinator::conclude_rounds() {
  state_->driver.stop();
  state_->driver.conclude_all();
  if (state_->ownership) state_->ownership->release_all();
}

Caller Coordinator::identify(std::string_view token) const {
  State& s = *state_;
  if (token.empty()) return {};
  if (constant_time_equal(token, s.config.admin_token)) return {Role::kAdmin, 0};
  if (constant_time_equal(token, s.config.enrollment_token)) return {Role::kEnrollment, 0};
  if (!s.config.metrics_token.empty() && constant_time_equal(token, s.config.metrics_token)) {
    return {Role::kMetrics, 0};
  }
  const std::string hash = sha256_hex(token);
  if (auto client = s.clients.identify(hash)) return {Role::kClient, *client, 0};
  if (auto tenant = s.tenants.identify(hash)) return {Role::kTenant, 0, *tenant};
  return {};
}

Coordinator::UnknownToken Coordinator::unknown_token(std::string_view token) {
  State& s = *state_;
  if (!s.token_lookups || token.empty()) return UnknownToken::kNobody;
  return s.token_lookups->ask(sha256_hex(token)) == TokenLookups::Answer::kNobody
             ? UnknownToken::kNobody
             : UnknownToken::kLookingUp;
}

}  // namespace fedcase::server
