#include "server/coordinator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "aggregation/aggregator.h"
#include "aggregation/rdp_accountant.h"
#include "aggregation/server_optimizer.h"
#include "aggregation/validation.h"
#include "common/blob.h"
#include "common/crypto.h"
#include "common/log.h"
#include "ml/model.h"
#include "scheduling/profile.h"
#include "scheduling/round_plan.h"
#include "scheduling/selection.h"
#include "server/evaluator.h"
#include "server/update_meta.h"
#include "storage/store.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Heartbeats refresh availability in memory; the store is written at most this often per
// client so a large fleet does not turn heartbeats into fsyncs. Profiles of a round's invited
// clients are saved when it closes.
constexpr double kPersistSeenEvery = 30.0;

struct ClientState {
  storage::ClientRecord record;  // record.profile is refreshed from `profile` when saved
  scheduling::ClientProfile profile;
  double persisted_seen = 0;
};

struct ActiveRound {
  storage::RoundRecord record;
  std::map<ClientId, scheduling::ClientTask> tasks;  // the invited clients' tasks
  std::map<ClientId, double> handed_out;             // when each first fetched its task
  std::map<ClientId, double> received;               // when each accepted update arrived
  std::unique_ptr<aggregation::Aggregator> aggregate;
  size_t available = 0;  // clients available when it opened (the DP sampling rate)
  double loss_sum = 0;
  double samples = 0;
  bool closing = false;  // the driver is committing it: no more uploads
  bool invited(ClientId id) const { return tasks.count(id) > 0; }
};

struct Job {
  storage::JobRecord record;
  JobConfig config;
  std::unique_ptr<scheduling::SelectionPolicy> policy;
  std::unique_ptr<aggregation::ServerOptimizer> optimizer;
  aggregation::RdpAccountant privacy;  // used when the aggregation adds DP noise
  ModelLayout layout;
  // The latest committed model.
  uint64_t version = 0;
  std::vector<float> params;
  std::shared_ptr<const std::string> blob;
  std::string checksum;
  RoundIndex last_round = 0;  // highest round index used so far
  std::optional<ActiveRound> round;
  bool private_rounds() const { return config.aggregation.dp_noise_multiplier > 0; }
};

// Everything needed to commit a round outside the lock.
struct ClosingRound {
  Job* job;
  storage::RoundRecord record;
  std::unique_ptr<aggregation::Aggregator> aggregate;
  std::vector<float> base_params;
  json stats;          // the round's metrics so far
  json policy_state;   // saved with the commit
};

Result<json> require_object(const json& request) {
  if (!request.is_object()) return invalid_argument("request body must be a JSON object");
  return request;
}

json round_json(const storage::RoundRecord& r) {
  return {{"round", r.index},       {"state", r.state},         {"base_version", r.base_version},
          {"selected", r.selected}, {"opened_at", r.opened_at}, {"deadline", r.deadline},
          {"closed_at", r.closed_at}, {"metrics", r.metrics}};
}

json task_json(JobId job, const Job& j, const ActiveRound& r, const scheduling::ClientTask& t) {
  const std::string base = "/v1/jobs/" + std::to_string(job);
  return {{"job_id", job},
          {"round", r.record.index},
          {"model", j.config.model},
          {"model_version", r.record.base_version},
          {"model_checksum", j.checksum},
          {"model_url", base + "/models/" + std::to_string(r.record.base_version)},
          {"upload_url", base + "/rounds/" + std::to_string(r.record.index) + "/update"},
          {"status_url", base + "/rounds/" + std::to_string(r.record.index) + "/status"},
          {"deadline", r.record.deadline},
          {"train",
           {{"epochs", j.config.training.local_epochs},
            {"batch_size", t.batch_size},
            {"lr", t.learning_rate},
            {"momentum", t.momentum},
            {"prox_mu", t.prox_mu}}},
          {"sample_budget", t.samples},
          {"sampling", t.sampling},
          {"cache",
           {{"policy", t.cache.policy},
            {"budget_bytes", t.cache.budget_bytes},
            {"repetition_factor", t.cache.repetition_factor}}},
          {"expected_duration_s", t.expected_duration_s}};
}

// Registration facts for the profile; `device` may carry probe measurements.
scheduling::DeviceReport device_report(const json& info) {
  scheduling::DeviceReport d;
  d.dataset_size = info.value("dataset_size", uint64_t(0));
  d.cache_capacity_bytes = info.value("cache_capacity_bytes", uint64_t(0));
  if (info.contains("device")) {
    const json& device = info["device"];
    auto measured = [&](const char* key) {
      auto it = device.find(key);
      return it != device.end() && it->is_number() ? std::max(0.0, it->get<double>()) : 0.0;
    };
    d.sample_bytes = measured("sample_bytes");
    d.compute_ms_per_sample = measured("compute_ms_per_sample");
    d.storage_read_bytes_per_s = measured("storage_read_bytes_per_s");
  }
  return d;
}

}  // namespace

struct Coordinator::State {
  CoordinatorConfig config;
  std::unique_ptr<storage::Store> store;

  mutable std::mutex mu;
  std::unordered_map<std::string, ClientId> token_hashes;
  std::map<ClientId, ClientState> clients;
  std::map<JobId, std::unique_ptr<Job>> jobs;

  std::thread driver;
  std::mutex driver_mu;
  std::condition_variable driver_cv;
  bool driver_stop = false;
  bool driver_wake = false;

  // Declared last: destroyed first, while everything its callbacks touch still exists.
  std::unique_ptr<Evaluator> evaluator;

  // ---- helpers; callers hold `mu` unless noted ----

  Job* find_job(JobId id) {
    auto it = jobs.find(id);
    return it == jobs.end() ? nullptr : it->second.get();
  }

  ClientState* find_client(ClientId id) {
    auto it = clients.find(id);
    return it == clients.end() ? nullptr : &it->second;
  }

  // How profiles smooth observations and when a silent client counts as offline.
  scheduling::ProfileParams profile_params() const {
    scheduling::ProfileParams p;
    p.offline_gap_s = config.client_timeout_s;
    return p;
  }

  bool available(ClientId id, const ClientState& c, const Job& job, double now) const {
    return scheduling::is_online(c.profile, now, profile_params()) && !busy_elsewhere(id, job);
  }

  // Saves the profiles and last contact of `ids` in one transaction.
  void save_clients(const std::vector<ClientId>& ids, double now) {
    std::vector<storage::ClientRecord> records;
    for (ClientId id : ids) {
      ClientState* c = find_client(id);
      if (!c) continue;
      c->record.profile = scheduling::profile_to_json(c->profile);
      records.push_back(c->record);
    }
    Status s = store->update_clients(records);
    if (!s.ok()) {
      log_warn("cannot save client profiles: " + s.to_string());
      return;
    }
    for (ClientId id : ids) {
      if (ClientState* c = find_client(id)) c->persisted_seen = now;
    }
  }

  void touch(ClientId id, ClientState& c, double now) {
    c.record.last_seen = now;
    scheduling::observe_heartbeat(c.profile, now, profile_params());
    if (now - c.persisted_seen >= kPersistSeenEvery) save_clients({id}, now);
  }

  bool busy_elsewhere(ClientId id, const Job& except) const {
    for (const auto& [jid, job] : jobs) {
      if (job.get() == &except || !job->round) continue;
      const auto& r = *job->round;
      if (r.invited(id) && !r.received.count(id)) return true;
    }
    return false;
  }

  void wake_driver() {
    std::lock_guard<std::mutex> lock(driver_mu);
    driver_wake = true;
    driver_cv.notify_one();
  }

  Status install_job(storage::JobRecord record, const storage::ModelRecord& model) {
    auto config = parse_job_config(record.config);
    if (!config.ok()) return config.status();
    auto job = std::make_unique<Job>();
    job->record = std::move(record);
    job->config = std::move(config).value();
    auto policy = scheduling::make_selection_policy(job->config.selection, job->config.seed);
    if (!policy.ok()) return policy.status();
    job->policy = std::move(policy).value();
    if (job->record.policy_state.is_object() && !job->record.policy_state.empty()) {
      FEDCASE_RETURN_IF_ERROR(job->policy->load_state(job->record.policy_state));
    }
    auto optimizer = aggregation::make_server_optimizer(job->config.server_optimizer);
    if (!optimizer.ok()) return optimizer.status();
    job->optimizer = std::move(optimizer).value();
    FEDCASE_RETURN_IF_ERROR(job->optimizer->load_state(model.optimizer_state));
    auto blob = decode_blob(model.blob, model.blob.size());
    if (!blob.ok()) return blob.status();
    job->layout = blob->layout;
    job->version = model.version;
    job->params = std::move(blob->data);
    job->blob = std::make_shared<const std::string>(model.blob);
    job->checksum = model.checksum;
    jobs[job->record.id] = std::move(job);
    return ok_status();
  }

  // Loads clients and jobs, fails rounds a crash left open, and replays the privacy spent.
  Status recover() {
    auto clients_or = store->list_clients();
    if (!clients_or.ok()) return clients_or.status();
    for (auto& record : *clients_or) {
      scheduling::ClientProfile profile;
      profile.id = record.id;
      if (record.profile.is_object() && !record.profile.empty()) {
        auto loaded = scheduling::profile_from_json(record.profile);
        if (!loaded.ok()) return loaded.status();
        profile = std::move(loaded).value();
      }
      token_hashes[record.token_hash] = record.id;
      double seen = record.last_seen;
      ClientId id = record.id;
      clients[id] = {std::move(record), std::move(profile), seen};
    }
    auto jobs_or = store->list_jobs();
    if (!jobs_or.ok()) return jobs_or.status();
    for (auto& record : *jobs_or) {
      JobId id = record.id;
      auto model = store->latest_model(id);
      if (!model.ok()) return model.status();
      FEDCASE_RETURN_IF_ERROR(install_job(std::move(record), *model));
      auto rounds = store->list_rounds(id);
      if (!rounds.ok()) return rounds.status();
      Job& job = *jobs[id];
      for (auto& r : *rounds) {
        job.last_round = std::max(job.last_round, r.index);
        if (r.state == "committed" && r.metrics.contains("privacy")) {
          const json& p = r.metrics["privacy"];
          FEDCASE_RETURN_IF_ERROR(job.privacy.add_rounds(p["q"], p["noise_multiplier"]));
        }
        if (r.state != "open") continue;
        r.closed_at = now_unix();
        r.metrics = {{"failure", "coordinator restarted while the round was open"}};
        FEDCASE_RETURN_IF_ERROR(store->fail_round(r));
        log_info("job " + std::to_string(id) + ": round " + std::to_string(r.index) +
                 " was open at restart and is marked failed");
      }
      log_info("job " + std::to_string(id) + " (" + job.record.name + ") resumes at model version " +
               std::to_string(job.version) + ", checksum " + job.checksum.substr(0, 12));
    }
    return ok_status();
  }

  Status set_state(Job& job, const std::string& state) {
    FEDCASE_RETURN_IF_ERROR(store->set_job_state(job.record.id, state));
    job.record.state = state;
    log_info("job " + std::to_string(job.record.id) + " is now " + state);
    return ok_status();
  }

  // Selects the participants, plans their tasks and opens the round, if enough clients are
  // available.
  void open_round(Job& job, double now) {
    const uint64_t model_bytes = job.blob->size();
    std::vector<scheduling::Candidate> candidates;
    candidates.reserve(clients.size());
    size_t available_count = 0;
    for (const auto& [id, c] : clients) {
      bool ok = available(id, c, job, now);
      available_count += ok;
      candidates.push_back(scheduling::make_candidate(c.profile, ok, job.config.training, model_bytes));
    }
    if (available_count < job.config.min_clients) return;
    const RoundIndex index = job.last_round + 1;
    auto selected = job.policy->select(
        {index, job.config.clients_per_round, job.config.overcommit}, candidates);
    if (selected.empty()) return;
    std::vector<const scheduling::ClientProfile*> profiles;
    for (ClientId id : selected) profiles.push_back(&clients.at(id).profile);
    auto plan = scheduling::plan_round(job.config.training, profiles, model_bytes);
    if (!plan.ok()) {
      log_error("job " + std::to_string(job.record.id) + ": cannot plan round: " +
                plan.status().to_string());
      return;
    }
    aggregation::AggregatorConfig aggregation = job.config.aggregation;
    if (job.private_rounds()) aggregation.dp_seed = job.config.seed * 1000003 + index;
    auto aggregate = aggregation::make_aggregator(aggregation, job.layout.element_count());
    if (!aggregate.ok()) {
      log_error("job " + std::to_string(job.record.id) + ": " + aggregate.status().to_string());
      return;
    }

    ActiveRound round;
    round.record = {job.record.id, index, "open", job.version, selected, now,
                    now + plan->deadline_s, 0, json::object()};
    Status s = store->open_round(round.record);
    if (!s.ok()) {
      log_error("job " + std::to_string(job.record.id) + ": cannot open round: " + s.to_string());
      return;
    }
    for (const auto& task : plan->tasks) {
      round.tasks[task.client] = task;
      scheduling::observe_selected(clients.at(task.client).profile, index);
    }
    round.aggregate = std::move(aggregate).value();
    round.available = available_count;
    job.last_round = index;
    job.round = std::move(round);
    log_info("job " + std::to_string(job.record.id) + ": round " + std::to_string(index) +
             " opened with " + std::to_string(selected.size()) + " invited of " +
             std::to_string(available_count) + " available, deadline in " +
             std::to_string(static_cast<int>(plan->deadline_s)) + " s");
  }

  // Tells the profiles and the policy how the round went, saves the invited clients'
  // profiles, and returns who was dropped and why.
  json conclude_round(Job& job, double now, bool filled) {
    ActiveRound& r = *job.round;
    scheduling::RoundOutcome outcome;
    outcome.round = r.record.index;
    outcome.duration_s = now - r.record.opened_at;
    if (r.samples > 0) outcome.loss = r.loss_sum / r.samples;
    json dropped = json::object();
    std::vector<ClientId> invited;
    for (const auto& [id, task] : r.tasks) {
      invited.push_back(id);
      ClientState& c = clients.at(id);
      auto received = r.received.find(id);
      scheduling::ClientOutcome client{id, received != r.received.end(), 0, 0};
      if (client.finished) {
        auto handed = r.handed_out.find(id);
        double start = handed != r.handed_out.end() ? handed->second : r.record.opened_at;
        client.duration_s = received->second - start;
        client.utility = c.profile.utility;
      } else if (filled) {
        dropped[std::to_string(id)] = "not needed";
      } else {
        dropped[std::to_string(id)] = "missed deadline";
        scheduling::observe_missed_deadline(c.profile);
      }
      outcome.clients.push_back(client);
    }
    job.policy->on_round_end(outcome);
    job.record.policy_state = job.policy->save_state();
    save_clients(invited, now);
    return dropped;
  }

  void fail_round(Job& job, double now, const std::string& why) {
    auto& r = *job.round;
    json dropped = conclude_round(job, now, false);
    r.record.closed_at = now;
    r.record.metrics = {{"failure", why},
                        {"updates", r.received.size()},
                        {"invited", r.tasks.size()},
                        {"dropped", dropped}};
    Status s = store->fail_round(r.record);
    if (!s.ok()) log_error("cannot record failed round: " + s.to_string());
    log_warn("job " + std::to_string(job.record.id) + ": round " +
             std::to_string(r.record.index) + " failed: " + why);
    job.round.reset();
  }

  // The privacy spent once this round is composed: {q, noise_multiplier, epsilon, delta}.
  // Random selection samples the available clients; the other policies choose, so no
  // amplification by sampling is claimed for them (q = 1).
  Result<json> privacy_after(Job& job, const ActiveRound& r) {
    const double z = job.config.aggregation.dp_noise_multiplier;
    const double q = job.policy->name() == "random" && r.available > 0
                         ? std::min(1.0, double(r.tasks.size()) / double(r.available))
                         : 1.0;
    FEDCASE_RETURN_IF_ERROR(job.privacy.add_rounds(q, z));
    auto spent = job.privacy.spent(job.config.dp_delta);
    if (!spent.ok()) return spent.status();
    return json{{"q", q},
                {"noise_multiplier", z},
                {"epsilon", spent->epsilon},
                {"delta", job.config.dp_delta},
                {"rounds", job.privacy.rounds()}};
  }

  // Runs on the driver thread without `mu`: optimizer step and atomic commit; the evaluation
  // is queued and recorded when it is done.
  void commit(ClosingRound& c) {
    Job& job = *c.job;
    auto mean = c.aggregate->result();
    std::string previous_state = job.optimizer->save_state();
    std::vector<float> params = std::move(c.base_params);
    Status s = mean.ok() ? job.optimizer->step(params, *mean) : mean.status();
    if (!s.ok()) return abandon(c, "aggregation failed: " + s.to_string(), previous_state);

    ModelBlob next{c.record.index, job.layout, params};
    auto blob = std::make_shared<const std::string>(encode_blob(next));
    std::string checksum = blob_checksum(*blob);
    double now = now_unix();
    c.record.state = "committed";
    c.record.closed_at = now;
    c.record.metrics = c.stats;
    c.record.metrics["round_seconds"] = now - c.record.opened_at;
    c.record.metrics["model_version"] = c.record.index;
    c.record.metrics["checksum"] = checksum;
    storage::ModelRecord model{job.record.id, c.record.index, *blob, checksum,
                               job.optimizer->save_state(), now};
    s = store->commit_round(c.record, model, c.policy_state);
    if (!s.ok()) return abandon(c, "commit failed: " + s.to_string(), previous_state);

    const RoundIndex index = c.record.index;
    evaluator->submit(job.config.model, params,
                      [this, &job, index](const ml::EvalResult& e) { on_evaluated(job, index, e); });
    std::lock_guard<std::mutex> lock(mu);
    job.version = index;
    job.params = std::move(params);
    job.blob = std::move(blob);
    job.checksum = checksum;
    job.round.reset();
    log_info("job " + std::to_string(job.record.id) + ": round " + std::to_string(index) +
             " committed with " + c.stats["updates"].dump() + " updates after " +
             std::to_string(now - c.record.opened_at) + " s");
    if (job.last_round >= job.config.rounds && job.record.state == "running") {
      set_state(job, "finished");
    }
  }

  void abandon(ClosingRound& c, const std::string& why, const std::string& optimizer_state) {
    log_error("job " + std::to_string(c.job->record.id) + ": " + why);
    c.job->optimizer->load_state(optimizer_state);
    std::lock_guard<std::mutex> lock(mu);
    storage::RoundRecord& r = c.record;
    r.closed_at = now_unix();
    r.metrics = c.stats;
    r.metrics["failure"] = why;
    Status s = store->fail_round(r);
    if (!s.ok()) log_error("cannot record failed round: " + s.to_string());
    c.job->round.reset();
  }

  // Runs on the evaluator thread: records the model's test metrics, and finishes the job
  // once the target accuracy is reached (the round in flight is then no longer needed).
  void on_evaluated(Job& job, RoundIndex index, const ml::EvalResult& e) {
    Status s = store->add_round_metrics(
        job.record.id, index,
        {{"test_accuracy", e.accuracy}, {"test_loss", e.loss}, {"test_samples", e.samples}});
    if (!s.ok()) log_error("cannot record evaluation: " + s.to_string());
    char line[160];
    std::snprintf(line, sizeof(line), "job %llu: round %llu model accuracy %.4f, loss %.4f",
                  static_cast<unsigned long long>(job.record.id),
                  static_cast<unsigned long long>(index), e.accuracy, e.loss);
    log_info(line);
    std::lock_guard<std::mutex> lock(mu);
    bool reached = job.config.target_accuracy > 0 && e.accuracy >= job.config.target_accuracy;
    if (!reached || job.record.state != "running") return;
    set_state(job, "finished");
    if (job.round && !job.round->closing) fail_round(job, now_unix(), "job reached its target");
  }

  // Closes `job`'s round if it is full or past its deadline: fails it when too few updates
  // arrived, else hands it to the driver for commit.
  std::optional<ClosingRound> close_if_due(Job& job, double now) {
    ActiveRound& r = *job.round;
    const bool filled = r.received.size() >= job.config.clients_per_round;
    if (r.closing || (!filled && now < r.record.deadline)) return std::nullopt;
    if (r.received.size() < job.config.min_updates) {
      fail_round(job, now, "deadline passed with " + std::to_string(r.received.size()) +
                               " updates, " + std::to_string(job.config.min_updates) + " needed");
      return std::nullopt;
    }
    json stats = {{"updates", r.received.size()},
                  {"invited", r.tasks.size()},
                  {"samples", r.samples},
                  {"train_loss", r.samples > 0 ? r.loss_sum / r.samples : 0.0},
                  {"aggregation", r.aggregate->name()}};
    json finished = json::array();
    for (const auto& [client, at] : r.received) finished.push_back(client);
    stats["finished"] = finished;
    if (job.private_rounds()) {
      auto privacy = privacy_after(job, r);
      if (!privacy.ok()) {
        fail_round(job, now, "privacy accounting failed: " + privacy.status().to_string());
        return std::nullopt;
      }
      stats["privacy"] = *privacy;
    }
    stats["dropped"] = conclude_round(job, now, filled);
    r.closing = true;
    return ClosingRound{&job,          r.record,         std::move(r.aggregate),
                        job.params,    std::move(stats), job.record.policy_state};
  }
};

Coordinator::Coordinator(std::unique_ptr<State> state) : state_(std::move(state)) {}

Coordinator::~Coordinator() { stop_driver(); }

Result<std::unique_ptr<Coordinator>> Coordinator::open(const CoordinatorConfig& config) {
  auto state = std::make_unique<State>();
  state->config = config;
  auto store = storage::open_sqlite_store(config.database);
  if (!store.ok()) return store.status();
  state->store = std::move(store).value();
  auto eval = ml::load_fashion_mnist(config.eval_data_dir, ml::Split::kTest);
  if (!eval.ok()) return eval.status();
  state->evaluator = std::make_unique<Evaluator>(std::move(eval).value(), config.eval_samples,
                                                 config.torch_threads);
  FEDCASE_RETURN_IF_ERROR(state->recover());
  return std::unique_ptr<Coordinator>(new Coordinator(std::move(state)));
}

const CoordinatorConfig& Coordinator::config() const { return state_->config; }

void Coordinator::start_driver() {
  State& s = *state_;
  if (s.driver.joinable()) return;
  s.driver_stop = false;
  s.driver = std::thread([this, &s] {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(s.driver_mu);
        s.driver_cv.wait_for(lock, std::chrono::milliseconds(50),
                             [&] { return s.driver_stop || s.driver_wake; });
        if (s.driver_stop) return;
        s.driver_wake = false;
      }
      tick();
    }
  });
}

void Coordinator::stop_driver() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.driver_mu);
    s.driver_stop = true;
    s.driver_cv.notify_one();
  }
  if (s.driver.joinable()) s.driver.join();
}

Caller Coordinator::identify(std::string_view token) const {
  const State& s = *state_;
  if (token.empty()) return {};
  if (constant_time_equal(token, s.config.admin_token)) return {Role::kAdmin, 0};
  if (constant_time_equal(token, s.config.enrollment_token)) return {Role::kEnrollment, 0};
  std::string hash = sha256_hex(token);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.token_hashes.find(hash);
  if (it == s.token_hashes.end()) return {};
  return {Role::kClient, it->second};
}

Result<json> Coordinator::register_client(const json& request) {
  auto body = require_object(request);
  if (!body.ok()) return body.status();
  json info = json::object();
  for (const char* key : {"dataset_size", "cache_capacity_bytes"}) {
    if (!request.contains(key)) continue;
    if (!request[key].is_number_integer() || request[key].get<int64_t>() < 0) {
      return invalid_argument(std::string(key) + " must be an integer >= 0");
    }
    info[key] = request[key];
  }
  if (request.contains("device")) {
    if (!request["device"].is_object()) return invalid_argument("device must be a JSON object");
    info["device"] = request["device"];
  }
  if (request.contains("sdk_version")) {
    if (!request["sdk_version"].is_string()) return invalid_argument("sdk_version must be a string");
    info["sdk_version"] = request["sdk_version"];
  }
  State& s = *state_;
  scheduling::ClientProfile profile;
  FEDCASE_RETURN_IF_ERROR(
      scheduling::observe_registration(profile, device_report(info), s.profile_params()));
  std::string token = random_token();
  const double now = now_unix();
  scheduling::observe_heartbeat(profile, now, s.profile_params());
  storage::ClientRecord record{0, sha256_hex(token), info, json::object(), now, now};
  std::lock_guard<std::mutex> lock(s.mu);
  auto id = s.store->add_client(record);
  if (!id.ok()) return id.status();
  record.id = profile.id = *id;
  s.token_hashes[record.token_hash] = *id;
  s.clients[*id] = {record, profile, 0};
  s.save_clients({*id}, now);
  return json{{"client_id", *id}, {"token", token}};
}

Result<json> Coordinator::heartbeat(ClientId client, const json& request) {
  auto body = require_object(request);
  if (!body.ok()) return body.status();
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  ClientState* c = s.find_client(client);
  if (!c) return not_found("client not found");
  s.touch(client, *c, now_unix());
  return json{{"ok", true}};
}

Result<std::optional<json>> Coordinator::next_task(ClientId client) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  ClientState* c = s.find_client(client);
  if (!c) return not_found("client not found");
  const double now = now_unix();
  s.touch(client, *c, now);
  for (auto& [id, job] : s.jobs) {
    if (!job->round || job->round->closing) continue;
    ActiveRound& r = *job->round;
    auto task = r.tasks.find(client);
    if (task == r.tasks.end() || r.received.count(client)) continue;
    r.handed_out.emplace(client, now);
    return std::optional<json>(task_json(id, *job, r, task->second));
  }
  return std::optional<json>();
}

Result<ModelDownload> Coordinator::model(JobId job_id, uint64_t version) {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Job* job = s.find_job(job_id);
    if (!job) return not_found("job " + std::to_string(job_id) + " not found");
    if (job->version == version) return ModelDownload{version, job->checksum, job->blob};
  }
  auto record = s.store->get_model(job_id, version);
  if (!record.ok()) return record.status();
  return ModelDownload{version, record->checksum,
                       std::make_shared<const std::string>(std::move(record->blob))};
}

Result<json> Coordinator::task_status(ClientId client, JobId job_id, RoundIndex round) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  Job* job = s.find_job(job_id);
  if (!job) return not_found("job " + std::to_string(job_id) + " not found");
  auto answer = [](bool needed, const char* reason) {
    return json{{"needed", needed}, {"reason", reason}};
  };
  if (!job->round || job->round->record.index != round || job->round->closing) {
    return answer(false, "round closed");
  }
  const ActiveRound& r = *job->round;
  if (!r.invited(client)) return answer(false, "not invited");
  if (r.received.count(client)) return answer(false, "already uploaded");
  if (r.received.size() >= job->config.clients_per_round) return answer(false, "round filled");
  return answer(true, "open");
}

Result<json> Coordinator::submit_update(ClientId client, JobId job_id, RoundIndex round,
                                        const json& meta_json, std::string_view bytes,
                                        double upload_seconds) {
  State& s = *state_;
  // Cheap state checks first, so late and duplicate uploads are refused before any parsing.
  auto check_state = [&](Job*& job) -> Status {
    job = s.find_job(job_id);
    if (!job) return not_found("job " + std::to_string(job_id) + " not found");
    if (!job->round || job->round->record.index != round || job->round->closing) {
      return conflict("round " + std::to_string(round) + " of job " + std::to_string(job_id) +
                      " is not open for updates");
    }
    const ActiveRound& r = *job->round;
    if (!r.invited(client)) {
      return permission_denied("client " + std::to_string(client) + " was not invited to round " +
                               std::to_string(round));
    }
    if (r.received.count(client)) {
      return conflict("client " + std::to_string(client) + " already uploaded to round " +
                      std::to_string(round));
    }
    if (r.received.size() >= job->config.clients_per_round) {
      return conflict("round " + std::to_string(round) + " already has its " +
                      std::to_string(job->config.clients_per_round) + " updates");
    }
    return ok_status();
  };
  ModelLayout layout;
  uint64_t base_version = 0;
  double max_norm = 0;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Job* job = nullptr;
    FEDCASE_RETURN_IF_ERROR(check_state(job));
    layout = job->layout;
    base_version = job->round->record.base_version;
    max_norm = job->config.max_update_norm;
  }
  auto meta = parse_update_meta(meta_json);
  if (!meta.ok()) return meta.status();
  auto blob = decode_blob(bytes, s.config.max_upload_bytes);
  if (!blob.ok()) return blob.status();
  Status valid = blob->model_version == base_version
                     ? aggregation::validate_update(layout, *blob, {max_norm})
                     : unprocessable("update was trained on model version " +
                                     std::to_string(blob->model_version) + ", round " +
                                     std::to_string(round) + " trains version " +
                                     std::to_string(base_version));

  std::lock_guard<std::mutex> lock(s.mu);
  Job* job = nullptr;
  FEDCASE_RETURN_IF_ERROR(check_state(job));  // the round may have closed meanwhile
  ClientState& c = s.clients.at(client);
  if (!valid.ok()) {
    scheduling::observe_failure(c.profile);
    return valid;
  }
  ActiveRound& r = *job->round;
  const double now = now_unix();
  FEDCASE_RETURN_IF_ERROR(s.store->record_update({job_id, round, client, meta_json, now}));
  // Validation guarantees the size and values, and a round takes at most K updates, which the
  // config keeps within the aggregator's buffer: folding in cannot fail here.
  FEDCASE_RETURN_IF_ERROR(r.aggregate->add(blob->data.data(), blob->data.size(), meta->samples));
  r.received[client] = now;
  r.samples += meta->samples;
  r.loss_sum += meta->loss_sum;
  scheduling::RoundReport report;
  report.round = round;
  report.samples = meta->samples;
  report.loss_sum = meta->loss_sum;
  report.loss_sq_sum = meta->loss_sq_sum;
  report.compute_s = meta->compute_s;
  report.io_s = meta->io_s;
  report.cache_hits = meta->cache_hits;
  report.cache_misses = meta->cache_misses;
  const uint64_t reads = meta->cache_misses;
  report.sample_bytes = reads > 0 ? double(meta->bytes_read) / reads : 0;
  report.download_bytes = meta->download_s > 0 ? job->blob->size() : 0;
  report.download_s = meta->download_s;
  report.upload_bytes = upload_seconds > 0 ? bytes.size() : 0;
  report.upload_s = upload_seconds;
  Status observed = scheduling::observe_completion(c.profile, report, s.profile_params());
  if (!observed.ok()) log_warn("client " + std::to_string(client) + ": " + observed.to_string());
  s.touch(client, c, now);
  if (r.received.size() >= job->config.clients_per_round) s.wake_driver();
  return json{{"accepted", true}, {"round", round}, {"updates", r.received.size()}};
}

Result<json> Coordinator::create_job(const json& request) {
  auto config = parse_job_config(request);
  if (!config.ok()) return config.status();
  auto model = ml::Model::create(config->model, config->seed);
  if (!model.ok()) return model.status();
  ModelBlob initial{0, model->layout(), model->parameters()};
  std::string blob = encode_blob(initial);
  double now = now_unix();
  storage::JobRecord record{0, config->name, request, "running", json::object(), now};
  storage::ModelRecord model_record{0, 0, blob, blob_checksum(blob), std::string(), now};
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  auto id = s.store->create_job(record, model_record);
  if (!id.ok()) return id.status();
  record.id = model_record.job = *id;
  FEDCASE_RETURN_IF_ERROR(s.install_job(record, model_record));
  log_info("job " + std::to_string(*id) + " (" + config->name + ") created: " + config->model +
           ", " + std::to_string(initial.data.size()) + " parameters");
  s.wake_driver();
  return json{{"job_id", *id}, {"state", "running"}, {"model_version", 0},
              {"model_checksum", model_record.checksum}};
}

Result<json> Coordinator::list_jobs() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  json out = json::array();
  for (const auto& [id, job] : s.jobs) {
    out.push_back({{"job_id", id},
                   {"name", job->record.name},
                   {"state", job->record.state},
                   {"model_version", job->version},
                   {"round", job->last_round},
                   {"round_open", job->round.has_value()}});
  }
  return json{{"jobs", out}};
}

Result<json> Coordinator::job_detail(JobId id) {
  State& s = *state_;
  json out;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Job* job = s.find_job(id);
    if (!job) return not_found("job " + std::to_string(id) + " not found");
    out = {{"job_id", id},
           {"name", job->record.name},
           {"state", job->record.state},
           {"config", job->record.config},
           {"created_at", job->record.created_at},
           {"model_version", job->version},
           {"model_checksum", job->checksum},
           {"parameters", job->layout.element_count()},
           {"selection_policy", job->policy->name()},
           {"policy_state", job->record.policy_state},
           {"aggregation", job->config.aggregation.rule},
           {"server_optimizer", job->optimizer->name()}};
    if (job->private_rounds()) {
      auto spent = job->privacy.spent(job->config.dp_delta);
      out["privacy"] = {{"noise_multiplier", job->config.aggregation.dp_noise_multiplier},
                        {"clip_norm", job->config.aggregation.clip_norm},
                        {"rounds", job->privacy.rounds()},
                        {"delta", job->config.dp_delta},
                        {"epsilon", spent.ok() ? spent->epsilon : 0.0}};
    }
    if (job->round) {
      out["current_round"] = {{"round", job->round->record.index},
                              {"invited", job->round->tasks.size()},
                              {"updates", job->round->received.size()},
                              {"deadline", job->round->record.deadline}};
    }
  }
  auto rounds = s.store->list_rounds(id);
  if (!rounds.ok()) return rounds.status();
  out["rounds"] = json::array();
  for (const auto& r : *rounds) out["rounds"].push_back(round_json(r));
  return out;
}

Result<json> Coordinator::list_clients() {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  const double now = now_unix();
  json out = json::array();
  for (const auto& [id, c] : s.clients) {
    // The expected duration of the task each unfinished job would give this client.
    json expected = json::object();
    for (const auto& [job_id, job] : s.jobs) {
      if (job->record.state != "running" && job->record.state != "paused") continue;
      expected[std::to_string(job_id)] =
          scheduling::make_candidate(c.profile, true, job->config.training, job->blob->size())
              .expected_duration_s;
    }
    out.push_back({{"client_id", id},
                   {"info", c.record.info},
                   {"profile", scheduling::profile_to_json(c.profile)},
                   {"expected_duration_s", expected},
                   {"registered_at", c.record.registered_at},
                   {"last_seen", c.record.last_seen},
                   {"available", scheduling::is_online(c.profile, now, s.profile_params())}});
  }
  return json{{"clients", out}};
}

Result<json> Coordinator::control_job(JobId id, const std::string& action) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  Job* job = s.find_job(id);
  if (!job) return not_found("job " + std::to_string(id) + " not found");
  const std::string& state = job->record.state;
  std::string next;
  if (action == "pause" && state == "running") next = "paused";
  else if (action == "resume" && state == "paused") next = "running";
  else if (action == "cancel" && (state == "running" || state == "paused")) next = "cancelled";
  else if (action != "pause" && action != "resume" && action != "cancel") {
    return not_found("unknown job action '" + action + "'");
  } else {
    return conflict("cannot " + action + " a job that is " + state);
  }
  FEDCASE_RETURN_IF_ERROR(s.set_state(*job, next));
  // A paused job finishes its current round; a cancelled one stops it now.
  if (next == "cancelled" && job->round && !job->round->closing) {
    s.fail_round(*job, now_unix(), "job cancelled");
  }
  s.wake_driver();
  return json{{"job_id", id}, {"state", next}};
}

void Coordinator::tick() {
  State& s = *state_;
  std::vector<ClosingRound> closing;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    const double now = now_unix();
    for (auto& [id, job] : s.jobs) {
      if (job->round) {
        if (auto c = s.close_if_due(*job, now)) closing.push_back(std::move(*c));
      } else if (job->record.state == "running") {
        if (job->last_round >= job->config.rounds) {
          s.set_state(*job, "finished");
        } else {
          s.open_round(*job, now);
        }
      }
    }
  }
  for (auto& c : closing) s.commit(c);
}

}  // namespace fedcase::server
