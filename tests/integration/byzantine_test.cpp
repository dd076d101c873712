// Robust aggregation against a fleet where 20% of the clients are Byzantine: they train
// honestly, then upload their delta flipped and scaled by -10. Plain FedAvg collapses; trimmed
// mean and Krum stay close to a clean run.

#include <doctest/doctest.h>

#include <atomic>
#include <numeric>
#include <thread>

#include "client_sdk/fleet.h"
#include "common/blob.h"
#include "ml/model.h"
#include "tests/support/coordinator_harness.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

constexpr int kHonest = 8;
constexpr int kByzantine = 2;
constexpr int kRounds = 4;

// A client that trains like everyone else and uploads `factor` times its delta.
void run_attacker(uint16_t port, const ml::Dataset& data, std::vector<size_t> indices,
                  float factor, const std::atomic<bool>& stop) {
  ml::set_torch_threads(1);
  Caller enroll(port, kEnrollmentToken);
  Reply registered = enroll.post("/v1/clients/register", {{"dataset_size", indices.size()}});
  REQUIRE(registered.status == 201);
  Caller me(port, registered.body["token"].get<std::string>());
  auto model = std::move(ml::Model::create("mlp", 1)).value();
  while (!stop) {
    Reply task = me.get("/v1/task?wait=1");
    if (task.status != 200) continue;
    Reply download = me.get(task.body["model_url"]);
    if (download.status != 200) continue;
    ModelBlob global = std::move(decode_blob(download.raw, 1 << 26)).value();
    REQUIRE(model.set_parameters(global.data).ok());
    ml::TrainOptions options;
    options.lr = task.body["train"]["lr"];
    options.momentum = task.body["train"]["momentum"];
    ml::TrainStats stats = model.train(data, indices, options);
    std::vector<float> delta = model.parameters();
    for (size_t i = 0; i < delta.size(); ++i) delta[i] = factor * (delta[i] - global.data[i]);
    json meta = {{"samples", stats.samples}, {"loss_sum", stats.loss_sum},
                 {"loss_sq_sum", stats.loss_sq_sum}};
    me.call("POST", task.body["upload_url"],
            encode_blob({global.model_version, global.layout, std::move(delta)}),
            {{"X-Fedcase-Meta", meta.dump()}});
  }
}

// Runs a job with `aggregation` on 8 honest SDK clients plus 2 clients that scale their
// deltas by `attacker_factor` (1: honest). Returns the final model's test accuracy.
double final_accuracy(const json& aggregation, float attacker_factor) {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);
  json job = {{"name", "byzantine"},
              {"model", "mlp"},
              {"rounds", kRounds},
              {"clients_per_round", kHonest + kByzantine},
              {"selection", {{"overcommit", 1.0}}},
              {"training",
               {{"lr", 0.05}, {"momentum", 0.9}, {"deadline", {{"mode", "fixed"}, {"seconds", 120}}}}},
              {"aggregation", aggregation}};
  REQUIRE(admin.post("/v1/admin/jobs", job).status == 201);

  const ml::Dataset& data = fmnist_train();
  ml::Dataset honest_data = ml::head(data, kHonest * 800);
  // Close to IID (alpha 100): the honest majority agrees.
  auto fleet = client::Fleet::start(test_fleet(port, kHonest, honest_data, 100));
  REQUIRE(fleet.ok());
  std::atomic<bool> stop{false};
  std::vector<std::thread> attackers;
  for (int a = 0; a < kByzantine; ++a) {
    std::vector<size_t> indices(800);
    std::iota(indices.begin(), indices.end(), 10000 + a * 800);
    attackers.emplace_back(run_attacker, port, std::cref(data), indices, attacker_factor,
                           std::cref(stop));
  }
  json detail;
  bool done = wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/1").body;
        auto rounds = committed_rounds(detail);
        return rounds.size() == kRounds && rounds.back()["metrics"].contains("test_accuracy");
      },
      240);
  stop = true;
  for (auto& t : attackers) t.join();
  (*fleet)->stop();
  REQUIRE_MESSAGE(done, detail.dump());
  CHECK(detail["aggregation"] == aggregation["rule"]);
  for (const auto& r : committed_rounds(detail)) CHECK(r["metrics"]["updates"] == 10);
  return committed_rounds(detail).back()["metrics"]["test_accuracy"];
}

}  // namespace

TEST_CASE("trimmed mean and Krum resist 20% Byzantine clients; FedAvg does not") {
  const double clean = final_accuracy({{"rule", "fedavg"}}, 1.0f);
  const double fedavg = final_accuracy({{"rule", "fedavg"}}, -10.0f);
  const double trimmed = final_accuracy({{"rule", "trimmed_mean"}, {"trim_beta", 0.2}}, -10.0f);
  const double multi_krum = final_accuracy({{"rule", "multi_krum"}, {"byzantine_f", 2}}, -10.0f);
  const double krum = final_accuracy({{"rule", "krum"}, {"byzantine_f", 2}}, -10.0f);
  MESSAGE("clean " << clean << ", fedavg " << fedavg << ", trimmed mean " << trimmed
                   << ", multi-krum " << multi_krum << ", krum " << krum);
  CHECK(clean > 0.7);
  CHECK(fedavg < clean - 0.3);  // collapses
  CHECK(trimmed > clean - 0.03);
  CHECK(multi_krum > clean - 0.03);
  // Krum keeps a single update a round: immune to the attack, but it learns from one
  // client's data per round instead of ten.
  CHECK(krum > clean - 0.1);
}
