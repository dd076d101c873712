#include "client_sdk/session.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "client_sdk/check_in_pacer.h"
#include "client_sdk/http_client.h"
#include "client_sdk/local_data.h"
#include "client_sdk/secure_task.h"
#include "client_sdk/update_encoding.h"
#include "common/blob.h"
#include "common/crypto.h"
#include "common/json_read.h"
#include "common/log.h"
#include "protocol/check_in.h"
#include "protocol/error_reply.h"
#include "protocol/registration.h"
#include "protocol/task_offer.h"
#include "protocol/task_status.h"
#include "protocol/update_meta.h"
#include "protocol/upload_session.h"

namespace fedcase::client {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// Times a request answered 503 is asked again (after its Retry-After) before it is returned: a
// replica catching up with the store, an upload whose round's last places are held by uploads
// being checked, a buffer between two versions.
constexpr int kBusyRetries = 4;
// How many cuts in a row that brought no byte further a download is resumed after before the
// SDK gives it up (Session::download): a link that drops every 100 MB still delivers a model
// of any size.
constexpr int kDownloadResumes = 8;
// The same for an update sent in chunks (Session::upload_in_chunks): cut chunks in a row
// without one stored in between.
constexpr int kChunkResumes = 8;
// An update's chunks sent ahead of their answers: two keep a slow link busy while the
// coordinator stores one (docs/deployment.md, "Large models over a flaky link").
constexpr size_t kChunksInFlight = 2;
// What the session tells the coordinator it is, besides its protocol version.
constexpr const char* kSdkVersion = "fedcase-sdk/1";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// A model version held locally: its job, layout, values and checksum.
struct CachedModel {
  JobId job = 0;
  uint64_t version = 0;
  std::string checksum;
  ModelBlob blob;
};

// A job's TorchScript module held locally, by checksum.
struct CachedModule {
  std::string checksum;
  std::shared_ptr<const std::string> bytes;
};

// The trainer's settings for the task's `train` (which protocol/ has checked).
TrainSettings train_settings(const protocol::TrainingSettings& t) {
  TrainSettings s;
  s.batch_size = t.batch_size;
  s.lr = t.lr;
  s.momentum = t.momentum;
  s.weight_decay = t.weight_decay;
  s.prox_mu = t.prox_mu;
  return s;
}

// A JSON answer of the coordinator read with `read`, or why it could not be.
template <class T>
Result<T> read_answer(const std::string& body, Result<T> (*read)(const json&)) {
  auto parsed = parse_untrusted_json(body);
  if (!parsed.ok()) return parsed.status();
  return read(*parsed);
}

}  // namespace

struct Session::Impl {
  SessionConfig config;
  SessionStats stats;
  // One client per coordinator address (config.coordinator, then config.replicas), and the
  // one requests go to now.
  std::vector<std::unique_ptr<HttpClient>> http;
  size_t current = 0;
  std::string token;
  ClientId id = 0;
  // The client's long-term Ed25519 key, registered with it: it signs the keys the client
  // advertises in secure rounds (docs/secure_aggregation.md, "Signed keys"). Drawn once per
  // session; a session registers anew (a new id) on every start.
  secagg::KeyPair signing;
  std::optional<CachedModel> cached;
  // Secure asynchronous jobs (ready cohorts): the newest update reported ready, by job, kept
  // for the cohort that masks it (its task comes later; a new training task replaces it).
  struct ReadyUpdate {
    std::vector<float> delta;
    protocol::UpdateMeta meta;
  };
  std::map<JobId, ReadyUpdate> ready_updates;
  std::optional<CachedModule> module;
  std::string prepared;                    // the model the trainer is prepared for (its key)
  std::pair<std::string, Status> refused;  // the last model the trainer refused, and why
  std::unique_ptr<LocalData> local;
  // The values of the buffers a job keeps on this device (TaskOffer::local_buffers), by job
  // and tensor name: trained here, never uploaded; kept for the session's life.
  std::map<std::pair<JobId, std::string>, std::vector<float>> local_buffers;
  std::optional<UpdateEncoder> encoder;  // made at the first upload, from the session's rng
  protocol::DeviceInfo device;  // config.device, read once
  std::mt19937_64 rng;
  double backoff_s = 0.1;
  CheckInPacer pacer;
  const std::atomic<bool>* stop = nullptr;  // run()'s

  explicit Impl(SessionConfig c)
      : config(std::move(c)), rng(config.seed), pacer(config.reconnect_window_s, config.seed) {
    http.push_back(std::make_unique<HttpClient>(config.coordinator));
    for (const ConnectionOptions& replica : config.replicas) {
      http.push_back(std::make_unique<HttpClient>(replica));
    }
  }

  void log(LogLevel level, const std::string& message) {
    log_message(level, config.name + ": " + message);
  }

  // Seconds on the steady clock, the pacer's time.
  static double now_s() {
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
  }

  // Sleeps until `until_s` (now_s's clock), unless stopping.
  static void sleep_until(double until_s, const std::atomic<bool>& stop) {
    while (!stop && now_s() < until_s) {
      std::this_thread::sleep_for(std::chrono::duration<double>(std::min(0.02, until_s - now_s())));
    }
  }

  // Sleeps for the current backoff (with jitter) and doubles it, unless stopping.
  void back_off(const std::atomic<bool>& stop) {
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    sleep_until(now_s() + backoff_s * jitter(rng), stop);
    backoff_s = std::min(config.max_backoff_s, backoff_s * 2);
  }

  // No coordinator answered a check-in: waits for the pacer's next try (a fleet cut off at
  // once comes back spread over the reconnect window).
  void wait_for_coordinator(const std::atomic<bool>& stop) {
    stats.reconnects++;
    sleep_until(pacer.unreachable(now_s()), stop);
  }

  // One request, to the current coordinator or, when it cannot be reached, to the next of
  // the replicas. An answer 503 (a replica catching up with the store, a round between two
  // versions) is asked again after its Retry-After, a few times, before it is returned.
  // The Authorization header's value: the client's token, the enrollment token until it has one.
  std::string authorization() const {
    return "Bearer " + (token.empty() ? config.enrollment_token : token);
  }

  Result<HttpResponse> call(const std::string& method, const std::string& target,
                            const std::string& body, std::map<std::string, std::string> headers,
                            double timeout_s, bool keep_partial = false) {
    headers["Authorization"] = authorization();
    Result<HttpResponse> r = reach(method, target, body, headers, timeout_s, keep_partial);
    for (int again = 0; again < kBusyRetries && r.ok() && r->status == 503; ++again) {
      const double wait_s = std::clamp(std::atof(r->header("retry-after").c_str()), 0.1, 2.0);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
      r = reach(method, target, body, headers, timeout_s, keep_partial);
    }
    return r;
  }

  // GETs an immutable body (a model, a module) whose ETag is "<checksum>", resuming where a
  // dropped connection cut it off (Range from the bytes that arrived, If-Range with the ETag),
  // until kDownloadResumes cuts in a row brought nothing; then the whole body as one 200 answer. Other answers (304,
  // 403, ...) are returned as they came.
  Result<HttpResponse> download(const std::string& url, const std::string& checksum,
                                std::map<std::string, std::string> headers) {
    const std::string etag = "\"" + checksum + "\"";
    std::string received;
    for (int fruitless = 0;;) {
      const size_t before = received.size();
      if (!received.empty()) {
        headers["Range"] = "bytes=" + std::to_string(received.size()) + "-";
        headers["If-Range"] = etag;
      }
      auto r = call("GET", url, "", headers, config.request_timeout_s, /*keep_partial=*/true);
      if (!r.ok()) return r.status();
      const bool rest = r->status == 206 && !received.empty() &&
                        r->header("content-range").rfind(
                            "bytes " + std::to_string(received.size()) + "-", 0) == 0;
      if (rest) {
        received += r->body;
      } else if (r->status == 200) {
        received = std::move(r->body);  // the whole body (again)
      } else {
        return r;
      }
      if (!r->cut) {
        HttpResponse whole = std::move(r).value();
        whole.status = 200;
        whole.body = std::move(received);
        return whole;
      }
      fruitless = received.size() > before ? 0 : fruitless + 1;
      if (fruitless > kDownloadResumes) {
        return unavailable("the download of " + url + " was cut off " +
                           std::to_string(fruitless) + " times in a row without progress");
      }
      stats.download_resumes++;
      log(LogLevel::kDebug, "the download of " + url + " was cut off at byte " +
                                std::to_string(received.size()) + ": resuming");
    }
  }

  // Sends `body`, an encoded update, as an upload session (docs/protocol.md, "Uploads in
  // chunks"): opens it (the coordinator resumes one opened for the same bytes), then PUTs each
  // chunk from the byte the coordinator has, kChunksInFlight at a time on one connection
  // (HttpClient::send): the next chunk travels while the coordinator stores the one before. A
  // chunk cut off by a dropped connection is followed by a GET of where the session stands,
  // and the upload goes on from there, until kChunkResumes cuts in a row stored nothing.
  // Returns the last chunk's answer (a plain upload's), or the first answer that is neither
  // progress nor the session opening (a 409, a 410 "no longer needed").
  Result<HttpResponse> upload_in_chunks(const protocol::TaskOffer& task, const std::string& body,
                                        std::map<std::string, std::string> headers) {
    headers["Content-Type"] = "application/json";
    const protocol::UploadOpen open{body.size(), sha256_hex(body)};
    auto opened = call("POST", task.uploads_url, protocol::write_upload_open(open).dump(), headers,
                       config.request_timeout_s);
    if (!opened.ok() || opened->status != 201) return opened;
    auto state = read_answer(opened->body, protocol::read_upload_state);
    if (!state.ok()) return state.status();
    const auto chunk_length = [&](uint64_t first) {
      return std::min<uint64_t>(state->chunk_bytes, body.size() - first);
    };
    std::deque<uint64_t> in_flight;  // the first bytes of the chunks sent, oldest first
    uint64_t next = state->received;  // the first byte of the next chunk to send
    uint64_t tried_up_to = 0;         // the end of the furthest chunk sent, or tried
    int busy = 0;
    for (int fruitless = 0;;) {
      HttpClient& link = *http[current];
      Status sent = ok_status();
      while (sent.ok() && in_flight.size() < kChunksInFlight && next < body.size()) {
        const uint64_t length = chunk_length(next);
        tried_up_to = std::max(tried_up_to, next + length);
        const std::map<std::string, std::string> chunk_headers = {
            {"Authorization", authorization()},
            {"Content-Type", "application/octet-stream"},
            {"Content-Range",
             protocol::write_content_range({next, next + length - 1, body.size()})}};
        sent = link.send("PUT", state->url, std::string_view(body).substr(next, length),
                         chunk_headers, config.request_timeout_s);
        stats.chunk_bytes_sent += length;
        if (sent.ok()) {
          in_flight.push_back(next);
          next += length;
        }
      }
      Result<HttpResponse> put = sent.ok() ? link.receive(config.request_timeout_s)
                                           : Result<HttpResponse>(sent);
      const uint64_t first = in_flight.empty() ? next : in_flight.front();
      if (put.ok() && put->status == 200) {
        in_flight.pop_front();
        auto stands = read_answer(put->body, protocol::read_upload_state);
        if (!stands.ok()) return put;  // the last chunk: the update's answer
        if (stands->received <= first || stands->received >= body.size()) {
          return internal_error("upload session " + state->url + " went from byte " +
                                std::to_string(first) + " to byte " +
                                std::to_string(stands->received));
        }
        if (stands->received != first + chunk_length(first)) {
          // Not where the chunks sent after it start: send again from there.
          link.disconnect();
          in_flight.clear();
          next = stands->received;
        }
        state = std::move(stands);
        fruitless = busy = 0;
        continue;
      }
      // Any other answer ends what was sent after the chunk: those chunks are sent again.
      link.disconnect();
      in_flight.clear();
      next = first;
      if (put.ok() && put->status == 503 && busy++ < kBusyRetries) {
        const double wait_s = std::clamp(std::atof(put->header("retry-after").c_str()), 0.1, 2.0);
        std::this_thread::sleep_for(std::chrono::duration<double>(wait_s));
        continue;
      }
      if (put.ok() || put.status().code() != Code::kUnavailable) return put;
      if (++fruitless > kChunkResumes) {
        return unavailable("the upload to " + state->url + " was cut off " +
                           std::to_string(fruitless) + " times in a row without progress");
      }
      stats.upload_resumes++;
      log(LogLevel::kDebug, "the chunk at byte " + std::to_string(first) + " of " + state->url +
                                " was cut off: asking where the upload stands");
      auto asked = call("GET", state->url, "", {}, config.request_timeout_s);
      if (!asked.ok()) continue;  // sent again from where it was
      if (asked->status == 404 && tried_up_to == body.size()) {
        // The last chunk arrived and the session ended; its answer was lost. The task's
        // status says whether the update was taken.
        return last_chunk_outcome(task);
      }
      if (asked->status != 200) return asked;
      auto stands = read_answer(asked->body, protocol::read_upload_state);
      if (!stands.ok()) return stands.status();
      if (stands->received > state->received) fruitless = 0;
      state = std::move(stands);
      next = state->received;
    }
  }

  // The answer to an update whose last chunk arrived but whose answer was lost: 200 when the
  // round says it already has the client's update, else the status answer as it came.
  Result<HttpResponse> last_chunk_outcome(const protocol::TaskOffer& task) {
    auto status = call("GET", task.status_url, "", {}, config.request_timeout_s);
    if (!status.ok() || status->status != 200) return status;
    auto answer = read_answer(status->body, protocol::read_task_status);
    if (answer.ok() && !answer->needed && answer->reason == "already uploaded") {
      HttpResponse accepted = std::move(status).value();
      return accepted;
    }
    HttpResponse refused = std::move(status).value();
    refused.status = 409;
    return refused;
  }

  Result<HttpResponse> reach(const std::string& method, const std::string& target,
                             const std::string& body,
                             const std::map<std::string, std::string>& headers, double timeout_s,
                             bool keep_partial) {
    Result<HttpResponse> r =
        http[current]->request(method, target, body, headers, timeout_s, keep_partial);
    for (size_t tried = 1;
         !r.ok() && r.status().code() == Code::kUnavailable && tried < http.size(); ++tried) {
      current = (current + 1) % http.size();
      stats.failovers++;
      log(LogLevel::kDebug, "coordinator unreachable (" + r.status().message() +
                                "): trying replica " + std::to_string(current));
      r = http[current]->request(method, target, body, headers, timeout_s, keep_partial);
    }
    return r;
  }

  // The message of the coordinator's error answer, else its HTTP status.
  static std::string error_text(const HttpResponse& r) {
    auto error = read_answer(r.body, protocol::read_error_reply);
    return error.ok() ? error->message : "HTTP " + std::to_string(r.status);
  }

  Status register_client() {
    protocol::Registration registration;
    registration.sdk_version = kSdkVersion;
    registration.dataset_size = config.train_data->count();
    registration.cache_capacity_bytes = config.cache_capacity_bytes;
    registration.device = device;
    if (registration.device.sample_bytes == 0) {
      registration.device.sample_bytes = double(local->mean_sample_bytes());
    }
    registration.labels = config.labels;
    registration.signing_public_key = std::string(secagg::as_view(signing.public_key));
    token.clear();
    auto r = call("POST", "/v1/clients/register", protocol::write_registration(registration).dump(),
                  {{"Content-Type", "application/json"}}, config.request_timeout_s);
    if (!r.ok()) return r.status();
    if (r->status != 201) {
      // A 4xx will be the same next time (a protocol version the coordinator does not serve,
      // a bad label): say so where the app's operator looks.
      const bool permanent = r->status >= 400 && r->status < 500 && r->status != 429;
      if (permanent) log(LogLevel::kWarn, "registration refused: " + error_text(*r));
      return unavailable("registration refused: " + error_text(*r));
    }
    auto reply = read_answer(r->body, protocol::read_registration_reply);
    if (!reply.ok()) return internal_error("bad registration reply: " + reply.status().message());
    token = reply->token;
    id = reply->client_id;
    log(LogLevel::kDebug, "registered as client " + std::to_string(id));
    return ok_status();
  }

  // Downloads the task's model unless the cached version matches: only the part the job trains
  // when the job trains part of its model and the cache holds the rest, else the whole model.
  Status fetch_model(const protocol::TaskOffer& task) {
    const uint64_t version = task.model_version;
    const std::string& checksum = task.model_checksum;
    if (cached && cached->version == version && cached->checksum == checksum) return ok_status();
    if (!task.trainable.empty() && cached && cached->job == task.job) {
      const Status merged = fetch_trainable_part(task);
      if (merged.ok()) return ok_status();
      log(LogLevel::kDebug, "downloading the whole model: " + merged.to_string());
    }
    std::map<std::string, std::string> headers;
    if (cached && cached->checksum == checksum) headers["If-None-Match"] = "\"" + checksum + "\"";
    auto r = download(task.model_url, checksum, headers);
    if (!r.ok()) return r.status();
    if (r->status != 200) return unavailable("model download refused: " + error_text(*r));
    auto blob = decode_blob(r->body, r->body.size());
    if (!blob.ok()) return blob.status();
    if (blob_checksum(r->body) != checksum) return unavailable("model checksum mismatch");
    cached = CachedModel{task.job, version, checksum, std::move(blob).value()};
    stats.model_downloads++;
    return ok_status();
  }

  // Downloads the part of the task's model its job trains and merges it into the cached model
  // of the job (whose other tensors are frozen); the merged model must have the task's
  // checksum. On an error the cache is as it was.
  Status fetch_trainable_part(const protocol::TaskOffer& task) {
    auto r = download(task.trainable_url, "", {});
    if (!r.ok()) return r.status();
    if (r->status != 200) return unavailable("trainable part refused: " + error_text(*r));
    auto part = decode_blob(r->body, r->body.size());
    if (!part.ok()) return part.status();
    if (part->model_version != task.model_version ||
        part->layout != carried_layout(cached->blob.layout, task.trainable)) {
      return unavailable("the trainable part is not the task's");
    }
    ModelBlob merged = cached->blob;
    merged.model_version = task.model_version;
    size_t at = 0;
    for_each_named(merged.layout, task.trainable, [&](const TensorSpec& tensor, size_t offset) {
      std::copy_n(part->data.begin() + at, tensor.element_count(), merged.data.begin() + offset);
      at += tensor.element_count();
    });
    if (blob_checksum(encode_blob(merged)) != task.model_checksum) {
      return unavailable("the merged model's checksum is not the task's");
    }
    cached = CachedModel{task.job, task.model_version, task.model_checksum, std::move(merged)};
    stats.model_downloads++;
    stats.trainable_downloads++;
    return ok_status();
  }

  // Downloads the task's TorchScript module unless the cached one has its checksum.
  Status fetch_module(const protocol::TaskOffer& task) {
    const std::string& checksum = task.module_checksum;
    if (checksum.empty()) return invalid_argument("a torchscript task names no module");
    if (module && module->checksum == checksum) return ok_status();
    auto r = download(task.module_url, checksum, {});
    if (!r.ok()) return r.status();
    if (r->status != 200) return unavailable("module download refused: " + error_text(*r));
    if (sha256_hex(r->body) != checksum) return unavailable("module checksum mismatch");
    module = CachedModule{checksum, std::make_shared<const std::string>(std::move(r->body))};
    return ok_status();
  }

  // Prepares the trainer for the task's model unless it is prepared for it already.
  Status prepare_trainer(const protocol::TaskOffer& task) {
    ModelInfo info{task.model, task.loss, nullptr, cached->blob.layout, task.trainable};
    if (info.kind == "torchscript") {
      FEDCASE_RETURN_IF_ERROR(fetch_module(task));
      info.module = module->bytes;
    }
    std::string key = info.kind + "|" + info.loss + "|" +
                      (info.module ? module->checksum : std::string()) + "|" +
                      info.layout.describe();
    for (const std::string& name : info.trainable) key += "|" + name;
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

  // The held-out evaluation the task asks for, or nullopt when it asks none or there are no
  // held-out samples. An evaluation that fails, or whose figures the coordinator would
  // refuse, is logged and not reported.
  std::optional<protocol::EvalReport> evaluate(const protocol::TaskOffer& task,
                                               const std::vector<float>& model) {
    if (!task.evaluate || !config.eval_data || config.eval_data->count() == 0) return std::nullopt;
    auto e = evaluate_held_out(*config.trainer, model, *config.eval_data,
                               task.evaluate->max_samples);
    if (!e.ok()) {
      log(LogLevel::kWarn, "evaluation failed: " + e.status().to_string());
      return std::nullopt;
    }
    protocol::EvalReport report{cached->version, e->samples, e->loss, e->metrics};
    if (Status valid = protocol::validate_eval_report(report); !valid.ok()) {
      log(LogLevel::kWarn, "evaluation not reported: the trainer's figures break the contract (" +
                               valid.message() + ")");
      return std::nullopt;
    }
    return report;
  }

  // The model this device starts the task from: the task's, with the device's own values of
  // the buffers the job keeps on devices once it has some.
  std::vector<float> starting_model(const protocol::TaskOffer& task) const {
    std::vector<float> model = cached->blob.data;
    for_each_named(cached->blob.layout, task.local_buffers,
                   [&](const TensorSpec& tensor, size_t offset) {
                     auto kept = local_buffers.find({task.job, tensor.name});
                     if (kept == local_buffers.end() ||
                         kept->second.size() != tensor.element_count()) {
                       return;
                     }
                     std::copy(kept->second.begin(), kept->second.end(), model.begin() + offset);
                   });
    return model;
  }

  // Trains on the local samples from the cached model; returns the delta (the trained model
  // minus the one it started from; zero for the buffers the device keeps, which it keeps
  // here) and the update's metadata.
  Result<std::pair<std::vector<float>, protocol::UpdateMeta>> train(
      const protocol::TaskOffer& task) {
    FEDCASE_RETURN_IF_ERROR(prepare_trainer(task));
    std::optional<ComputeSlots::Hold> slot;
    if (config.compute_slots) slot.emplace(*config.compute_slots);
    protocol::UpdateMeta meta;
    const std::vector<float> start = starting_model(task);
    meta.evaluation = evaluate(task, start);
    auto round =
        local->train_round(*config.trainer, start, train_settings(task.train), data_directives(task));
    slot.reset();
    if (!round.ok()) return round.status();
    std::vector<float>& delta = round->parameters;
    for_each_named(cached->blob.layout, task.local_buffers,
                   [&](const TensorSpec& tensor, size_t offset) {
                     const size_t count = tensor.element_count();
                     local_buffers[{task.job, tensor.name}].assign(
                         delta.begin() + offset, delta.begin() + offset + count);
                     std::copy_n(start.begin() + offset, count, delta.begin() + offset);
                   });
    for (size_t i = 0; i < delta.size(); ++i) delta[i] -= start[i];
    // The update carries the trained tensors only (all of them unless the job names some).
    delta = carried_part(0, cached->blob.layout, std::move(delta), task.trainable).data;
    const RoundStats& stats = round->stats;
    meta.samples = stats.samples;
    meta.loss_sum = stats.loss_sum;
    meta.loss_sq_sum = stats.loss_sq_sum;
    meta.compute_s = stats.compute_s;
    meta.io_s = stats.io_s;
    meta.cache_hits = stats.cache_hits;
    meta.cache_misses = stats.cache_misses;
    meta.bytes_read = stats.bytes_read;
    return std::make_pair(std::move(delta), std::move(meta));
  }

  // A job with secure aggregation: its stages around the training (secure_task.h).
  std::unique_ptr<SecureTask> secure_task(const protocol::TaskOffer& task) {
    auto calls = [this](const std::string& method, const std::string& target,
                        const std::string& body, std::map<std::string, std::string> headers,
                        double timeout_s) {
      return call(method, target, body, std::move(headers), timeout_s);
    };
    return std::make_unique<SecureTask>(task, id, signing.private_key, calls, config.poll_wait_s,
                                        config.request_timeout_s, *stop);
  }

  // One task: fetch, train, upload. Transport failures propagate for backoff.
  Status do_task(const protocol::TaskOffer& task) {
    log(LogLevel::kDebug, "task: job " + std::to_string(task.job) + " round " +
                              std::to_string(task.round) + ", expected to take " +
                              std::to_string(task.expected_duration_s) + " s");
    const protocol::SecAggTask* secagg =
        task.secure_aggregation ? &*task.secure_aggregation : nullptr;
    if (secagg && secagg->staleness_factor) return join_cohort(task);
    std::unique_ptr<SecureTask> secure;
    if (secagg && !secagg->ready()) {
      // Keys are agreed before training, so that only the masked input waits on it.
      secure = secure_task(task);
      FEDCASE_RETURN_IF_ERROR(secure->share_keys());
    } else if (!secagg && config.require_secure_aggregation) {
      stats.tasks_declined++;
      return unavailable("task of job " + std::to_string(task.job) +
                         " declined: its updates are not securely aggregated");
    }
    auto start = Clock::now();
    FEDCASE_RETURN_IF_ERROR(fetch_model(task));
    double download_s = seconds_since(start);
    auto trained = train(task);
    if (!trained.ok()) {
      stats.rounds_failed++;
      return trained.status();
    }
    stats.rounds_trained++;
    auto& [delta, meta] = *trained;
    meta.download_s = download_s;
    // Is the update still needed? (A straggler's may not be.) An answer that does not read is
    // no reason to withhold it.
    auto status = call("GET", task.status_url, "", {}, config.request_timeout_s);
    if (!status.ok()) return status.status();
    if (status->status == 200) {
      auto answer = read_answer(status->body, protocol::read_task_status);
      if (answer.ok() && !answer->needed) {
        stats.updates_skipped++;
        log(LogLevel::kDebug, "update not sent: " + answer->reason);
        return ok_status();
      }
    }
    if (secagg && secagg->ready()) return report_ready(task, std::move(delta), std::move(meta));
    std::map<std::string, std::string> headers = {
        {"Content-Type", "application/octet-stream"},
        {"X-Fedcase-Meta", protocol::write_update_meta(meta).dump()}};
    Result<HttpResponse> r = unavailable("no upload attempted");
    if (secure) {
      // The masked vector replaces the update; its weight is the samples trained on.
      auto masked = secure->mask(delta, meta.samples);
      if (!masked.ok()) return masked.status();
      headers["X-Fedcase-SecAgg"] = masked->header;
      r = call("POST", task.secure_aggregation->masked_input_url, masked->body, headers,
               config.request_timeout_s);
    } else {
      if (!encoder) encoder.emplace(rng());
      const std::string body =
          encoder->encode(task.job, cached->version,
                          carried_layout(cached->blob.layout, task.trainable), std::move(delta),
                          task.compression);
      r = task.chunk_bytes > 0 && body.size() > task.chunk_bytes
              ? upload_in_chunks(task, body, headers)
              : call("POST", task.upload_url, body, headers, config.request_timeout_s);
    }
    return count_answer(r, secure.get());
  }

  // A secure asynchronous job's trained update (docs/secure_aggregation.md, "ready cohorts"):
  // its metadata goes to the task's ready_url, the update stays here for its cohort.
  Status report_ready(const protocol::TaskOffer& task, std::vector<float> delta,
                      protocol::UpdateMeta meta) {
    // Kept before the report: if the coordinator takes it but its answer is lost, the cohort
    // masks this update, never an older one.
    const std::string meta_text = protocol::write_update_meta(meta).dump();
    ready_updates[task.job] = {std::move(delta), std::move(meta)};
    auto r = call("POST", task.secure_aggregation->ready_url, "", {{"X-Fedcase-Meta", meta_text}},
                  config.request_timeout_s);
    if (!r.ok()) return r.status();
    if (r->status != 200) {
      ready_updates.erase(task.job);
      stats.updates_refused++;
      log(LogLevel::kDebug, "ready report refused: " + error_text(*r));
      return ok_status();
    }
    stats.ready_reports++;
    return ok_status();
  }

  // A cohort's task: the update reported ready, masked (its values scaled by the task's
  // staleness factor) in the cohort's secure round. A client that no longer holds it (a
  // restart) sits the cohort out: the round goes on without it.
  Status join_cohort(const protocol::TaskOffer& task) {
    auto kept = ready_updates.find(task.job);
    if (kept == ready_updates.end()) {
      stats.tasks_declined++;
      log(LogLevel::kWarn, "cohort task of job " + std::to_string(task.job) +
                               " declined: no update of it is kept here");
      return ok_status();
    }
    std::unique_ptr<SecureTask> secure = secure_task(task);
    FEDCASE_RETURN_IF_ERROR(secure->share_keys());
    auto masked = secure->mask(kept->second.delta, kept->second.meta.samples);
    if (!masked.ok()) return masked.status();
    auto r = call("POST", task.secure_aggregation->masked_input_url, masked->body,
                  {{"Content-Type", "application/octet-stream"},
                   {"X-Fedcase-Meta", protocol::write_update_meta(kept->second.meta).dump()},
                   {"X-Fedcase-SecAgg", masked->header}},
                  config.request_timeout_s);
    return count_answer(r, secure.get());
  }

  // Counts the answer to an update or masked input; a secure round's accepted input goes on
  // to its unmask stage.
  Status count_answer(const Result<HttpResponse>& r, SecureTask* secure) {
    if (!r.ok()) return r.status();
    if (r->status == 200) {
      stats.updates_accepted++;
      if (secure) {
        FEDCASE_RETURN_IF_ERROR(secure->unmask());
        stats.unmask_answers++;
      }
    } else if (r->status == 410) {
      // An upload session the round no longer needed (filled, closed) was dropped.
      stats.updates_skipped++;
      log(LogLevel::kDebug, "update no longer needed: " + error_text(*r));
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
    auto read_device = protocol::read_device_info(config.device, "config.device");
    if (!read_device.ok()) return read_device.status();
    device = std::move(read_device).value();
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

  // A task poll answered 204: sleeps until the point of its check-in window the pacer drew,
  // with no connection open (pace steering); polls again at once without a window (a
  // coordinator that does not steer). A malformed window is logged and taken as none.
  void check_in_later(const HttpResponse& answer, const std::atomic<bool>& stop_flag) {
    std::optional<protocol::CheckIn> window;
    const std::string header = answer.header("fedcase-check-in");
    if (!header.empty()) {
      auto read = protocol::read_check_in(header);
      if (read.ok()) {
        window = *read;
      } else {
        log(LogLevel::kWarn, read.status().message());
      }
    }
    const double now = now_s();
    const double next = pacer.answered(now, window);
    if (next <= now) return;
    for (auto& client : http) client->disconnect();
    sleep_until(next, stop_flag);
  }

  void run(const std::atomic<bool>& stop_flag) {
    stop = &stop_flag;
    while (!stop_flag) {
      if (token.empty()) {
        Status s = register_client();
        if (!s.ok()) {  // unreachable, or refused (told again later, spread like a return)
          log(LogLevel::kDebug, "register: " + s.to_string());
          wait_for_coordinator(stop_flag);
          continue;
        }
      }
      auto r = call("GET", "/v1/task?wait=" + std::to_string(config.poll_wait_s), "", {},
                    config.poll_wait_s + config.request_timeout_s);
      if (!r.ok()) {
        log(LogLevel::kDebug, r.status().to_string());
        wait_for_coordinator(stop_flag);
        continue;
      }
      if (r->status == 204) {
        backoff_s = 0.1;
        check_in_later(*r, stop_flag);
        continue;
      }
      pacer.answered(now_s(), std::nullopt);
      if (r->status == 401) {  // the coordinator no longer knows us: enroll again
        token.clear();
        continue;
      }
      if (r->status == 429) {
        back_off(stop_flag);
        continue;
      }
      if (r->status != 200) {
        log(LogLevel::kWarn, "task poll: " + error_text(*r));
        back_off(stop_flag);
        continue;
      }
      backoff_s = 0.1;
      auto task = read_answer(r->body, protocol::read_task_offer);
      if (!task.ok()) {  // a coordinator of another protocol version, or a broken one
        log(LogLevel::kWarn, "task refused: " + task.status().message());
        back_off(stop_flag);
        continue;
      }
      Status s;
      try {
        s = do_task(*task);
      } catch (const std::exception& e) {  // the app's trainer or source threw
        s = internal_error(std::string("task failed: ") + e.what());
      }
      if (!s.ok()) {
        log(LogLevel::kDebug, "task: " + s.to_string());
        back_off(stop_flag);
      }
    }
  }
};

Result<std::unique_ptr<Session>> Session::create(SessionConfig config) {
  auto bad = [](const ConnectionOptions& c) {
    return c.cert_file.empty() != c.key_file.empty() || (!c.cert_file.empty() && !c.tls());
  };
  if (bad(config.coordinator) || std::any_of(config.replicas.begin(), config.replicas.end(), bad)) {
    return invalid_argument("a client certificate and key go together, and need a CA file");
  }
  auto impl = std::make_unique<Impl>(std::move(config));
  auto signing = secagg::generate_signing_key();
  if (!signing.ok()) return signing.status();
  impl->signing = *signing;
  FEDCASE_RETURN_IF_ERROR(impl->open_local_data());
  return std::unique_ptr<Session>(new Session(std::move(impl)));
}

Session::Session(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Session::~Session() = default;
void Session::run(const std::atomic<bool>& stop) { impl_->run(stop); }
ClientId Session::client_id() const { return impl_->id; }
const SessionStats& Session::stats() const { return impl_->stats; }

}  // namespace fedcase::client
