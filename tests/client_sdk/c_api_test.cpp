// The C interface (fedcase_client.h) as a C++ app sees it, through libfedcase_client.so only:
// every function's errors, callbacks that fail, throw or break the loss contract, ownership
// of handles shared with a session, and the same read plan as the C++ LocalData.

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "client_sdk/fedcase_client.h"
#include "client_sdk/local_data.h"
#include "tests/client_sdk/read_plan.h"
#include "tests/support/temp_dir.h"

namespace {

using fedcase::testing::TempDir;

// A source of `records` in memory, through the C callbacks; counts its releases.
struct Records {
  std::vector<std::string> records;
  int releases = 0;
  bool fail_reads = false;
};

fedcase_source_callbacks record_callbacks(Records& r) {
  fedcase_source_callbacks c{};
  c.struct_size = sizeof c;
  c.user_data = &r;
  c.count = [](void* u) { return static_cast<Records*>(u)->records.size(); };
  c.sample_bytes = [](void* u, size_t id) -> uint64_t {
    return static_cast<Records*>(u)->records[id].size();
  };
  c.read = [](void* u, size_t id, fedcase_record* out) {
    auto* r = static_cast<Records*>(u);
    if (r->fail_reads) {
      fedcase_set_error("the disk is gone");
      return int(FEDCASE_UNAVAILABLE);
    }
    return fedcase_record_assign(out, r->records[id].data(), r->records[id].size());
  };
  c.release = [](void* u) { static_cast<Records*>(u)->releases++; };
  return c;
}

fedcase_source* make_source(Records& r) {
  const fedcase_source_callbacks c = record_callbacks(r);
  fedcase_source* source = nullptr;
  REQUIRE_EQ(fedcase_source_new(&c, &source), FEDCASE_OK);
  return source;
}

// What a trainer callback does in one test: reads every position in batches, reports
// plan_loss(id) for each, returns parameters + 1; or fails as told.
struct Behaviour {
  enum Mode { kTrain, kReturnCancelled, kThrow, kNanLoss, kNanParameter } mode = kTrain;
  std::vector<size_t> ids;  // the positions' ids, in the order read
  int releases = 0;
};

int train_callback(void* u, const float* parameters, size_t count, fedcase_samples* samples,
                   const fedcase_train_settings* settings, float* out) {
  auto* b = static_cast<Behaviour*>(u);
  if (b->mode == Behaviour::kReturnCancelled) {
    fedcase_set_error("the user closed the app");
    return FEDCASE_CANCELLED;
  }
  if (b->mode == Behaviour::kThrow) throw std::runtime_error("out of batteries");
  const size_t n = fedcase_samples_size(samples);
  for (size_t first = 0; first < n; first += settings->batch_size) {
    const size_t batch = std::min<size_t>(settings->batch_size, n - first);
    std::vector<float> losses;
    for (size_t p = first; p < first + batch; ++p) {
      const uint8_t* data = nullptr;
      size_t size = 0;
      if (int rc = fedcase_samples_read(samples, p, &data, &size); rc != FEDCASE_OK) return rc;
      const size_t id = fedcase_samples_id(samples, p);
      b->ids.push_back(id);
      losses.push_back(b->mode == Behaviour::kNanLoss ? NAN : fedcase::testing::plan_loss(id));
    }
    // A loss report outside the contract fails the round even when the callback goes on.
    (void)fedcase_samples_report_losses(samples, first, losses.data(), losses.size());
  }
  for (size_t i = 0; i < count; ++i) out[i] = parameters[i] + 1;
  if (b->mode == Behaviour::kNanParameter && count > 0) out[0] = NAN;
  return FEDCASE_OK;
}

fedcase_trainer* make_trainer(Behaviour& b) {
  fedcase_trainer_callbacks c{};
  c.struct_size = sizeof c;
  c.user_data = &b;
  c.prepare = [](void*, const fedcase_model_info*) { return int(FEDCASE_OK); };
  c.train = train_callback;
  c.evaluate = [](void*, const float*, size_t, fedcase_samples* samples, fedcase_evaluation* out) {
    return fedcase_evaluation_set(out, fedcase_samples_size(samples), 0.4);
  };
  c.release = [](void* u) { static_cast<Behaviour*>(u)->releases++; };
  fedcase_trainer* trainer = nullptr;
  REQUIRE_EQ(fedcase_trainer_new(&c, &trainer), FEDCASE_OK);
  return trainer;
}

fedcase_directives importance_directives() {
  fedcase_directives d{};
  d.struct_size = sizeof d;
  d.sampling = FEDCASE_SAMPLING_IMPORTANCE;
  d.sample_budget = fedcase::testing::kPlanBudget;
  d.epochs = 1;
  d.cache_policy = FEDCASE_CACHE_IMPORTANCE;
  d.cache_budget_bytes = fedcase::testing::kPlanCacheBytes;
  d.repetition_factor = 2;
  return d;
}

const fedcase_train_settings kSettings{8, 0.1, 0, 0, 0};

std::string last_error() { return fedcase_last_error(); }

}  // namespace

TEST_CASE("version, codes and the last error of this thread") {
  CHECK_EQ(std::string(fedcase_version()), "1.0.0");
  CHECK_EQ(fedcase_abi_version(), FEDCASE_ABI_VERSION);
  CHECK_EQ(std::string(fedcase_code_name(FEDCASE_INVALID_ARGUMENT)), "invalid_argument");
  CHECK_EQ(std::string(fedcase_code_name(FEDCASE_CANCELLED)), "cancelled");
  // The C numbers are the ABI's: each keeps its name whatever the C++ codes become.
  const std::pair<int, const char*> names[] = {
      {FEDCASE_OK, "ok"},
      {FEDCASE_UNAUTHENTICATED, "unauthenticated"},
      {FEDCASE_PERMISSION_DENIED, "permission_denied"},
      {FEDCASE_NOT_FOUND, "not_found"},
      {FEDCASE_CONFLICT, "conflict"},
      {FEDCASE_TOO_LARGE, "too_large"},
      {FEDCASE_UNPROCESSABLE, "unprocessable"},
      {FEDCASE_RESOURCE_EXHAUSTED, "resource_exhausted"},
      {FEDCASE_UNAVAILABLE, "unavailable"},
      {FEDCASE_INTERNAL, "internal"},
      {FEDCASE_GONE, "gone"}};
  for (const auto& [code, name] : names) CHECK_EQ(std::string(fedcase_code_name(code)), name);
  CHECK_EQ(std::string(fedcase_code_name(99)), "unknown");
  CHECK_EQ(fedcase_config_set_seed(nullptr, 1), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(last_error(), "config is NULL");
  std::thread([] { CHECK_EQ(std::string(fedcase_last_error()), ""); }).join();
}

TEST_CASE("every function refuses NULL handles and arguments without crashing") {
  fedcase_source* source = nullptr;
  fedcase_trainer* trainer = nullptr;
  fedcase_config* config = nullptr;
  fedcase_session* session = nullptr;
  fedcase_local_data* data = nullptr;
  CHECK_EQ(fedcase_record_assign(nullptr, "x", 1), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_source_new(nullptr, &source), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(source, nullptr);
  CHECK_EQ(fedcase_source_open_folder(nullptr, &source), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_source_open_folder("/nonexistent/fedcase", &source), FEDCASE_NOT_FOUND);
  CHECK_EQ(fedcase_source_count(nullptr), 0u);
  CHECK_EQ(fedcase_trainer_new(nullptr, &trainer), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_trainer_new_torchscript(nullptr, 1, &trainer), FEDCASE_INVALID_ARGUMENT);
  const int64_t bad_shape[] = {8, 0};
  CHECK_EQ(fedcase_trainer_new_torchscript(bad_shape, 2, &trainer), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_config_new(nullptr), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_session_new(nullptr, &session), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_session_run(nullptr), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_session_stats_get(nullptr, nullptr), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_session_client_id(nullptr), 0u);
  CHECK_EQ(fedcase_local_data_open(nullptr, 1, nullptr, 0, &data), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_local_data_train_round(nullptr, nullptr, nullptr, 0, nullptr, nullptr, nullptr,
                                          nullptr),
           FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_samples_size(nullptr), 0u);
  CHECK_EQ(fedcase_samples_id(nullptr, 0), SIZE_MAX);
  CHECK_EQ(fedcase_samples_report_losses(nullptr, 0, nullptr, 0), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_evaluation_set(nullptr, 1, 0), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_model_tensor_count(nullptr), 0u);
  CHECK_EQ(fedcase_model_tensor_name(nullptr, 0), nullptr);
  size_t size = 7;
  CHECK_EQ(fedcase_model_module(nullptr, &size), nullptr);
  CHECK_EQ(size, 0u);
  fedcase_session_stop(nullptr);
  fedcase_session_free(nullptr);
  fedcase_config_free(nullptr);
  fedcase_trainer_free(nullptr);
  fedcase_source_free(nullptr);
  fedcase_local_data_free(nullptr);
}

TEST_CASE("bad callbacks structs and configs are refused with a message") {
  Records empty;
  fedcase_source_callbacks c = record_callbacks(empty);
  fedcase_source* source = nullptr;
  CHECK_EQ(fedcase_source_new(&c, &source), FEDCASE_INVALID_ARGUMENT);  // no samples
  CHECK_EQ(empty.releases, 0);  // user_data stays the caller's
  c.struct_size = 4;
  CHECK_EQ(fedcase_source_new(&c, &source), FEDCASE_INVALID_ARGUMENT);
  CHECK_NE(last_error().find("struct_size"), std::string::npos);
  c = record_callbacks(empty);
  c.read = nullptr;
  CHECK_EQ(fedcase_source_new(&c, &source), FEDCASE_INVALID_ARGUMENT);
  fedcase_trainer_callbacks t{};
  t.struct_size = sizeof t;
  fedcase_trainer* trainer = nullptr;
  CHECK_EQ(fedcase_trainer_new(&t, &trainer), FEDCASE_INVALID_ARGUMENT);

  fedcase_config* config = nullptr;
  REQUIRE_EQ(fedcase_config_new(&config), FEDCASE_OK);
  CHECK_EQ(fedcase_config_set_coordinator(config, "127.0.0.1", 0), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_config_set_coordinator(config, nullptr, 80), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_config_set_tls(config, "ca.pem", "cert.pem", nullptr), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_config_set_poll_wait(config, NAN), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_config_set_poll_wait(config, 0), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_config_set_device_json(config, "[1, 2]"), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_config_set_device_json(config, "{not json"), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_config_set_label(config, "k", nullptr), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_config_set_trainer(config, nullptr), FEDCASE_INVALID_ARGUMENT);
  CHECK_EQ(fedcase_config_set_train_data(config, nullptr), FEDCASE_INVALID_ARGUMENT);

  fedcase_session* session = nullptr;
  CHECK_EQ(fedcase_session_new(config, &session), FEDCASE_INVALID_ARGUMENT);  // no data
  CHECK_NE(last_error().find("training data"), std::string::npos);
  Records records{fedcase::testing::plan_records(), 0, false};
  fedcase_source* data = make_source(records);
  REQUIRE_EQ(fedcase_config_set_train_data(config, data), FEDCASE_OK);
  CHECK_EQ(fedcase_session_new(config, &session), FEDCASE_INVALID_ARGUMENT);  // no trainer
  CHECK_NE(last_error().find("trainer"), std::string::npos);
  Behaviour b;
  fedcase_trainer* own = make_trainer(b);
  REQUIRE_EQ(fedcase_config_set_trainer(config, own), FEDCASE_OK);
  REQUIRE_EQ(fedcase_config_set_device_json(config, R"({"compute_ms_per_sample": -1})"),
             FEDCASE_OK);
  CHECK_EQ(fedcase_session_new(config, &session), FEDCASE_INVALID_ARGUMENT);  // bad device
  CHECK_EQ(session, nullptr);
  fedcase_config_free(config);
  fedcase_trainer_free(own);
  fedcase_source_free(data);
  CHECK_EQ(records.releases, 1);
  CHECK_EQ(b.releases, 1);
}

TEST_CASE("a local round reads the same plan as the C++ LocalData, with the same cache figures") {
  Records records{fedcase::testing::plan_records(), 0, false};
  fedcase_source* source = make_source(records);
  fedcase_local_data* data = nullptr;
  REQUIRE_EQ(fedcase_local_data_open(source, fedcase::testing::kPlanSeed, nullptr, 0, &data),
             FEDCASE_OK);
  fedcase_source_free(source);  // the local data keeps its own reference
  CHECK_EQ(records.releases, 0);
  Behaviour b;
  fedcase_trainer* trainer = make_trainer(b);
  const fedcase_directives d = importance_directives();
  const auto expected = fedcase::testing::cpp_read_plan(fedcase::testing::kPlanRounds);
  std::vector<float> parameters(10, 0.5f), out(10);
  for (size_t round = 0; round < expected.size(); ++round) {
    b.ids.clear();
    fedcase_round_stats stats{};
    stats.struct_size = sizeof stats;
    REQUIRE_EQ(fedcase_local_data_train_round(data, trainer, parameters.data(), parameters.size(),
                                              &kSettings, &d, out.data(), &stats),
               FEDCASE_OK);
    CHECK_EQ(b.ids, expected[round].ids);
    CHECK_EQ(stats.cache_hits, expected[round].cache_hits);
    CHECK_EQ(stats.cache_misses, expected[round].cache_misses);
    CHECK_EQ(stats.samples, fedcase::testing::kPlanBudget);
    CHECK_EQ(out[3], doctest::Approx(1.5));
  }
  fedcase_trainer_free(trainer);  // not shared with anything: released now
  CHECK_EQ(b.releases, 1);
  fedcase_local_data_free(data);
  CHECK_EQ(records.releases, 1);
}

TEST_CASE("a callback that fails, throws or breaks the loss contract fails only its round") {
  Records records{fedcase::testing::plan_records(), 0, false};
  fedcase_source* source = make_source(records);
  fedcase_local_data* data = nullptr;
  REQUIRE_EQ(fedcase_local_data_open(source, 3, nullptr, 0, &data), FEDCASE_OK);
  Behaviour b;
  fedcase_trainer* trainer = make_trainer(b);
  const fedcase_directives d = importance_directives();
  std::vector<float> parameters(4, 0.f), out(4, -7.f);
  auto round = [&] {
    return fedcase_local_data_train_round(data, trainer, parameters.data(), parameters.size(),
                                          &kSettings, &d, out.data(), nullptr);
  };

  b.mode = Behaviour::kReturnCancelled;
  CHECK_EQ(round(), FEDCASE_CANCELLED);
  CHECK_NE(last_error().find("the user closed the app"), std::string::npos);
  CHECK_EQ(out[0], -7.f);  // nothing written on failure

  b.mode = Behaviour::kThrow;  // a C++ app's callback: the exception stops at the boundary
  CHECK_EQ(round(), FEDCASE_INTERNAL);
  CHECK_NE(last_error().find("out of batteries"), std::string::npos);

  b.mode = Behaviour::kNanLoss;
  CHECK_EQ(round(), FEDCASE_INVALID_ARGUMENT);
  CHECK_NE(last_error().find("not finite"), std::string::npos);

  b.mode = Behaviour::kNanParameter;  // the SDK's own check, not a callback's code
  CHECK_EQ(round(), FEDCASE_INTERNAL);
  CHECK_NE(last_error().find("non-finite parameter"), std::string::npos);

  records.fail_reads = true;
  b.mode = Behaviour::kTrain;
  CHECK_EQ(round(), FEDCASE_UNAVAILABLE);
  CHECK_NE(last_error().find("the disk is gone"), std::string::npos);

  records.fail_reads = false;  // and the next round trains
  CHECK_EQ(round(), FEDCASE_OK);
  CHECK_EQ(out[0], 1.f);

  fedcase_directives bad = d;
  bad.cache_policy = 7;
  CHECK_EQ(fedcase_local_data_train_round(data, trainer, parameters.data(), parameters.size(),
                                          &kSettings, &bad, out.data(), nullptr),
           FEDCASE_INVALID_ARGUMENT);
  bad = d;
  bad.repetition_factor = 0.5;
  CHECK_EQ(fedcase_local_data_train_round(data, trainer, parameters.data(), parameters.size(),
                                          &kSettings, &bad, out.data(), nullptr),
           FEDCASE_INVALID_ARGUMENT);
  bad = d;
  bad.repetition = 2;
  CHECK_EQ(fedcase_local_data_train_round(data, trainer, parameters.data(), parameters.size(),
                                          &kSettings, &bad, out.data(), nullptr),
           FEDCASE_INVALID_ARGUMENT);
  // A caller built before `repetition` existed passes the first version's size, and its
  // repeats are fixed: what lies past its struct is never read.
  fedcase_directives first_version = d;
  first_version.struct_size = offsetof(fedcase_directives, repetition_factor) + sizeof(double);
  first_version.repetition = 9;
  CHECK_EQ(fedcase_local_data_train_round(data, trainer, parameters.data(), parameters.size(),
                                          &kSettings, &first_version, out.data(), nullptr),
           FEDCASE_OK);
  first_version.struct_size -= 1;
  CHECK_EQ(fedcase_local_data_train_round(data, trainer, parameters.data(), parameters.size(),
                                          &kSettings, &first_version, out.data(), nullptr),
           FEDCASE_INVALID_ARGUMENT);
  const fedcase_train_settings bad_lr{8, -1, 0, 0, 0};
  CHECK_EQ(fedcase_local_data_train_round(data, trainer, parameters.data(), parameters.size(),
                                          &bad_lr, &d, out.data(), nullptr),
           FEDCASE_INVALID_ARGUMENT);
  fedcase_trainer_free(trainer);
  fedcase_local_data_free(data);
  fedcase_source_free(source);
}

TEST_CASE("a session runs on one thread at a time, stops from another, and frees what it shares") {
  TempDir dir;
  Records records{fedcase::testing::plan_records(), 0, false};
  Behaviour b;
  fedcase_session* session = nullptr;
  {
    fedcase_source* source = make_source(records);
    fedcase_trainer* trainer = make_trainer(b);
    fedcase_config* config = nullptr;
    REQUIRE_EQ(fedcase_config_new(&config), FEDCASE_OK);
    // Port 1 on the loopback: nothing listens, so the session backs off and retries.
    REQUIRE_EQ(fedcase_config_set_coordinator(config, "127.0.0.1", 1), FEDCASE_OK);
    REQUIRE_EQ(fedcase_config_set_enrollment_token(config, "enrollment-token-0001"), FEDCASE_OK);
    REQUIRE_EQ(fedcase_config_set_state_dir(config, (dir.path() / "state").c_str()), FEDCASE_OK);
    REQUIRE_EQ(fedcase_config_set_label(config, "site", "lab"), FEDCASE_OK);
    REQUIRE_EQ(fedcase_config_set_poll_wait(config, 0.5), FEDCASE_OK);
    REQUIRE_EQ(fedcase_config_set_trainer(config, trainer), FEDCASE_OK);
    REQUIRE_EQ(fedcase_config_set_train_data(config, source), FEDCASE_OK);
    REQUIRE_EQ(fedcase_session_new(config, &session), FEDCASE_OK);
    fedcase_config_free(config);  // the session holds the trainer and the source
    fedcase_trainer_free(trainer);
    fedcase_source_free(source);
  }
  CHECK_EQ(b.releases, 0);
  CHECK_EQ(records.releases, 0);
  std::atomic<int> run_code{-1};
  std::thread runner([&] { run_code = fedcase_session_run(session); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_EQ(fedcase_session_run(session), FEDCASE_CONFLICT);
  fedcase_session_stats stats{};
  stats.struct_size = sizeof stats;
  REQUIRE_EQ(fedcase_session_stats_get(session, &stats), FEDCASE_OK);
  CHECK_EQ(stats.rounds_trained, 0u);
  CHECK_EQ(fedcase_session_client_id(session), 0u);
  fedcase_session_stats small{};
  small.struct_size = 8;
  CHECK_EQ(fedcase_session_stats_get(session, &small), FEDCASE_INVALID_ARGUMENT);
  const auto asked = std::chrono::steady_clock::now();
  fedcase_session_stop(session);
  runner.join();
  CHECK_EQ(run_code.load(), FEDCASE_OK);
  CHECK_LT(std::chrono::steady_clock::now() - asked, std::chrono::seconds(10));
  CHECK_EQ(fedcase_session_run(session), FEDCASE_OK);  // a stop is final: returns at once
  fedcase_session_free(session);
  CHECK_EQ(b.releases, 1);
  CHECK_EQ(records.releases, 1);
}
