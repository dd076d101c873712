// FedCaSe selection against real SDK clients of mixed speeds: six read their samples from
// memory, six from an emulated slow flash device. The coordinator learns who is slow from
// what they report, and every round records who was invited, who finished, who was dropped.

#include <doctest/doctest.h>

#include <set>

#include "client_sdk/fleet.h"
#include "tests/support/coordinator_harness.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

TEST_CASE("a fedcase job finishes its rounds on a fleet of fast and slow clients") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);
  json job = {{"name", "mixed"},
              {"model", "mlp"},
              {"rounds", 8},
              {"clients_per_round", 8},  // so every round also waits for slow clients
              {"min_clients", 12},
              {"selection", {{"policy", "fedcase"}, {"overcommit", 1.5}, {"warmup_rounds", 2}}},
              {"training",
               {{"lr", 0.05},
                {"momentum", 0.9},
                {"sampling", "importance"},
                {"deadline", {{"mode", "fixed"}, {"seconds", 30}}},
                {"cache", {{"policy", "importance"}, {"budget_bytes", 50000}}}}}};
  REQUIRE(admin.post("/v1/admin/jobs", job).status == 201);

  ml::Dataset fast_data = ml::head(fmnist_train(), 1800);
  ml::Dataset slow_data = ml::head(fmnist_train(), 1800);
  auto fast = client::Fleet::start(test_fleet(port, 6, fast_data));
  REQUIRE(fast.ok());
  client::FleetConfig slow_config = test_fleet(port, 6, slow_data);
  slow_config.seed = 2;
  slow_config.state_dir = dir.file("slow");
  slow_config.storage.read_bytes_per_s = 50e3;  // seconds to read a partition
  slow_config.cache_capacity_bytes = 100000;
  auto slow = client::Fleet::start(slow_config);
  REQUIRE(slow.ok());

  // Midway, the coordinator's view of each client: its profile and the expected duration of
  // the task it would get.
  json clients;
  REQUIRE(wait_until(
      [&] { return committed_rounds(admin.get("/v1/admin/jobs/1").body).size() >= 5; }, 240));
  clients = admin.get("/v1/admin/clients").body["clients"];
  json detail;
  bool finished = wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/1").body;
        return detail.value("state", "") == "finished";
      },
      240);
  (*fast)->stop();
  (*slow)->stop();
  REQUIRE_MESSAGE(finished, detail.dump());
  // Stragglers whose round filled without them learned so and did not upload.
  CHECK((*fast)->updates_skipped() + (*slow)->updates_skipped() > 0);

  CHECK(detail["selection_policy"] == "fedcase");
  CHECK(detail["policy_state"].is_object());
  auto rounds = committed_rounds(detail);
  REQUIRE(rounds.size() == 8);
  for (const auto& r : rounds) {
    std::set<ClientId> selected(r["selected"].begin(), r["selected"].end());
    CHECK(selected.size() == r["selected"].size());  // nobody twice
    CHECK(selected.size() == 12);                     // ceil(8 x 1.5)
    CHECK(r["metrics"]["finished"].size() == 8);
    CHECK(r["metrics"]["dropped"].size() == 4);
    for (const auto& [client, why] : r["metrics"]["dropped"].items()) {
      CHECK(selected.count(std::stoull(client)) == 1);
      CHECK((why == "not needed" || why == "missed deadline"));
    }
  }

  // Slow clients report their I/O time: once they have completed a task, the coordinator
  // expects them to take far longer than the fast ones. Slow clients registered a cache
  // capacity; fast ones did not.
  REQUIRE(clients.size() == 12);
  double fast_sum = 0, slow_sum = 0;
  size_t fast_measured = 0, slow_measured = 0;
  for (const auto& c : clients) {
    const json& p = c["profile"];
    CHECK(p.contains("times_selected"));
    CHECK(p.contains("utility"));
    if (p["completions"].get<uint64_t>() == 0) continue;
    const double expected = c["expected_duration_s"]["1"];
    if (c["info"].value("cache_capacity_bytes", 0) > 0) {
      slow_sum += expected;
      ++slow_measured;
      // What they reported about their storage and cache reached the admin API.
      CHECK(p["storage_read_bytes_per_s"]["count"].get<uint64_t>() > 0);
      CHECK(p["storage_read_bytes_per_s"]["mean"].get<double>() < 60e3);
      CHECK(p["cache_hit_ratio"]["count"].get<uint64_t>() > 0);
      CHECK(p["sample_bytes"]["mean"].get<double>() == doctest::Approx(785));  // class byte + image
    } else {
      fast_sum += expected;
      ++fast_measured;
    }
  }
  REQUIRE(fast_measured > 0);
  REQUIRE(slow_measured > 0);
  const double fast_mean = fast_sum / fast_measured, slow_mean = slow_sum / slow_measured;
  MESSAGE("mean expected task seconds: fast clients " << fast_mean << ", slow clients "
                                                      << slow_mean);
  CHECK(slow_mean > 2 * fast_mean);
}
