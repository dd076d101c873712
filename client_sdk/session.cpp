#include "client_sdk/session.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "client_sdk/http_client.h"
#include "client_sdk/local_data.h"
#include "common/blob.h"
#include "common/crypto.h"
#include "common/log.h"

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

// A job's TorchScript module held locally, by checksum.
struct CachedModule {
  std::string checksum;
  std::shared_ptr<const std::string> bytes;
};

// The task's training settings; kInvalidArgument naming the field for a value no trainer
// should be given (a coordinator never sends one).
Result<TrainSettings> train_settings(const json& task) {
  const json& t = task.at("train");
  TrainSettings s;
  const int64_t batch_size = t.value("batch_size", int64_t(32));
  s.batch_size = batch_size < 1 ? 0 : size_t(batch_size);
  s.lr = t.value("lr", 0.05);
  s.momentum = t.value("momentum", 0.0);
  s.weight_decay = t.value("weight_decay", 0.0);
  s.prox_mu = t.value("prox_mu", 0.0);
  Status valid = ml::validate_train_options(s);
  if (!valid.ok()) return invalid_argument("task " + valid.message());
  return s;
}

// Whether `e` keeps the Evaluation contract (trainer.h), which the coordinator enforces: a
// report that breaks it would get the whole update refused.
bool valid_evaluation(const Evaluation& e) {
  if (e.samples == 0 || !std::isfinite(e.loss) || e.loss < 0 || e.metrics.size() > 16) {
    return false;
  }
  for (const auto& [name, value] : e.metrics) {
    if (name.empty() || name.size() > 64 || !std::isfinite(value) || value < 0) return false;
    for (char c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
    }
    if (name == "accuracy" && value > 1) return false;
  }
  return true;
}

json evaluation_json(uint64_t version, const Evaluation& e) {
  return {
      {"model_version", version}, {"samples", e.samples}, {"loss", e.loss}, {"metrics", e.metrics}};
}

}  // namespace

struct Session::Impl {
  SessionConfig config;
  SessionStats stats;
  HttpClient http;
  std::string token;
  ClientId id = 0;
  std::optional<CachedModel> cached;
  std::optional<CachedModule> module;
  std::string prepared;                    // the model the trainer is prepared for (its key)
  std::pair<std::string, Status> refused;  // the last model the trainer refused, and why
  std::unique_ptr<LocalData> local;
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
    if (j.is_object() && j.contains("error") && j["error"].is_object()) {
      return j["error"].value("message", r.body);
    }
    return "HTTP " + std::to_string(r.status);
  }

  Status register_client() {
    json device = config.device;
    if (!device.contains("sample_bytes")) device["sample_bytes"] = local->mean_sample_bytes();
    json body = {{"device", device},
                 {"dataset_size", config.train_data->count()},
                 {"sdk_version", "fedcase-sdk/1"}};
    if (config.cache_capacity_bytes > 0) body["cache_capacity_bytes"] = config.cache_capacity_bytes;
    if (!config.labels.empty()) body["labels"] = config.labels;
    token.clear();
    auto r = call("POST", "/v1/clients/register", body.dump(),
                  {{"Content-Type", "application/json"}}, config.request_timeout_s);
    if (!r.ok()) return r.status();
    if (r->status != 201) return unavailable("registration refused: " + error_text(*r));
    json j = json::parse(r->body, nullptr, false);
    if (!j.is_object() || !j.contains("token") || !j["token"].is_string() ||
        !j.contains("client_id") || !j["client_id"].is_number_unsigned()) {
      return internal_error("bad registration reply");
    }
    token = j["token"].get<std::string>();
    id = j["client_id"].get<ClientId>();
    log(LogLevel::kDebug, "registered as client " + std::to_string(id));
    return ok_status();
  }

  // Downloads the task's model unless the cached version matches.
  Status fetch_model(const json& task) {
    uint64_t version = task.at("model_version").get<uint64_t>();
    std::string checksum = task.at("model_checksum").get<std::string>();
    if (cached && cached->version == version && cached->checksum == checksum) return ok_status();
    std::map<std::string, std::string> headers;
    if (cached && cached->checksum == checksum) headers["If-None-Match"] = "\"" + checksum + "\"";
    auto r =
        call("GET", task.at("model_url").get<std::string>(), "", headers, config.request_timeout_s);
    if (!r.ok()) return r.status();
    if (r->status != 200) return unavailable("model download refused: " + error_text(*r));
    auto blob = decode_blob(r->body, r->body.size());
    if (!blob.ok()) return blob.status();
    if (blob_checksum(r->body) != checksum) return unavailable("model checksum mismatch");
    cached = CachedModel{version, checksum, std::move(blob).value()};
    stats.model_downloads++;
    return ok_status();
  }

  // Downloads the task's TorchScript module unless the cached one has its checksum.
  Status fetch_module(const json& task) {
    const std::string checksum = task.at("module_checksum").get<std::string>();
    if (module && module->checksum == checksum) return ok_status();
    auto r =
        call("GET", task.at("module_url").get<std::string>(), "", {}, config.request_timeout_s);
    if (!r.ok()) return r.status();
    if (r->status != 200) return unavailable("module download refused: " + error_text(*r));
    if (sha256_hex(r->body) != checksum) return unavailable("module checksum mismatch");
    module = CachedModule{checksum, std::make_shared<const std::string>(std::move(r->body))};
    return ok_status();
  }

  // Prepares the trainer for the task's model unless it is prepared for it already.
  Status prepare_trainer(const json& task) {
    ModelInfo info{task.at("model").get<std::string>(), task.value("loss", "cross_entropy"),
                   nullptr, cached->blob.layout};
    if (info.kind == "torchscript") {
      FEDCASE_RETURN_IF_ERROR(fetch_module(task));
      info.module = module->bytes;
    }
    const std::string key = info.kind + "|" + info.loss + "|" +
                            (info.module ? module->checksum : std::string()) + "|" +
                            info.layout.describe();
    if (key == prepared) return ok_status();
    if (key == refused.first) return refused.second;  // the trainer said no to this model
    prepared.clear();
    Status s = config.trainer->prepare(info);
    if (!s.ok()) {
      refused = {key, s};
      return s;
    }
    prepared = key;
    return ok_status();
  }

  // The held-out evaluation the task asks for, or null when it asks none or there are no
  // held-out samples. An evaluation that fails is logged and not reported.
  json evaluate(const json& task) {
    auto it = task.find("evaluate");
    if (it == task.end() || !config.eval_data || config.eval_data->count() == 0) return nullptr;
    auto e = evaluate_held_out(*config.trainer, cached->blob.data, *config.eval_data,
                               it->value("max_samples", uint64_t(0)));
    if (!e.ok()) {
      log(LogLevel::kWarn, "evaluation failed: " + e.status().to_string());
      return nullptr;
    }
    if (!valid_evaluation(*e)) {
      log(LogLevel::kWarn,
          "evaluation not reported: the trainer's figures break the contract "
          "(samples >= 1, finite non-negative loss and metrics, accuracy <= 1)");
      return nullptr;
    }
    return evaluation_json(cached->version, *e);
  }

  // Trains on the local samples from the cached model; returns the upload body and metadata.
  Result<std::pair<std::string, json>> train(const json& task) {
    auto directives = parse_data_directives(task);
    if (!directives.ok()) return directives.status();
    auto settings = train_settings(task);
    if (!settings.ok()) return settings.status();
    FEDCASE_RETURN_IF_ERROR(prepare_trainer(task));
    std::optional<ComputeSlots::Hold> slot;
    if (config.compute_slots) slot.emplace(*config.compute_slots);
    json evaluation = evaluate(task);
    auto round = local->train_round(*config.trainer, cached->blob.data, *settings, *directives);
    slot.reset();
    if (!round.ok()) return round.status();
    std::vector<float>& delta = round->parameters;
    for (size_t i = 0; i < delta.size(); ++i) delta[i] -= cached->blob.data[i];
    ModelBlob update{cached->version, cached->blob.layout, std::move(delta)};
    const RoundStats& stats = round->stats;
    json meta = {{"samples", stats.samples},
                 {"loss_sum", stats.loss_sum},
                 {"loss_sq_sum", stats.loss_sq_sum},
                 {"compute_s", stats.compute_s},
                 {"io_s", stats.io_s},
                 {"cache_hits", stats.cache_hits},
                 {"cache_misses", stats.cache_misses},
                 {"bytes_read", stats.bytes_read}};
    if (!evaluation.is_null()) meta["evaluation"] = std::move(evaluation);
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
          call("GET", task.at("status_url").get<std::string>(), "", {}, config.request_timeout_s);
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
      r = call("POST", task.at("upload_url").get<std::string>(), body,
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

  Status open_local_data() {
    if (!config.trainer) return invalid_argument("the session needs a trainer");
    LocalDataConfig c;
    c.source = config.train_data.get();
    c.sampler.seed = config.seed;
    c.state_dir = config.state_dir;
    c.cache_capacity_bytes = config.cache_capacity_bytes;
    auto opened = LocalData::open(std::move(c));
    if (!opened.ok()) return opened.status();
    local = std::move(opened).value();
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
      } catch (const std::exception& e) {  // the app's trainer or source threw
        s = internal_error(std::string("task failed: ") + e.what());
      }
      if (!s.ok()) {
        log(LogLevel::kDebug, "task: " + s.to_string());
        back_off(stop);
      }
    }
  }
};

Result<std::unique_ptr<Session>> Session::create(SessionConfig config) {
  const ConnectionOptions& c = config.coordinator;
  if (c.cert_file.empty() != c.key_file.empty() || (!c.cert_file.empty() && !c.tls())) {
    return invalid_argument("a client certificate and key go together, and need a CA file");
  }
  auto impl = std::make_unique<Impl>(std::move(config));
  FEDCASE_RETURN_IF_ERROR(impl->open_local_data());
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;
void Session::run(const std::atomic<bool>& stop) { impl_->run(stop); }
ClientId Session::client_id() const { return impl_->id; }
const SessionStats& Session::stats() const { return impl_->stats; }

}  // namespace fedcase::client
