#pragma once
// A coordinator without sockets for tests: a real SQLite store in a temp dir, a real test-set
// evaluator, a clock the test moves, and the round driver ticked by hand; with helpers to
// create jobs, find a round's invitees and build their updates.

#include <doctest/doctest.h>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/blob.h"
#include "ml/dataset.h"
#include "server/core/coordinator.h"
#include "tests/support/temp_dir.h"

namespace fedcase::server::fixture {

using nlohmann::json;

inline const ml::Dataset& small_test_set() {
  static const ml::Dataset data = [] {
    auto test = ml::load_fashion_mnist(FEDCASE_FMNIST_DIR, ml::Split::kTest);
    REQUIRE(test.ok());
    return ml::head(*test, 200);
  }();
  return data;
}

inline CoordinatorConfig config_in(const testing::TempDir& dir) {
  return parse_coordinator_config({{"database", dir.file("fedcase.db")},
                                   {"admin_token", "admin-token-0123456789"},
                                   {"enrollment_token", "enroll-token-0123456789"}});
}

// Wraps the coordinator's store (e.g. in a testing::failing_store).
using StoreWrapper =
    std::function<std::unique_ptr<storage::Store>(std::unique_ptr<storage::Store>)>;

struct Harness {
  // `adjust` may change the config and `wrap` the store (each time the coordinator opens).
  explicit Harness(const testing::TempDir& dir, std::function<void(CoordinatorConfig&)> adjust = {},
                   StoreWrapper wrap = {})
      : dir(dir), adjust(std::move(adjust)), wrap(std::move(wrap)) {
    reopen();
  }

  void reopen() {
    coordinator.reset();
    auto opened_store = storage::open_sqlite_store(dir.file("fedcase.db"));
    REQUIRE(opened_store.ok());
    std::unique_ptr<storage::Store> store = std::move(opened_store).value();
    if (wrap) store = wrap(std::move(store));
    auto evaluator = std::make_unique<TestSetEvaluator>(small_test_set(), 200, 1);
    CoordinatorConfig config = config_in(dir);
    if (adjust) adjust(config);
    auto opened = Coordinator::open(config, std::move(store), std::move(evaluator),
                                    [this] { return now.load(); });
    REQUIRE_MESSAGE(opened.ok(), opened.status().to_string());
    coordinator = std::move(opened).value();
  }

  // A second connection to the same database, to read what the coordinator stored.
  std::unique_ptr<storage::Store> reader() const {
    auto store = storage::open_sqlite_store(dir.file("fedcase.db"));
    REQUIRE(store.ok());
    return std::move(store).value();
  }

  ClientId add_client(uint64_t dataset_size = 100) {
    auto r = coordinator->register_client({{"dataset_size", dataset_size}});
    REQUIRE(r.ok());
    tokens[r->id] = r->token;
    return r->id;
  }

  const testing::TempDir& dir;
  const std::function<void(CoordinatorConfig&)> adjust;
  const StoreWrapper wrap;
  std::atomic<double> now{1000};
  std::unique_ptr<Coordinator> coordinator;
  std::map<ClientId, std::string> tokens;
};

inline json job_config(json patch = json::object()) {
  json j = {{"name", "unit"},
            {"model", "mlp"},
            {"seed", 3},
            {"rounds", 5},
            {"clients_per_round", 2},
            {"selection", {{"policy", "random"}, {"overcommit", 1.5}}},
            {"training", {{"deadline", {{"mode", "fixed"}, {"seconds", 60}}}}}};
  j.merge_patch(patch);
  return j;
}

// The invitees of the job's open round, with their tasks.
inline std::map<ClientId, TaskOffer> invitees(Coordinator& c,
                                              const std::vector<ClientId>& clients) {
  std::map<ClientId, TaskOffer> out;
  for (ClientId id : clients) {
    auto task = c.next_task(id);
    REQUIRE(task.ok());
    if (*task) out[id] = **task;
  }
  return out;
}

inline ModelBlob base_model(Coordinator& c, JobId job, uint64_t version) {
  auto download = c.model(job, version);
  REQUIRE(download.ok());
  auto blob = decode_blob(*download->blob, download->blob->size());
  REQUIRE(blob.ok());
  return *blob;
}

// An update of `value` in every parameter, trained on `version`.
inline std::string delta_blob(const ModelBlob& base, float value) {
  ModelBlob delta{base.model_version, base.layout,
                  std::vector<float>(base.layout.element_count(), value)};
  return encode_blob(delta);
}

inline json meta(uint64_t samples) {
  return {{"samples", samples}, {"loss_sum", 0.5 * samples}, {"loss_sq_sum", 0.3 * samples}};
}

// Everything the store holds about `job` that an update or a round could change.
inline json store_view(storage::Store& store, JobId job) {
  json out;
  auto rounds = store.list_rounds(job);
  REQUIRE(rounds.ok());
  for (const auto& r : *rounds) {
    auto updates = store.list_updates(job, r.index);
    REQUIRE(updates.ok());
    out["rounds"].push_back({{"index", r.index},
                             {"state", state_name(r.state)},
                             {"metrics", r.metrics},
                             {"updates", updates->size()}});
  }
  auto model = store.latest_model(job);
  REQUIRE(model.ok());
  out["model"] = {{"version", model->version}, {"checksum", model->checksum}};
  return out;
}

}  // namespace fedcase::server::fixture
