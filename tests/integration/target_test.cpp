// A job with a target accuracy finishes at the first committed model that reaches it, even
// when the next round is already open while that model is being evaluated.

#include <doctest/doctest.h>

#include <algorithm>

#include "client_sdk/fleet.h"
#include "tests/support/coordinator_harness.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

TEST_CASE("the job finishes with the first model that reaches the target; no later round commits") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);
  // A CNN evaluated on 1,000 test images takes longer than opening the next round (50 ms).
  json job_config = {
      {"name", "to-target"},
      {"model", "cnn"},
      {"rounds", 30},
      {"clients_per_round", 3},
      {"target_accuracy", 0.55},
      {"selection", {{"overcommit", 1.0}}},
      {"training",
       {{"lr", 0.05}, {"momentum", 0.9}, {"deadline", {{"mode", "fixed"}, {"seconds", 120}}}}}};
  Reply created = admin.post("/v1/admin/jobs", job_config);
  REQUIRE(created.status == 201);
  ml::Dataset slice = ml::head(fmnist_train(), 3000);
  auto fleet = client::Fleet::start(test_fleet(port, 6, slice));
  REQUIRE(fleet.ok());

  json detail;
  bool finished = wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/1").body;
        // The detail reads the rounds before the job's status: a round failed between the
        // two reads shows as open in the list after the job's current round is gone.
        const bool round_listed_open =
            std::any_of(detail["rounds"].begin(), detail["rounds"].end(),
                        [](const json& r) { return r["state"] == "open"; });
        return detail.value("state", "") == "finished" && !detail["result"].is_null() &&
               !detail.contains("current_round") && !round_listed_open;
      },
      240);
  (*fleet)->stop();
  REQUIRE_MESSAGE(finished, detail.dump());

  const json& result = detail["result"];
  const uint64_t reached = result["round"];
  CHECK(result["model_version"] == reached);
  CHECK(detail["model_version"] == reached);  // nothing committed after it
  bool next_round_was_open = false;
  for (const json& r : detail["rounds"]) {
    const uint64_t index = r["round"];
    const json& m = r["metrics"];
    if (index < reached && r["state"] == "committed") {
      CHECK(m["test_accuracy"].get<double>() < 0.55);  // the result is the first to reach it
    }
    if (index == reached) {
      CHECK(r["state"] == "committed");
      CHECK(m["test_accuracy"] == result["test_accuracy"]);
      CHECK(m["test_accuracy"].get<double>() >= 0.55);
    }
    if (index > reached) {
      CHECK(r["state"] == "failed");
      CHECK(m["failure"] == "job reached its target");
      next_round_was_open = true;
    }
  }
  CHECK(next_round_was_open);
  MESSAGE("target reached by round " << reached << " at accuracy " << result["test_accuracy"]);
}
