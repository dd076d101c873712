#include "server/coordinator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "aggregation/fedavg.h"
#include "aggregation/server_optimizer.h"
#include "aggregation/validation.h"
#include "common/blob.h"
#include "common/crypto.h"
#include "common/log.h"
#include "ml/model.h"
#include "scheduling/selection.h"
#include "server/evaluator.h"
#include "storage/store.h"

namespace fedcase::server {
namespace {

using nlohmann::json;

double now_unix() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Heartbeats refresh availability in memory; the store is written at most this often per
// client so a large fleet does not turn heartbeats into fsyncs.
constexpr double kPersistSeenEvery = 30.0;

struct ClientState {
  storage::ClientRecord record;
  double persisted_seen = 0;
};

struct ActiveRound {
  storage::RoundRecord record;
  std::set<ClientId> invited;
  std::map<ClientId, json> received;  // client -> reported statistics
  std::unique_ptr<aggregation::StreamingFedAvg> sum;
  double loss_sum = 0;
  double samples = 0;
  bool closing = false;  // the driver is committing it: no more uploads
};

struct Job {
  storage::JobRecord record;
  JobConfig config;
  std::unique_ptr<scheduling::SelectionPolicy> policy;
  std::unique_ptr<aggregation::ServerOptimizer> optimizer;
  ModelLayout layout;
  // The latest committed model.
  uint64_t version = 0;
  std::vector<float> params;
  std::shared_ptr<const std::string> blob;
  std::string checksum;
  RoundIndex last_round = 0;  // highest round index used so far
  std::optional<ActiveRound> round;
};

// Everything needed to commit a round outside the lock.
struct ClosingRound {
  Job* job;
  storage::RoundRecord record;
  std::unique_ptr<aggregation::StreamingFedAvg> sum;
  std::vector<float> base_params;
  json stats;
};

Result<json> require_object(const json& request) {
  if (!request.is_object()) return invalid_argument("request body must be a JSON object");
  return request;
}

// Update metadata: counts and seconds the client reports with its update.
Status validate_meta(const json& meta) {
  if (!meta.is_object()) return invalid_argument("update metadata must be a JSON object");
  auto it = meta.find("samples");
  if (it == meta.end() || !it->is_number_integer() || it->get<int64_t>() <= 0) {
    return invalid_argument("update metadata needs a positive integer 'samples'");
  }
  for (const char* key : {"loss_sum", "loss_sq_sum", "compute_s", "io_s", "download_s"}) {
    auto v = meta.find(key);
    if (v != meta.end() &&
        (!v->is_number() || !std::isfinite(v->get<double>()) || v->get<double>() < 0)) {
      return invalid_argument(std::string("update metadata '") + key +
                              "' must be a finite number >= 0");
    }
  }
  for (const char* key : {"cache_hits", "cache_misses", "bytes_read"}) {
    auto v = meta.find(key);
    if (v != meta.end() && (!v->is_number_integer() || v->get<int64_t>() < 0)) {
      return invalid_argument(std::string("update metadata '") + key +
                              "' must be an integer >= 0");
    }
  }
  return ok_status();
}

json round_json(const storage::RoundRecord& r) {
  return {{"round", r.index},       {"state", r.state},         {"base_version", r.base_version},
          {"selected", r.selected}, {"opened_at", r.opened_at}, {"deadline", r.deadline},
          {"closed_at", r.closed_at}, {"metrics", r.metrics}};
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

  void touch(ClientState& c, double now) {
    c.record.last_seen = now;
    if (now - c.persisted_seen >= kPersistSeenEvery) {
      Status s = store->update_client(c.record.id, c.record.profile, now);
      if (s.ok()) c.persisted_seen = now;
      else log_warn("cannot persist client " + std::to_string(c.record.id) + ": " + s.to_string());
    }
  }

  bool busy_elsewhere(ClientId id, const Job& except) const {
    for (const auto& [jid, job] : jobs) {
      if (job.get() == &except || !job->round) continue;
      const auto& r = *job->round;
      if (r.invited.count(id) && !r.received.count(id)) return true;
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

  // Loads every job and fails rounds a crash left open.
  Status recover() {
    auto clients_or = store->list_clients();
    if (!clients_or.ok()) return clients_or.status();
    for (auto& c : *clients_or) {
      token_hashes[c.token_hash] = c.id;
      double seen = c.last_seen;
      clients[c.id] = {std::move(c), seen};
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

  void open_round(Job& job, double now) {
    std::vector<scheduling::Candidate> candidates;
    size_t available = 0;
    for (const auto& [id, c] : clients) {
      bool ok = now - c.record.last_seen <= config.client_timeout_s && !busy_elsewhere(id, job);
      available += ok;
      candidates.push_back({id, ok});
    }
    if (available < job.config.min_clients) return;
    const RoundIndex index = job.last_round + 1;
    auto selected = job.policy->select(
        {index, job.config.clients_per_round, job.config.overcommit}, candidates);
    if (selected.empty()) return;
    ActiveRound round;
    round.record = {job.record.id, index, "open", job.version, selected, now,
                    now + job.config.round_deadline_s, 0, json::object()};
    Status s = store->open_round(round.record);
    if (!s.ok()) {
      log_error("job " + std::to_string(job.record.id) + ": cannot open round: " + s.to_string());
      return;
    }
    round.invited.insert(selected.begin(), selected.end());
    round.sum = std::make_unique<aggregation::StreamingFedAvg>(job.layout.element_count());
    job.last_round = index;
    job.round = std::move(round);
    log_info("job " + std::to_string(job.record.id) + ": round " + std::to_string(index) +
             " opened with " + std::to_string(selected.size()) + " invited of " +
             std::to_string(available) + " available");
  }

  // Who was invited but did not deliver, and why.
  static json dropped(const ActiveRound& r, bool filled) {
    json out = json::object();
    for (ClientId id : r.invited) {
      if (!r.received.count(id)) out[std::to_string(id)] = filled ? "not needed" : "missed deadline";
    }
    return out;
  }

  void fail_round(Job& job, double now, const std::string& why) {
    auto& r = *job.round;
    r.record.closed_at = now;
    r.record.metrics = {{"failure", why},
                        {"updates", r.received.size()},
                        {"invited", r.invited.size()},
                        {"dropped", dropped(r, false)}};
    Status s = store->fail_round(r.record);
    if (!s.ok()) log_error("cannot record failed round: " + s.to_string());
    log_warn("job " + std::to_string(job.record.id) + ": round " +
             std::to_string(r.record.index) + " failed: " + why);
    job.round.reset();
  }

  // Runs on the driver thread without `mu`: optimizer step and atomic commit; the evaluation
  // is queued and recorded when it is done.
  void commit(ClosingRound& c) {
    Job& job = *c.job;
    auto mean = c.sum->mean();
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
    s = store->commit_round(c.record, model, job.record.policy_state);
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

  void abandon(ClosingRound& c, const std::string& why, const std::string& optimizer_state) {
    log_error("job " + std::to_string(c.job->record.id) + ": " + why);
    c.job->optimizer->load_state(optimizer_state);
    std::lock_guard<std::mutex> lock(mu);
    fail_round(*c.job, now_unix(), why);
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
  std::string token = random_token();
  double now = now_unix();
  storage::ClientRecord record{0, sha256_hex(token), info, json::object(), now, now};
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  auto id = s.store->add_client(record);
  if (!id.ok()) return id.status();
  record.id = *id;
  s.token_hashes[record.token_hash] = *id;
  s.clients[*id] = {record, now};
  return json{{"client_id", *id}, {"token", token}};
}

Result<json> Coordinator::heartbeat(ClientId client, const json& request) {
  auto body = require_object(request);
  if (!body.ok()) return body.status();
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.clients.find(client);
  if (it == s.clients.end()) return not_found("client not found");
  s.touch(it->second, now_unix());
  return json{{"ok", true}};
}

Result<std::optional<json>> Coordinator::next_task(ClientId client) {
  State& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.clients.find(client);
  if (it == s.clients.end()) return not_found("client not found");
  s.touch(it->second, now_unix());
  for (const auto& [id, job] : s.jobs) {
    if (!job->round || job->round->closing) continue;
    const ActiveRound& r = *job->round;
    if (!r.invited.count(client) || r.received.count(client)) continue;
    const auto& t = job->config.train;
    const std::string base = "/v1/jobs/" + std::to_string(id);
    return std::optional<json>(json{
        {"job_id", id},
        {"round", r.record.index},
        {"model", job->config.model},
        {"model_version", r.record.base_version},
        {"model_checksum", job->checksum},
        {"model_url", base + "/models/" + std::to_string(r.record.base_version)},
        {"upload_url", base + "/rounds/" + std::to_string(r.record.index) + "/update"},
        {"deadline", r.record.deadline},
        {"train",
         {{"epochs", t.epochs},
          {"batch_size", t.batch_size},
          {"lr", t.lr},
          {"momentum", t.momentum},
          {"prox_mu", t.prox_mu}}}});
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

Result<json> Coordinator::submit_update(ClientId client, JobId job_id, RoundIndex round,
                                        const json& meta, std::string_view bytes) {
  State& s = *state_;
  ModelLayout layout;
  uint64_t base_version = 0;
  double max_norm = 0;
  // Cheap state checks first, so late and duplicate uploads are refused before any parsing.
  auto check_state = [&](Job*& job) -> Status {
    job = s.find_job(job_id);
    if (!job) return not_found("job " + std::to_string(job_id) + " not found");
    if (!job->round || job->round->record.index != round || job->round->closing) {
      return conflict("round " + std::to_string(round) + " of job " + std::to_string(job_id) +
                      " is not open for updates");
    }
    if (!job->round->invited.count(client)) {
      return permission_denied("client " + std::to_string(client) + " was not invited to round " +
                               std::to_string(round));
    }
    if (job->round->received.count(client)) {
      return conflict("client " + std::to_string(client) + " already uploaded to round " +
                      std::to_string(round));
    }
    if (job->round->received.size() >= job->config.clients_per_round) {
      return conflict("round " + std::to_string(round) + " already has its " +
                      std::to_string(job->config.clients_per_round) + " updates");
    }
    return ok_status();
  };
  {
    std::lock_guard<std::mutex> lock(s.mu);
    Job* job = nullptr;
    FEDCASE_RETURN_IF_ERROR(check_state(job));
    layout = job->layout;
    base_version = job->round->record.base_version;
    max_norm = job->config.max_update_norm;
  }
  FEDCASE_RETURN_IF_ERROR(validate_meta(meta));
  auto blob = decode_blob(bytes, s.config.max_upload_bytes);
  if (!blob.ok()) return blob.status();
  if (blob->model_version != base_version) {
    return unprocessable("update was trained on model version " +
                         std::to_string(blob->model_version) + ", round " +
                         std::to_string(round) + " trains version " + std::to_string(base_version));
  }
  FEDCASE_RETURN_IF_ERROR(aggregation::validate_update(layout, *blob, {max_norm}));

  std::lock_guard<std::mutex> lock(s.mu);
  Job* job = nullptr;
  FEDCASE_RETURN_IF_ERROR(check_state(job));  // the round may have closed meanwhile
  ActiveRound& r = *job->round;
  double now = now_unix();
  FEDCASE_RETURN_IF_ERROR(s.store->record_update({job_id, round, client, meta, now}));
  const double samples = meta["samples"].get<double>();
  FEDCASE_RETURN_IF_ERROR(r.sum->add(blob->data.data(), blob->data.size(), samples));
  r.received[client] = meta;
  r.samples += samples;
  r.loss_sum += meta.value("loss_sum", 0.0);
  auto c = s.clients.find(client);
  if (c != s.clients.end()) s.touch(c->second, now);
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
  storage::JobRecord record{0, config->name, config->to_json(), "running", json::object(), now};
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
           {"server_optimizer", job->optimizer->name()}};
    if (job->round) {
      out["current_round"] = {{"round", job->round->record.index},
                              {"invited", job->round->invited.size()},
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
  double now = now_unix();
  json out = json::array();
  for (const auto& [id, c] : s.clients) {
    out.push_back({{"client_id", id},
                   {"info", c.record.info},
                   {"profile", c.record.profile},
                   {"registered_at", c.record.registered_at},
                   {"last_seen", c.record.last_seen},
                   {"available", now - c.record.last_seen <= s.config.client_timeout_s}});
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
        ActiveRound& r = *job->round;
        if (r.closing) continue;
        bool filled = r.received.size() >= job->config.clients_per_round;
        if (!filled && now < r.record.deadline) continue;
        if (r.received.size() < job->config.min_updates) {
          s.fail_round(*job, now, "deadline passed with " + std::to_string(r.received.size()) +
                                      " updates, " + std::to_string(job->config.min_updates) +
                                      " needed");
          continue;
        }
        r.closing = true;
        std::vector<ClientId> finished;
        for (const auto& [client, meta] : r.received) finished.push_back(client);
        json stats = {{"updates", r.received.size()},
                      {"invited", r.invited.size()},
                      {"finished", finished},
                      {"dropped", State::dropped(r, filled)},
                      {"samples", r.samples},
                      {"train_loss", r.samples > 0 ? r.loss_sum / r.samples : 0.0}};
        closing.push_back({job.get(), r.record, std::move(r.sum), job->params, std::move(stats)});
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
