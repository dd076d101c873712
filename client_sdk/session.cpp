#include "client_sdk/session.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "client_sdk/http_client.h"
#include "client_sdk/local_trainer.h"
#include "common/blob.h"
#include "common/log.h"
#include "ml/model.h"

namespace fedcase::client {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Uploads tried per task while the round answers 503 (places held by uploads being checked).
constexpr int kUploadAttempts = 10;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A model version held locally: its layout, parameters and checksum.
struct CachedModel {
  uint64_t version = 0;
  std::string checksum;
  ModelBlob blob;
};

}  // namespace

struct Session::Impl {
  SessionConfig config;
  SessionStats stats;
  HttpClient http;
  std::string token;
  ClientId id = 0;
  std::optional<CachedModel> cached;
  std::optional<ml::Model> model;
  std::unique_ptr<LocalTrainer> local;  // opened at the first task
  std::mt19937_64 rng;
  double backoff_s = 0.1;

  explicit Impl(SessionConfig c)
      : config(std::move(c)), http(config.coordinator), rng(config.seed) {}

  void log(LogLevel level, const std::string& message) {
    log_message(level, config.name + ": " + message);
  }

  // Sleeps for the current backoff (with jitter) and doubles it, unless stopping.
  void back_off(const std::atomic<bool>& stop) {
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    auto until = Clock::now() + std::chrono::duration<double>(backoff_s * jitter(rng));
    while (!stop && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    backoff_s = std::min(config.max_backoff_s, backoff_s * 2);
  }

  Result<HttpResponse> call(const std::string& method, const std::string& target,
                            const std::string& body, std::map<std::string, std::string> headers,
                            double timeout_s) {
    headers["Authorization"] = "Bearer " + (token.empty() ? config.enrollment_token : token);
    return http.request(method, target, body, headers, timeout_s);
  }

  // Error statuses from the coordinator's JSON error body.
  static std::string error_text(const HttpResponse& r) {
    json j = json::parse(r.body, nullptr, false);
    if (j.is_object() && j.contains("error")) return j["error"].value("message", r.body);
    return "HTTP " + std::to_string(r.status);
  }

  Status register_client() {
    json device = config.device;
    if (!config.state_dir.empty()) {
      device["sample_bytes"] =
          config.storage.sample_bytes ? config.storage.sample_bytes : config.data->image_bytes();
      if (config.storage.read_bytes_per_s > 0) {
        device["storage_read_bytes_per_s"] = config.storage.read_bytes_per_s;
      }
    }
    json body = {{"device", device},
                 {"dataset_size", config.indices.size()},
                 {"sdk_version", "fedcase-sdk/1"}};
    if (config.cache_capacity_bytes > 0) body["cache_capacity_bytes"] = config.cache_capacity_bytes;
    token.clear();
    auto r = call("POST", "/v1/clients/register", body.dump(),
                  {{"Content-Type", "application/json"}}, config.request_timeout_s);
    if (!r.ok()) return r.status();
    if (r->status != 201) return unavailable("registration refused: " + error_text(*r));
    json j = json::parse(r->body, nullptr, false);
    if (!j.is_object() || !j.contains("token")) return internal_error("bad registration reply");
    token = j["token"].get<std::string>();
    id = j["client_id"].get<ClientId>();
    log(LogLevel::kDebug, "registered as client " + std::to_string(id));
    return ok_status();
  }

  // Downloads the task's model unless the cached version matches.
  Status fetch_model(const json& task) {
    uint64_t version = task["model_version"].get<uint64_t>();
    std::string checksum = task["model_checksum"].get<std::string>();
    if (cached && cached->version == version && cached->checksum == checksum) return ok_status();
    std::map<std::string, std::string> headers;
    if (cached && cached->checksum == checksum) headers["If-None-Match"] = "\"" + checksum + "\"";
    auto r =
        call("GET", task["model_url"].get<std::string>(), "", headers, config.request_timeout_s);
    if (!r.ok()) return r.status();
    if (r->status != 200) return unavailable("model download refused: " + error_text(*r));
    auto blob = decode_blob(r->body, r->body.size());
    if (!blob.ok()) return blob.status();
    if (blob_checksum(r->body) != checksum) return unavailable("model checksum mismatch");
    cached = CachedModel{version, checksum, std::move(blob).value()};
    stats.model_downloads++;
    return ok_status();
  }

  // Trains on the local partition from the cached model; returns the upload body and metadata.
  Result<std::pair<std::string, json>> train(const json& task) {
    auto directives = parse_data_directives(task);
    if (!directives.ok()) return directives.status();
    if (!local) {
      LocalDataConfig c;
      c.data = config.data;
      c.indices = config.indices;
      c.sampler.seed = config.seed;
      c.state_dir = config.state_dir;
      c.storage = config.storage;
      c.cache_capacity_bytes = config.cache_capacity_bytes;
      auto opened = LocalTrainer::open(std::move(c));
      if (!opened.ok()) return opened.status();
      local = std::move(opened).value();
    }
    const std::string arch = task["model"].get<std::string>();
    if (!model || model->arch() != arch) {
      auto m = ml::Model::create(arch, config.seed);
      if (!m.ok()) return m.status();
      model.emplace(std::move(m).value());
    }
    FEDCASE_RETURN_IF_ERROR(model->set_parameters(cached->blob.data));
    const json& t = task["train"];
    ml::TrainOptions options;
    options.batch_size = t.value("batch_size", size_t(32));
    options.lr = t.value("lr", 0.05);
    options.momentum = t.value("momentum", 0.0);
    options.prox_mu = t.value("prox_mu", 0.0);
    std::optional<ComputeSlots::Hold> slot;
    if (config.compute_slots) slot.emplace(*config.compute_slots);
    auto round = local->train_round(*model, options, *directives);
    slot.reset();
    if (!round.ok()) return round.status();
    std::vector<float> delta = model->parameters();
    for (size_t i = 0; i < delta.size(); ++i) delta[i] -= cached->blob.data[i];
    ModelBlob update{cached->version, cached->blob.layout, std::move(delta)};
    json meta = {{"samples", round->samples},
                 {"loss_sum", round->loss_sum},
                 {"loss_sq_sum", round->loss_sq_sum},
                 {"compute_s", round->compute_s},
                 {"io_s", round->io_s},
                 {"cache_hits", round->cache_hits},
                 {"cache_misses", round->cache_misses},
                 {"bytes_read", round->bytes_read}};
    return std::make_pair(encode_blob(update), meta);
  }

  // One task: fetch, train, upload. Transport failures propagate for backoff.
  Status do_task(const json& task) {
    auto start = Clock::now();
    FEDCASE_RETURN_IF_ERROR(fetch_model(task));
    double download_s = seconds_since(start);
    auto trained = train(task);
    if (!trained.ok()) return trained.status();
    stats.rounds_trained++;
    auto& [body, meta] = *trained;
    meta["download_s"] = download_s;
    if (task.contains("status_url")) {  // is the update still needed? (a straggler's may not be)
      auto status =
          call("GET", task["status_url"].get<std::string>(), "", {}, config.request_timeout_s);
      if (!status.ok()) return status.status();
      json answer = json::parse(status->body, nullptr, false);
      if (status->status == 200 && answer.is_object() && answer.value("needed", true) == false) {
        stats.updates_skipped++;
        log(LogLevel::kDebug, "update not sent: " + answer.value("reason", std::string()));
        return ok_status();
      }
    }
    // 503: the round's last places are held by uploads being checked, one of which may be
    // refused; retry after the coordinator's Retry-After while the task's deadline allows.
    const double deadline = task.value("deadline", 0.0);
    Result<HttpResponse> r = unavailable("no upload attempted");
    for (int attempt = 0; attempt < kUploadAttempts; ++attempt) {
      r = call("POST", task["upload_url"].get<std::string>(), body,
               {{"Content-Type", "application/octet-stream"}, {"X-Fedcase-Meta", meta.dump()}},
               config.request_timeout_s);
      if (!r.ok()) return r.status();
      if (r->status != 503) break;
      const double wait_s = std::clamp(std::atof(r->header("retry-after").c_str()), 0.1, 5.0);
      if (unix_now() + wait_s >= deadline) break;
      std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
    }
    if (r->status == 200) {
      stats.updates_accepted++;
    } else {
      // 409: the round closed without us (late) — not an error for the session.
      stats.updates_refused++;
      log(r->status == 409 ? LogLevel::kDebug : LogLevel::kWarn,
          "update refused: " + error_text(*r));
    }
    return ok_status();
  }

  void run(const std::atomic<bool>& stop) {
    while (!stop) {
      if (token.empty()) {
        Status s = register_client();
        if (!s.ok()) {
          log(LogLevel::kDebug, "register: " + s.to_string());
          back_off(stop);
          continue;
        }
      }
      auto r = call("GET", "/v1/task?wait=" + std::to_string(config.poll_wait_s), "", {},
                    config.poll_wait_s + config.request_timeout_s);
      if (!r.ok()) {
        stats.reconnects++;
        log(LogLevel::kDebug, r.status().to_string());
        back_off(stop);
        continue;
      }
      if (r->status == 401) {  // the coordinator no longer knows us: enroll again
        token.clear();
        continue;
      }
      if (r->status == 429) {
        back_off(stop);
        continue;
      }
      if (r->status == 204) {
        backoff_s = 0.1;
        continue;
      }
      if (r->status != 200) {
        log(LogLevel::kWarn, "task poll: " + error_text(*r));
        back_off(stop);
        continue;
      }
      backoff_s = 0.1;
      json task = json::parse(r->body, nullptr, false);
      if (!task.is_object()) continue;
      Status s;
      try {
        s = do_task(task);
      } catch (const json::exception& e) {  // a task without the fields we need
        s = internal_error(std::string("malformed task: ") + e.what());
      }
      if (!s.ok()) {
        log(LogLevel::kDebug, "task: " + s.to_string());
        back_off(stop);
      }
    }
  }
};

Session::Session(SessionConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Session::~Session() = default;
void Session::run(const std::atomic<bool>& stop) { impl_->run(stop); }
ClientId Session::client_id() const { return impl_->id; }
const SessionStats& Session::stats() const { return impl_->stats; }

}  // namespace fedcase::client
