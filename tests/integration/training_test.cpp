// Five SDK clients train a CNN on Fashion-MNIST through a real coordinator over HTTP.

#include <doctest/doctest.h>

#include "client_sdk/fleet.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/cutting_proxy.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

TEST_CASE("5 SDK clients complete 3 rounds and the global model's accuracy rises") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);

  json job_config = {{"name", "e2e"},
                     {"model", "cnn"},
                     {"rounds", 3},
                     {"clients_per_round", 5},
                     {"selection", {{"overcommit", 1.0}}},
                     {"training",
                      {{"local_epochs", 1},
                       {"lr", 0.05},
                       {"momentum", 0.9},
                       {"deadline", {{"mode", "fixed"}, {"seconds", 120}}}}}};
  Reply created = admin.post("/v1/admin/jobs", job_config);
  REQUIRE(created.status == 201);
  const std::string job_path =
      "/v1/admin/jobs/" + std::to_string(created.body["job_id"].get<int>());

  ml::Dataset slice = ml::head(fmnist_train(), 6000);
  auto fleet = client::Fleet::start(test_fleet(port, 5, slice));
  REQUIRE(fleet.ok());

  json detail;
  bool finished = wait_until(
      [&] {
        detail = admin.get(job_path).body;
        auto rounds = committed_rounds(detail);
        return detail.value("state", "") == "finished" && !rounds.empty() &&
               rounds.back()["metrics"].contains("test_accuracy");
      },
      240);
  REQUIRE_MESSAGE(finished, detail.dump());

  auto rounds = committed_rounds(detail);
  REQUIRE(rounds.size() == 3);
  for (size_t i = 0; i < rounds.size(); ++i) {
    const json& m = rounds[i]["metrics"];
    CHECK(rounds[i]["round"] == i + 1);
    CHECK(rounds[i]["base_version"] == i);
    CHECK(m["updates"] == 5);
    CHECK(m["finished"].size() == 5);
    CHECK(m["samples"].get<double>() == doctest::Approx(6000));
    CHECK(m["checksum"].get<std::string>().size() == 64);
    MESSAGE("round " << i + 1 << " accuracy " << m["test_accuracy"]);
  }
  const double first = rounds[0]["metrics"]["test_accuracy"];
  const double last = rounds[2]["metrics"]["test_accuracy"];
  CHECK(first > 0.2);  // better than chance after one round
  CHECK(last > first);
  CHECK(last > 0.6);
  CHECK(detail["model_version"] == 3);
  CHECK(detail["model_checksum"] == rounds[2]["metrics"]["checksum"]);

  // The committed model downloads with its checksum as the ETag, and revalidates with 304.
  Caller reader(port, kAdminToken);
  Reply model = reader.get("/v1/jobs/1/models/3");
  CHECK(model.status == 200);
  CHECK(model.response.header("etag") == "\"" + detail["model_checksum"].get<std::string>() + "\"");
  Reply again = reader.call("GET", "/v1/jobs/1/models/3", "",
                            {{"If-None-Match", model.response.header("etag")}});
  CHECK(again.status == 304);
  // A download cut off resumes where it stopped: the rest of the same bytes (206), the whole
  // model again when If-Range names another version's ETag, 416 past the end.
  const std::string& bytes = model.raw;
  CHECK(model.response.header("accept-ranges") == "bytes");
  const std::string from = std::to_string(bytes.size() / 3);
  Reply rest = reader.call("GET", "/v1/jobs/1/models/3", "",
                           {{"Range", "bytes=" + from + "-"},
                            {"If-Range", model.response.header("etag")}});
  CHECK(rest.status == 206);
  CHECK(rest.response.header("content-range") ==
        "bytes " + from + "-" + std::to_string(bytes.size() - 1) + "/" +
            std::to_string(bytes.size()));
  CHECK(rest.raw == bytes.substr(bytes.size() / 3));
  Reply middle = reader.call("GET", "/v1/jobs/1/models/3", "", {{"Range", "bytes=10-19"}});
  CHECK(middle.status == 206);
  CHECK(middle.raw == bytes.substr(10, 10));
  Reply changed = reader.call("GET", "/v1/jobs/1/models/3", "",
                              {{"Range", "bytes=" + from + "-"}, {"If-Range", "\"other\""}});
  CHECK(changed.status == 200);
  CHECK(changed.raw == bytes);
  Reply past = reader.call("GET", "/v1/jobs/1/models/3", "",
                           {{"Range", "bytes=" + std::to_string(bytes.size()) + "-"}});
  CHECK(past.status == 416);
  CHECK(past.response.header("content-range") == "bytes */" + std::to_string(bytes.size()));

  Reply clients = admin.get("/v1/admin/clients");
  REQUIRE(clients.status == 200);
  CHECK(clients.body["clients"].size() == 5);
  CHECK((*fleet)->updates_accepted() == 15);

  // A new job starts from the trained model (init_from) and so begins at its accuracy: its
  // first committed model scores within noise of the source's last, above a fresh start's.
  json warm = job_config;
  warm["name"] = "warm";
  warm["rounds"] = 1;
  warm["init_from"] = {{"job", 1}};
  Reply started = admin.post("/v1/admin/jobs", warm);
  REQUIRE_MESSAGE(started.status == 201, started.raw);
  const std::string warm_path =
      "/v1/admin/jobs/" + std::to_string(started.body["job_id"].get<int>());
  auto decoded = [&](const std::string& path) {
    auto blob = decode_blob(reader.get(path).response.body, 1 << 26);
    REQUIRE(blob.ok());
    return blob->data;
  };
  CHECK(decoded("/v1/jobs/2/models/0") == decoded("/v1/jobs/1/models/3"));
  json warm_detail;
  const bool warm_finished = wait_until(
      [&] {
        warm_detail = admin.get(warm_path).body;
        auto rounds = committed_rounds(warm_detail);
        return warm_detail.value("state", "") == "finished" && !rounds.empty() &&
               rounds.back()["metrics"].contains("test_accuracy");
      },
      240);
  (*fleet)->stop();
  REQUIRE_MESSAGE(warm_finished, warm_detail.dump());
  const double warm_first = committed_rounds(warm_detail)[0]["metrics"]["test_accuracy"];
  MESSAGE("source's last accuracy " << last << ", the warm job's first " << warm_first);
  CHECK(warm_first > last - 0.05);
  CHECK(warm_first > first);
}

TEST_CASE("a job with central DP reports the privacy spent, round by round") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);
  json job_config = {
      {"name", "private"},
      {"model", "mlp"},
      {"rounds", 3},
      {"clients_per_round", 3},
      {"dp_delta", 1e-5},
      {"selection", {{"overcommit", 1.0}}},
      {"training", {{"lr", 0.05}, {"deadline", {{"mode", "fixed"}, {"seconds", 60}}}}},
      {"aggregation", {{"rule", "fedavg"}, {"clip_norm", 5.0}, {"dp_noise_multiplier", 1.0}}},
      {"server_optimizer", {{"name", "fedavgm"}, {"momentum", 0.5}}}};
  REQUIRE(admin.post("/v1/admin/jobs", job_config).status == 201);

  ml::Dataset slice = ml::head(fmnist_train(), 1500);
  auto fleet = client::Fleet::start(test_fleet(port, 3, slice));
  REQUIRE(fleet.ok());
  json detail;
  REQUIRE(wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/1").body;
        return detail.value("state", "") == "finished";
      },
      120));
  (*fleet)->stop();

  CHECK(detail["aggregation"] == "fedavg");
  CHECK(detail["server_optimizer"] == "fedavgm");
  auto rounds = committed_rounds(detail);
  REQUIRE(rounds.size() == 3);
  double previous = 0;
  for (const auto& r : rounds) {
    const json& privacy = r["metrics"]["privacy"];
    CHECK(privacy["noise_multiplier"] == 1.0);
    CHECK(privacy["q"] == 1.0);  // all available clients take part
    CHECK(privacy["epsilon"].get<double>() > previous);
    previous = privacy["epsilon"];
  }
  CHECK(detail["privacy"]["rounds"] == 3);
  CHECK(detail["privacy"]["epsilon"].get<double>() == doctest::Approx(previous));
}

TEST_CASE("an SDK fleet trains an asynchronous job to its target") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);
  json job_config = {
      {"name", "fedbuff"},
      {"model", "mlp"},
      {"mode", "async"},
      {"rounds", 60},
      {"clients_per_round", 3},
      {"target_accuracy", 0.65},
      {"async", {{"concurrency", 6}}},
      {"training",
       {{"local_epochs", 1}, {"lr", 0.05}, {"deadline", {{"mode", "fixed"}, {"seconds", 120}}}}}};
  Reply created = admin.post("/v1/admin/jobs", job_config);
  REQUIRE_MESSAGE(created.status == 201, created.raw);
  const std::string job_path = "/v1/admin/jobs/" + std::to_string(created.body["job_id"].get<int>());

  ml::Dataset slice = ml::head(fmnist_train(), 4000);
  auto fleet = client::Fleet::start(test_fleet(port, 8, slice));
  REQUIRE(fleet.ok());
  json detail;
  const bool finished = wait_until(
      [&] {
        detail = admin.get(job_path).body;
        return detail.value("state", "") == "finished" && !detail["result"].is_null();
      },
      240);
  (*fleet)->stop();
  REQUIRE_MESSAGE(finished, detail.dump());

  // Each committed buffer is a version; updates carried over joined later buffers, stale.
  const auto rounds = committed_rounds(detail);
  REQUIRE(!rounds.empty());
  size_t stale = 0;
  for (const json& r : rounds) {
    CHECK(r["metrics"]["updates"] == 3);
    CHECK(r["metrics"]["model_version"] == r["round"]);
    for (const auto& [tau, count] : r["metrics"]["staleness"].items()) {
      if (tau != "0") stale += count.get<size_t>();
    }
  }
  MESSAGE(rounds.size() << " versions to " << detail["result"].dump() << ", " << stale
                        << " stale updates");
  CHECK(stale > 0);
  CHECK(detail["result"]["test_accuracy"].get<double>() >= 0.65);
  const std::string metrics = admin.get("/metrics").raw;
  CHECK(metrics.find("fedcase_update_staleness_count") != std::string::npos);
}

TEST_CASE("downloads cut off by a flaky link resume at their byte, and the rounds go on") {
  TempDir dir;
  auto service = start_coordinator(dir);
  // The first three answers that pass 100 KB (the MLP's model is about 400 KB) are cut there.
  CuttingProxy flaky(service->port(), 100 * 1024, 3);
  Caller admin(service->port(), kAdminToken);
  REQUIRE(admin.post("/v1/admin/jobs", small_mlp_job("flaky", 2)).status == 201);
  ml::Dataset slice = ml::head(fmnist_train(), 1200);
  auto fleet = client::Fleet::start(test_fleet(flaky.port(), 3, slice));
  REQUIRE(fleet.ok());
  json detail;
  const auto finished = finished_job(admin, 120, detail);
  (*fleet)->stop();
  REQUIRE_MESSAGE(finished, detail.dump());
  CHECK(committed_rounds(detail).size() == 2);
  CHECK(flaky.cuts_made() == 3);
  CHECK((*fleet)->download_resumes() == 3);  // each cut download resumed, none started over
  CHECK((*fleet)->updates_accepted() == 6);
}
