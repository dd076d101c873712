// The C interface (fedcase_client.h) over the C++ SDK: handles that own shared_ptrs to the
// C++ objects, adapters that turn the app's callbacks into a SampleSource and a Trainer, and
// a guard around every entry point and every callback so that no exception crosses the
// boundary in either direction.

#include "client_sdk/fedcase_client.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client_sdk/local_data.h"
#include "client_sdk/session.h"
#include "client_sdk/torchscript_trainer.h"
#include "common/log.h"

using fedcase::Code;
using fedcase::Status;
using namespace fedcase::client;

struct fedcase_source {
  std::shared_ptr<SampleSource> source;
};
struct fedcase_trainer {
  std::shared_ptr<Trainer> trainer;
};
struct fedcase_config {
  SessionConfig config;
};
struct fedcase_session {
  std::unique_ptr<Session> session;
  std::atomic<bool> stop{false};
  std::atomic<bool> running{false};
};
struct fedcase_local_data {
  std::shared_ptr<SampleSource> source;  // LocalData reads it through a raw pointer
  std::unique_ptr<LocalData> data;
};
struct fedcase_record {
  std::string& bytes;
};
struct fedcase_model_info {
  const ModelInfo& info;
};
struct fedcase_samples {
  RoundSamples& samples;
  bool evaluation;
  Status bad_report;  // the first report that broke the contract: it fails the round
  std::vector<float> losses;
};
struct fedcase_evaluation {
  Evaluation result;
  bool set = false;
  Status bad;
};

namespace {

constexpr const char* kVersion = "1.0.0";

thread_local std::string t_last_error;
thread_local std::string t_callback_error;  // what a callback said with fedcase_set_error
thread_local int t_callback_code = 0;       // the last code a callback returned, 0 when none

// Each C++ code and its C number (fedcase_client.h): the numbers are the ABI's and stay put
// when the C++ codes change.
constexpr std::pair<Code, int> kCodes[] = {
    {Code::kOk, FEDCASE_OK},
    {Code::kInvalidArgument, FEDCASE_INVALID_ARGUMENT},
    {Code::kUnauthenticated, FEDCASE_UNAUTHENTICATED},
    {Code::kPermissionDenied, FEDCASE_PERMISSION_DENIED},
    {Code::kNotFound, FEDCASE_NOT_FOUND},
    {Code::kConflict, FEDCASE_CONFLICT},
    {Code::kGone, FEDCASE_GONE},
    {Code::kTooLarge, FEDCASE_TOO_LARGE},
    {Code::kUnprocessable, FEDCASE_UNPROCESSABLE},
    {Code::kResourceExhausted, FEDCASE_RESOURCE_EXHAUSTED},
    {Code::kUnavailable, FEDCASE_UNAVAILABLE},
    {Code::kInternal, FEDCASE_INTERNAL}};

int to_c(Code code) {
  for (const auto& [cpp, c] : kCodes) {
    if (cpp == code) return c;
  }
  return FEDCASE_INTERNAL;
}

// The C++ code of a C number; nullopt for CANCELLED and numbers no code has.
std::optional<Code> from_c(int code) {
  for (const auto& [cpp, c] : kCodes) {
    if (c == code) return cpp;
  }
  return std::nullopt;
}

int fail(int code, const std::string& message) {
  t_last_error = message;
  return code;
}
int fail(const Status& s) { return fail(to_c(s.code()), s.message()); }
int null_argument(const char* what) {
  return fail(FEDCASE_INVALID_ARGUMENT, std::string(what) + " is NULL");
}

// Runs one entry point's body: its exceptions become FEDCASE_INTERNAL with their message.
template <class Body>
int guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    return fail(FEDCASE_INTERNAL, std::string("fedcase: ") + e.what());
  } catch (...) {
    return fail(FEDCASE_INTERNAL, "fedcase: an unknown exception");
  }
}

// A Status for a callback's non-zero return, with the message it set.
Status callback_status(const char* callback, int code) {
  t_callback_code = code;
  std::string message = std::string("the app's ") + callback + " callback returned " +
                        fedcase_code_name(code) + " (" + std::to_string(code) + ")";
  if (!t_callback_error.empty()) message += ": " + t_callback_error;
  const std::optional<Code> c = from_c(code);
  return Status(c && *c != Code::kOk ? *c : Code::kInternal, message);
}

// Calls an app callback: a non-zero return or an exception (a C++ app's) becomes a Status.
template <class Call>
Status call_back(const char* callback, Call&& call) {
  t_callback_error.clear();
  int code;
  try {
    code = call();
  } catch (const std::exception& e) {
    t_callback_error = std::string("it threw: ") + e.what();
    code = FEDCASE_INTERNAL;
  } catch (...) {
    t_callback_error = "it threw";
    code = FEDCASE_INTERNAL;
  }
  return code == FEDCASE_OK ? Status() : callback_status(callback, code);
}

// Reads the fields of an app's struct that its struct_size covers, the rest zeroed.
template <class T>
Status read_struct(const T* in, size_t first_version_size, T& out) {
  if (!in) return fedcase::invalid_argument("the callbacks struct is NULL");
  if (in->struct_size < first_version_size) {
    return fedcase::invalid_argument("struct_size " + std::to_string(in->struct_size) +
                                     " is below the first version's " +
                                     std::to_string(first_version_size));
  }
  std::memset(&out, 0, sizeof out);
  std::memcpy(&out, in, std::min<size_t>(in->struct_size, sizeof out));
  return {};
}

class CallbackSource final : public SampleSource {
 public:
  CallbackSource(const fedcase_source_callbacks& callbacks, size_t count)
      : callbacks_(callbacks), count_(count) {}
  ~CallbackSource() override {
    if (callbacks_.release)
      (void)call_back("release", [&] {
        callbacks_.release(callbacks_.user_data);
        return 0;
      });
  }
  size_t count() const override { return count_; }
  uint64_t sample_bytes(size_t id) const override {
    try {
      return callbacks_.sample_bytes(callbacks_.user_data, id);
    } catch (...) {
      return 0;  // the read of this sample will say what is wrong
    }
  }
  Status read(size_t id, std::string& out) override {
    if (id >= count_)
      return fedcase::invalid_argument("sample " + std::to_string(id) + " of " +
                                       std::to_string(count_));
    fedcase_record record{out};
    return call_back("read", [&] { return callbacks_.read(callbacks_.user_data, id, &record); });
  }

 private:
  fedcase_source_callbacks callbacks_;
  size_t count_;
};

class CallbackTrainer final : public Trainer {
 public:
  explicit CallbackTrainer(const fedcase_trainer_callbacks& callbacks) : callbacks_(callbacks) {}
  ~CallbackTrainer() override {
    if (callbacks_.release)
      (void)call_back("release", [&] {
        callbacks_.release(callbacks_.user_data);
        return 0;
      });
  }

  Status prepare(const ModelInfo& model) override {
    fedcase_model_info info{model};
    return call_back("prepare", [&] { return callbacks_.prepare(callbacks_.user_data, &info); });
  }

  fedcase::Result<std::vector<float>> train(const std::vector<float>& parameters,
                                            RoundSamples& samples,
                                            const TrainSettings& settings) override {
    std::vector<float> out(parameters.size());
    fedcase_samples view{samples, false, {}, {}};
    const fedcase_train_settings c_settings{settings.batch_size, settings.lr, settings.momentum,
                                            settings.weight_decay, settings.prox_mu};
    FEDCASE_RETURN_IF_ERROR(call_back("train", [&] {
      return callbacks_.train(callbacks_.user_data, parameters.data(), parameters.size(), &view,
                              &c_settings, out.data());
    }));
    FEDCASE_RETURN_IF_ERROR(view.bad_report);
    return out;
  }

  fedcase::Result<Evaluation> evaluate(const std::vector<float>& parameters,
                                       RoundSamples& samples) override {
    fedcase_samples view{samples, true, {}, {}};
    fedcase_evaluation evaluation;
    FEDCASE_RETURN_IF_ERROR(call_back("evaluate", [&] {
      return callbacks_.evaluate(callbacks_.user_data, parameters.data(), parameters.size(), &view,
                                 &evaluation);
    }));
    FEDCASE_RETURN_IF_ERROR(evaluation.bad);
    if (!evaluation.set) {
      return fedcase::internal_error("the evaluate callback did not call fedcase_evaluation_set");
    }
    return evaluation.result;
  }

 private:
  fedcase_trainer_callbacks callbacks_;
};

bool metric_name_ok(const char* name) {
  const size_t n = std::strlen(name);
  if (n < 1 || n > 64) return false;
  for (size_t i = 0; i < n; ++i) {
    const char c = name[i];
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  }
  return true;
}

template <class Handle, class Make>
int make_handle(Handle** out, Make&& make) {
  if (!out) return null_argument("out");
  *out = nullptr;
  return guarded([&]() -> int {
    auto made = make();
    if (!made.ok()) return fail(made.status());
    *out = std::move(made).value().release();
    return FEDCASE_OK;
  });
}

template <class Setter>
int set_config(fedcase_config* config, Setter&& setter) {
  if (!config) return null_argument("config");
  return guarded([&]() -> int {
    Status s = setter(config->config);
    return s.ok() ? FEDCASE_OK : fail(s);
  });
}

Status required(const char* value, const char* what) {
  return value ? Status() : fedcase::invalid_argument(std::string(what) + " is NULL");
}

}  // namespace

extern "C" {

const char* fedcase_version(void) { return kVersion; }
int fedcase_abi_version(void) { return FEDCASE_ABI_VERSION; }

const char* fedcase_code_name(int code) {
  if (const std::optional<Code> c = from_c(code)) return fedcase::code_name(*c);
  return code == FEDCASE_CANCELLED ? "cancelled" : "unknown";
}

const char* fedcase_last_error(void) { return t_last_error.c_str(); }

void fedcase_set_error(const char* message) {
  try {
    t_callback_error = message ? message : "";
  } catch (...) {
    t_callback_error.clear();  // out of memory: the code alone is reported
  }
}

int fedcase_record_assign(fedcase_record* record, const void* data, size_t size) {
  if (!record) return null_argument("record");
  if (!data && size > 0) return null_argument("data");
  return guarded([&]() -> int {
    record->bytes.assign(static_cast<const char*>(data), size);
    return FEDCASE_OK;
  });
}

int fedcase_source_new(const fedcase_source_callbacks* callbacks, fedcase_source** out) {
  return make_handle(out, [&]() -> fedcase::Result<std::unique_ptr<fedcase_source>> {
    fedcase_source_callbacks c;
    FEDCASE_RETURN_IF_ERROR(read_struct(callbacks, sizeof c, c));
    if (!c.count || !c.sample_bytes || !c.read) {
      return fedcase::invalid_argument("a source needs count, sample_bytes and read callbacks");
    }
    size_t count = 0;
    FEDCASE_RETURN_IF_ERROR(call_back("count", [&] {
      count = c.count(c.user_data);
      return 0;
    }));
    if (count == 0) return fedcase::invalid_argument("the source has no samples");
    auto source = std::make_unique<fedcase_source>();
    source->source = std::make_shared<CallbackSource>(c, count);
    return source;
  });
}

int fedcase_source_open_folder(const char* dir, fedcase_source** out) {
  return make_handle(out, [&]() -> fedcase::Result<std::unique_ptr<fedcase_source>> {
    FEDCASE_RETURN_IF_ERROR(required(dir, "dir"));
    auto folder = FolderSource::open(dir);
    if (!folder.ok()) return folder.status();
    auto source = std::make_unique<fedcase_source>();
    source->source = std::move(folder).value();
    return source;
  });
}

size_t fedcase_source_count(const fedcase_source* source) {
  return source ? source->source->count() : 0;
}

void fedcase_source_free(fedcase_source* source) { delete source; }

const char* fedcase_model_kind(const fedcase_model_info* model) {
  return model ? model->info.kind.c_str() : "";
}
const char* fedcase_model_loss(const fedcase_model_info* model) {
  return model ? model->info.loss.c_str() : "";
}
const void* fedcase_model_module(const fedcase_model_info* model, size_t* size) {
  const bool has = model && model->info.module;
  if (size) *size = has ? model->info.module->size() : 0;
  return has ? model->info.module->data() : nullptr;
}
size_t fedcase_model_tensor_count(const fedcase_model_info* model) {
  return model ? model->info.layout.tensors.size() : 0;
}
const char* fedcase_model_tensor_name(const fedcase_model_info* model, size_t i) {
  if (!model || i >= model->info.layout.tensors.size()) return nullptr;
  return model->info.layout.tensors[i].name.c_str();
}
const uint64_t* fedcase_model_tensor_shape(const fedcase_model_info* model, size_t i,
                                           size_t* dims) {
  if (dims) *dims = 0;
  if (!model || i >= model->info.layout.tensors.size()) return nullptr;
  const auto& shape = model->info.layout.tensors[i].shape;
  if (dims) *dims = shape.size();
  return shape.data();
}
int fedcase_model_tensor_kind(const fedcase_model_info* model, size_t i) {
  if (!model || i >= model->info.layout.tensors.size()) return -1;
  return static_cast<int>(model->info.layout.tensors[i].kind);
}
int fedcase_model_tensor_trainable(const fedcase_model_info* model, size_t i) {
  if (!model || i >= model->info.layout.tensors.size()) return -1;
  const auto& trainable = model->info.trainable;
  return trainable.empty() || std::find(trainable.begin(), trainable.end(),
                                        model->info.layout.tensors[i].name) != trainable.end();
}
size_t fedcase_model_parameter_count(const fedcase_model_info* model) {
  return model ? model->info.layout.element_count() : 0;
}

size_t fedcase_samples_size(const fedcase_samples* samples) {
  return samples ? samples->samples.size() : 0;
}

size_t fedcase_samples_id(const fedcase_samples* samples, size_t position) {
  if (!samples || position >= samples->samples.size()) return SIZE_MAX;
  return samples->samples.id(position);
}

int fedcase_samples_read(fedcase_samples* samples, size_t position, const uint8_t** data,
                         size_t* size) {
  if (!samples) return null_argument("samples");
  if (!data || !size) return null_argument("data or size");
  return guarded([&]() -> int {
    auto record = samples->samples.read(position);
    if (!record.ok()) return fail(record.status());
    *data = reinterpret_cast<const uint8_t*>(record->data());
    *size = record->size();
    return FEDCASE_OK;
  });
}

int fedcase_samples_report_losses(fedcase_samples* samples, size_t first, const float* losses,
                                  size_t count) {
  if (!samples) return null_argument("samples");
  if (!losses && count > 0) return null_argument("losses");
  return guarded([&]() -> int {
    Status bad;
    if (samples->evaluation) {
      bad = fedcase::invalid_argument("an evaluation takes no losses");
    } else if (first > samples->samples.size() || count > samples->samples.size() - first) {
      bad = fedcase::invalid_argument("losses for positions [" + std::to_string(first) + ", " +
                                      std::to_string(first + count) + ") of a round of " +
                                      std::to_string(samples->samples.size()));
    } else {
      for (size_t i = 0; i < count && bad.ok(); ++i) {
        if (!std::isfinite(losses[i]) || losses[i] < 0) {
          bad = fedcase::invalid_argument("the loss of position " + std::to_string(first + i) +
                                          " is not finite and >= 0");
        }
      }
    }
    if (!bad.ok()) {
      if (samples->bad_report.ok()) samples->bad_report = bad;
      return fail(bad);
    }
    samples->losses.assign(losses, losses + count);
    samples->samples.report_losses(first, samples->losses);
    return FEDCASE_OK;
  });
}

int fedcase_evaluation_set(fedcase_evaluation* evaluation, uint64_t samples, double loss) {
  if (!evaluation) return null_argument("evaluation");
  if (!std::isfinite(loss) || loss < 0) {
    evaluation->bad = fedcase::invalid_argument("the evaluation's loss is not finite and >= 0");
    return fail(evaluation->bad);
  }
  evaluation->result.samples = samples;
  evaluation->result.loss = loss;
  evaluation->set = true;
  return FEDCASE_OK;
}

int fedcase_evaluation_set_metric(fedcase_evaluation* evaluation, const char* name, double value) {
  if (!evaluation) return null_argument("evaluation");
  if (!name) return null_argument("name");
  return guarded([&]() -> int {
    Status bad;
    if (!metric_name_ok(name)) {
      bad = fedcase::invalid_argument(std::string("metric name '") + name +
                                      "' is not 1 to 64 letters, digits or '_'");
    } else if (!std::isfinite(value) || value < 0 ||
               (std::strcmp(name, "accuracy") == 0 && value > 1)) {
      bad = fedcase::invalid_argument(std::string("metric ") + name + " is out of range");
    }
    if (!bad.ok()) {
      evaluation->bad = bad;
      return fail(bad);
    }
    evaluation->result.metrics[name] = value;
    return FEDCASE_OK;
  });
}

int fedcase_trainer_new(const fedcase_trainer_callbacks* callbacks, fedcase_trainer** out) {
  return make_handle(out, [&]() -> fedcase::Result<std::unique_ptr<fedcase_trainer>> {
    fedcase_trainer_callbacks c;
    FEDCASE_RETURN_IF_ERROR(read_struct(callbacks, sizeof c, c));
    if (!c.prepare || !c.train || !c.evaluate) {
      return fedcase::invalid_argument("a trainer needs prepare, train and evaluate callbacks");
    }
    auto trainer = std::make_unique<fedcase_trainer>();
    trainer->trainer = std::make_shared<CallbackTrainer>(c);
    return trainer;
  });
}

int fedcase_trainer_new_torchscript(const int64_t* input_shape, size_t dims,
                                    fedcase_trainer** out) {
  return make_handle(out, [&]() -> fedcase::Result<std::unique_ptr<fedcase_trainer>> {
    if (!input_shape && dims > 0) return fedcase::invalid_argument("input_shape is NULL");
    auto made = make_torchscript_trainer({std::vector<int64_t>(input_shape, input_shape + dims)});
    if (!made.ok()) return made.status();
    auto trainer = std::make_unique<fedcase_trainer>();
    trainer->trainer = std::move(made).value();
    return trainer;
  });
}

void fedcase_trainer_free(fedcase_trainer* trainer) { delete trainer; }

int fedcase_config_new(fedcase_config** out) {
  return make_handle(out, [] {
    return fedcase::Result<std::unique_ptr<fedcase_config>>(std::make_unique<fedcase_config>());
  });
}

void fedcase_config_free(fedcase_config* config) { delete config; }

int fedcase_config_set_coordinator(fedcase_config* config, const char* host, uint16_t port) {
  return set_config(config, [&](SessionConfig& c) {
    FEDCASE_RETURN_IF_ERROR(required(host, "host"));
    if (port == 0) return fedcase::invalid_argument("the coordinator's port is 0");
    c.coordinator.host = host;
    c.coordinator.port = port;
    return Status();
  });
}

int fedcase_config_set_tls(fedcase_config* config, const char* ca_file, const char* cert_file,
                           const char* key_file) {
  return set_config(config, [&](SessionConfig& c) {
    FEDCASE_RETURN_IF_ERROR(required(ca_file, "ca_file"));
    if (!cert_file != !key_file) {
      return fedcase::invalid_argument("a client certificate and key go together");
    }
    c.coordinator.ca_file = ca_file;
    c.coordinator.cert_file = cert_file ? cert_file : "";
    c.coordinator.key_file = key_file ? key_file : "";
    return Status();
  });
}

int fedcase_config_set_enrollment_token(fedcase_config* config, const char* token) {
  return set_config(config, [&](SessionConfig& c) {
    FEDCASE_RETURN_IF_ERROR(required(token, "token"));
    c.enrollment_token = token;
    return Status();
  });
}

int fedcase_config_set_name(fedcase_config* config, const char* name) {
  return set_config(config, [&](SessionConfig& c) {
    FEDCASE_RETURN_IF_ERROR(required(name, "name"));
    c.name = name;
    return Status();
  });
}

int fedcase_config_set_state_dir(fedcase_config* config, const char* dir) {
  return set_config(config, [&](SessionConfig& c) {
    c.state_dir = dir ? dir : "";
    return Status();
  });
}

int fedcase_config_set_seed(fedcase_config* config, uint64_t seed) {
  return set_config(config, [&](SessionConfig& c) {
    c.seed = seed;
    return Status();
  });
}

int fedcase_config_set_cache_capacity(fedcase_config* config, uint64_t bytes) {
  return set_config(config, [&](SessionConfig& c) {
    c.cache_capacity_bytes = bytes;
    return Status();
  });
}

int fedcase_config_set_poll_wait(fedcase_config* config, double seconds) {
  return set_config(config, [&](SessionConfig& c) {
    if (!std::isfinite(seconds) || seconds <= 0 || seconds > 300) {
      return fedcase::invalid_argument("the poll wait must be in (0, 300] seconds");
    }
    c.poll_wait_s = seconds;
    return Status();
  });
}

int fedcase_config_set_device_json(fedcase_config* config, const char* json) {
  return set_config(config, [&](SessionConfig& c) {
    FEDCASE_RETURN_IF_ERROR(required(json, "json"));
    auto parsed = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
    if (!parsed.is_object()) return fedcase::invalid_argument("the device is not a JSON object");
    c.device = std::move(parsed);
    return Status();
  });
}

int fedcase_config_set_label(fedcase_config* config, const char* key, const char* value) {
  return set_config(config, [&](SessionConfig& c) {
    FEDCASE_RETURN_IF_ERROR(required(key, "key"));
    FEDCASE_RETURN_IF_ERROR(required(value, "value"));
    c.labels[key] = value;
    return Status();
  });
}

int fedcase_config_set_trainer(fedcase_config* config, fedcase_trainer* trainer) {
  return set_config(config, [&](SessionConfig& c) {
    if (!trainer) return fedcase::invalid_argument("trainer is NULL");
    c.trainer = trainer->trainer;
    return Status();
  });
}

int fedcase_config_set_train_data(fedcase_config* config, fedcase_source* source) {
  return set_config(config, [&](SessionConfig& c) {
    if (!source) return fedcase::invalid_argument("source is NULL");
    c.train_data = source->source;
    return Status();
  });
}

int fedcase_config_set_eval_data(fedcase_config* config, fedcase_source* source) {
  return set_config(config, [&](SessionConfig& c) {
    c.eval_data = source ? source->source : nullptr;
    return Status();
  });
}

int fedcase_session_new(const fedcase_config* config, fedcase_session** out) {
  return make_handle(out, [&]() -> fedcase::Result<std::unique_ptr<fedcase_session>> {
    if (!config) return fedcase::invalid_argument("config is NULL");
    if (!config->config.train_data) {
      return fedcase::invalid_argument("the session needs training data");
    }
    auto created = Session::create(config->config);
    if (!created.ok()) return created.status();
    auto session = std::make_unique<fedcase_session>();
    session->session = std::move(created).value();
    return session;
  });
}

int fedcase_session_run(fedcase_session* session) {
  if (!session) return null_argument("session");
  if (session->running.exchange(true)) {
    return fail(FEDCASE_CONFLICT, "the session runs already on another thread");
  }
  const int code = guarded([&]() -> int {
    session->session->run(session->stop);
    return FEDCASE_OK;
  });
  session->running = false;
  return code;
}

void fedcase_session_stop(fedcase_session* session) {
  if (session) session->stop.store(true);
}

int fedcase_session_stats_get(const fedcase_session* session, fedcase_session_stats* out) {
  if (!session) return null_argument("session");
  if (!out) return null_argument("out");
  fedcase_session_stats stats;
  if (out->struct_size < sizeof stats) {
    return fail(FEDCASE_INVALID_ARGUMENT, "struct_size is below the first version's");
  }
  const SessionStats& s = session->session->stats();
  stats.struct_size = out->struct_size;
  stats.rounds_trained = s.rounds_trained;
  stats.rounds_failed = s.rounds_failed;
  stats.updates_accepted = s.updates_accepted;
  stats.updates_refused = s.updates_refused;
  stats.updates_skipped = s.updates_skipped;
  stats.model_downloads = s.model_downloads;
  stats.reconnects = s.reconnects;
  std::memcpy(out, &stats, std::min<size_t>(out->struct_size, sizeof stats));
  return FEDCASE_OK;
}

uint64_t fedcase_session_client_id(const fedcase_session* session) {
  return session ? session->session->client_id() : 0;
}

void fedcase_session_free(fedcase_session* session) {
  if (session && session->running) {
    fedcase::log_error("fedcase_session_free on a running session: stopped and leaked");
    session->stop = true;
    return;
  }
  delete session;
}

int fedcase_local_data_open(fedcase_source* source, uint64_t seed, const char* state_dir,
                            uint64_t cache_capacity_bytes, fedcase_local_data** out) {
  return make_handle(out, [&]() -> fedcase::Result<std::unique_ptr<fedcase_local_data>> {
    if (!source) return fedcase::invalid_argument("source is NULL");
    auto data = std::make_unique<fedcase_local_data>();
    data->source = source->source;
    LocalDataConfig config;
    config.source = data->source.get();
    config.sampler.seed = seed;
    config.state_dir = state_dir ? state_dir : "";
    config.cache_capacity_bytes = cache_capacity_bytes;
    auto opened = LocalData::open(std::move(config));
    if (!opened.ok()) return opened.status();
    data->data = std::move(opened).value();
    return data;
  });
}

int fedcase_local_data_train_round(fedcase_local_data* data, fedcase_trainer* trainer,
                                   const float* parameters, size_t count,
                                   const fedcase_train_settings* settings,
                                   const fedcase_directives* directives, float* out_parameters,
                                   fedcase_round_stats* stats) {
  if (!data) return null_argument("data");
  if (!trainer) return null_argument("trainer");
  if (!settings || !directives) return null_argument("settings or directives");
  if ((!parameters || !out_parameters) && count > 0) return null_argument("parameters");
  return guarded([&]() -> int {
    fedcase_directives d;
    // The first version ended at repetition_factor.
    const size_t first_version = offsetof(fedcase_directives, repetition_factor) + sizeof(double);
    if (Status s = read_struct(directives, first_version, d); !s.ok()) return fail(s);
    if (d.sampling < FEDCASE_SAMPLING_UNIFORM || d.sampling > FEDCASE_SAMPLING_IMPORTANCE ||
        d.cache_policy < FEDCASE_CACHE_NONE || d.cache_policy > FEDCASE_CACHE_IMPORTANCE ||
        d.repetition < FEDCASE_REPETITION_FIXED || d.repetition > FEDCASE_REPETITION_ADAPTIVE) {
      return fail(FEDCASE_INVALID_ARGUMENT, "unknown sampling mode, cache policy or repetition");
    }
    if (stats && stats->struct_size < sizeof(fedcase_round_stats)) {
      return fail(FEDCASE_INVALID_ARGUMENT, "stats->struct_size is below the first version's");
    }
    DataDirectives directives_cpp;
    directives_cpp.sampling = static_cast<Sampling>(d.sampling);
    directives_cpp.sample_budget = d.sample_budget;
    directives_cpp.epochs = d.epochs;
    directives_cpp.cache_policy = static_cast<CachePolicy>(d.cache_policy);
    directives_cpp.cache_budget_bytes = d.cache_budget_bytes;
    directives_cpp.repetition_factor = d.repetition_factor;
    directives_cpp.repetition = static_cast<fedcase::protocol::Repetition>(d.repetition);
    TrainSettings train_settings;
    train_settings.batch_size = settings->batch_size;
    train_settings.lr = settings->lr;
    train_settings.momentum = settings->momentum;
    train_settings.weight_decay = settings->weight_decay;
    train_settings.prox_mu = settings->prox_mu;
    if (Status s = fedcase::ml::validate_train_options(train_settings); !s.ok()) return fail(s);
    t_callback_code = 0;
    auto round = data->data->train_round(*trainer->trainer,
                                         std::vector<float>(parameters, parameters + count),
                                         train_settings, directives_cpp);
    if (!round.ok()) {
      const int code = t_callback_code ? t_callback_code : to_c(round.status().code());
      return fail(code, round.status().message());
    }
    std::memcpy(out_parameters, round->parameters.data(), count * sizeof(float));
    if (stats) {
      const RoundStats& r = round->stats;
      const uint32_t size = stats->struct_size;
      *stats = {size,         r.samples,      r.loss_sum,   r.loss_sq_sum, r.compute_s,
                r.cache_hits, r.cache_misses, r.bytes_read, r.io_s};
    }
    return FEDCASE_OK;
  });
}

void fedcase_local_data_free(fedcase_local_data* data) { delete data; }

}  // extern "C"
