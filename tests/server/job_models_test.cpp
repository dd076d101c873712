// Jobs that bring their own model (a model blob, a TorchScript module) and federated
// evaluation: job creation by multipart upload, the module route, the task's fields, and the
// evaluation reports inside uploads. In-process through the Api with a clock the test moves,
// and over real HTTP on 127.0.0.1.

#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <thread>

#include "common/crypto.h"
#include "protocol/error_reply.h"
#include "protocol/registration.h"
#include "protocol/task_offer.h"
#include "protocol/task_status.h"
#include "protocol/version.h"
#include "server/api/api.h"
#include "server/api/views.h"
#include "tests/server/api_calls.h"
#include "tests/server/coordinator_fixture.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/raw_connection.h"

namespace fedcase::server {
namespace {

using nlohmann::json;
using namespace fixture;

// The task `client` polls for once the driver has ticked.
json next_task_json(Harness& h, Api& api, ClientId client) {
  h.coordinator->tick();
  Reply polled = call(api, http::verb::get, "/v1/task", h.tokens[client]);
  REQUIRE(polled.response.result_int() == 200);
  return body_of(polled);
}

// A refused job creation: its status, and an error message that says `says`.
void check_refused(const Reply& r, int status, const char* says) {
  CAPTURE(r.response.body());
  CHECK(r.response.result_int() == status);
  CHECK(body_of(r)["error"]["message"].get<std::string>().find(says) != std::string::npos);
}

// Neither the coordinator nor the store holds a job.
void check_no_job(Harness& h) {
  CHECK(h.coordinator->list_jobs().empty());
  CHECK(h.reader()->list_jobs()->empty());
}

// An evaluation report of the base model `version`.
json report(uint64_t version, uint64_t samples, double loss, json metrics) {
  return {{"model_version", version}, {"samples", samples}, {"loss", loss}, {"metrics", metrics}};
}

json meta_with(uint64_t samples, json evaluation) {
  json m = meta(samples);
  m["evaluation"] = std::move(evaluation);
  return m;
}

TEST_CASE("a blob job is created from a multipart upload; its tasks ask for federated evaluation") {
  testing::TempDir dir;
  Harness h(dir);
  Api api(*h.coordinator);
  const ClientId a = h.add_client(), b = h.add_client();
  const ModelBlob uploaded = own_model();
  Reply created = create_multipart(api, blob_job(), encode_blob(uploaded));
  REQUIRE_MESSAGE(created.response.result_int() == 201, created.response.body());
  const json summary = body_of(created);
  CHECK(summary["model"] == "blob");
  const JobId job = summary["job_id"];
  // The uploaded parameters are model version 0, whatever version the file said.
  const ModelBlob v0 = base_model(*h.coordinator, job, 0);
  CHECK(v0.model_version == 0);
  CHECK(v0.layout == uploaded.layout);
  CHECK(v0.data == uploaded.data);

  const json task = next_task_json(h, api, a);
  CHECK(task["model"] == "blob");
  CHECK(task["loss"] == "mse");
  CHECK(task["evaluate"] == json{{"max_samples", 100}});
  CHECK_FALSE(task.contains("module_url"));
  CHECK_FALSE(task.contains("module_checksum"));
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  CHECK(detail->module_bytes == 0);
  CHECK(call(api, http::verb::get, "/v1/jobs/" + std::to_string(job) + "/module", kAdmin)
            .response.result_int() == 404);

  // Two clients report with different sample counts: the round records the weighted means.
  REQUIRE(h.coordinator
              ->submit_update(a, job, 1,
                              meta_with(10, report(0, 20, 1.0, {{"accuracy", 0.5}, {"f1", 0.3}})),
                              delta_blob(v0, 0.1f))
              .ok());
  REQUIRE(h.coordinator
              ->submit_update(b, job, 1, meta_with(30, report(0, 60, 2.0, {{"accuracy", 0.9}})),
                              delta_blob(v0, 0.1f))
              .ok());
  h.coordinator->tick();
  detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  REQUIRE(detail->rounds.size() == 1);
  CHECK(detail->rounds[0].state == RoundState::kCommitted);
  const json& e = detail->rounds[0].metrics["federated_evaluation"];
  CHECK(e["model_version"] == 0);
  CHECK(e["clients"] == 2);
  CHECK(e["samples"] == 80);
  CHECK(e["loss"].get<double>() == doctest::Approx((20 * 1.0 + 60 * 2.0) / 80));
  CHECK(e["metrics"]["accuracy"].get<double>() == doctest::Approx((20 * 0.5 + 60 * 0.9) / 80));
  CHECK(e["metrics"]["f1"].get<double>() == doctest::Approx(0.3));
  // The job's accuracy is the federated one; the server never scores an uploaded model.
  REQUIRE(detail->summary.test_accuracy);
  CHECK(*detail->summary.test_accuracy == doctest::Approx(0.8));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  auto later = h.coordinator->job_detail(job);
  REQUIRE(later.ok());
  CHECK_FALSE(later->rounds[0].metrics.contains("test_accuracy"));
}

TEST_CASE("an upload with a bad evaluation report is refused and changes nothing") {
  testing::TempDir dir;
  Harness h(dir);
  Api api(*h.coordinator);
  const ClientId a = h.add_client(), b = h.add_client();
  REQUIRE(create_multipart(api, blob_job(), encode_blob(own_model())).response.result_int() == 201);
  const JobId job = 1;
  const ModelBlob v0 = base_model(*h.coordinator, job, 0);
  h.coordinator->tick();
  auto reader = h.reader();
  const json before = store_view(*reader, job);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    const char* what;
    json evaluation;
    Code code;
  };
  const Case cases[] = {
      {"NaN loss", report(0, 20, nan, {{"accuracy", 0.5}}), Code::kInvalidArgument},
      {"negative metric", report(0, 20, 1.0, {{"f1", -0.1}}), Code::kInvalidArgument},
      {"accuracy over 1", report(0, 20, 1.0, {{"accuracy", 1.5}}), Code::kInvalidArgument},
      {"bad metric name", report(0, 20, 1.0, {{"top-5", 0.5}}), Code::kInvalidArgument},
      {"no samples", report(0, 0, 1.0, json::object()), Code::kInvalidArgument},
      {"another model version", report(7, 20, 1.0, {{"accuracy", 0.5}}), Code::kUnprocessable},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    auto r =
        h.coordinator->submit_update(a, job, 1, meta_with(10, c.evaluation), delta_blob(v0, 0.1f));
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == c.code);
    CHECK(store_view(*reader, job) == before);
  }
  // Through the API: the statuses a client sees (NaN is not even JSON).
  const std::string upload = "/v1/jobs/1/rounds/1/update";
  auto upload_with = [&](const std::string& meta_text) {
    return call(api, http::verb::post, upload, h.tokens[a], delta_blob(v0, 0.1f),
                "application/octet-stream", {{"X-Fedcase-Meta", meta_text}})
        .response.result_int();
  };
  CHECK(upload_with(R"({"samples": 10, "evaluation": {"model_version": 0, "samples": 20,
                        "loss": NaN}})") == 400);
  CHECK(upload_with(meta_with(10, report(0, 20, 1.0, {{"accuracy", -1}})).dump()) == 400);
  CHECK(upload_with(meta_with(10, report(3, 20, 1.0, {{"accuracy", 0.5}})).dump()) == 422);
  CHECK(store_view(*reader, job) == before);
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  REQUIRE(detail->current_round);
  CHECK(detail->current_round->updates == 0);
  // The same client may still upload a good report; an update without one is fine too.
  CHECK(upload_with(meta_with(10, report(0, 20, 1.0, {{"accuracy", 0.5}})).dump()) == 200);
  REQUIRE(h.coordinator->submit_update(b, job, 1, meta(10), delta_blob(v0, 0.1f)).ok());
  h.coordinator->tick();
  detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  CHECK(detail->rounds[0].metrics["federated_evaluation"]["clients"] == 1);
}

TEST_CASE("a federated target finishes the job after the round whose clients reach it") {
  testing::TempDir dir;
  Harness h(dir);
  Api api(*h.coordinator);
  std::vector<ClientId> clients = {h.add_client(), h.add_client()};
  REQUIRE(create_multipart(api, blob_job({{"target_accuracy", 0.75}, {"loss", "cross_entropy"}}),
                           encode_blob(own_model()))
              .response.result_int() == 201);
  const JobId job = 1;
  auto round_with_accuracy = [&](RoundIndex round, uint64_t base, double accuracy) {
    h.now = h.now + 100;
    for (ClientId id : clients) REQUIRE(h.coordinator->heartbeat(id, json::object()).ok());
    h.coordinator->tick();
    const ModelBlob model = base_model(*h.coordinator, job, base);
    for (const auto& [id, offer] : invitees(*h.coordinator, clients)) {
      CHECK(offer.round == round);
      REQUIRE(h.coordinator
                  ->submit_update(id, job, round,
                                  meta_with(10, report(base, 10, 0.5, {{"accuracy", accuracy}})),
                                  delta_blob(model, 0.01f))
                  .ok());
    }
    h.coordinator->tick();
  };
  round_with_accuracy(1, 0, 0.7);
  CHECK(h.coordinator->list_jobs().at(0).state == JobState::kRunning);
  CHECK(h.coordinator->list_jobs().at(0).test_accuracy == doctest::Approx(0.7));
  round_with_accuracy(2, 1, 0.8);
  auto detail = h.coordinator->job_detail(job);
  REQUIRE(detail.ok());
  CHECK(detail->summary.state == JobState::kFinished);
  CHECK(detail->summary.model_version == 2);
  // The federated figure of round 2 scores model 1, the round's base.
  const json view = job_detail_json(*detail);
  CHECK(view["result"] == json{{"model_version", 1}, {"round", 2}, {"test_accuracy", 0.8}});
  CHECK(view["test_accuracy"] == 0.8);
  h.reopen();
  auto after = h.coordinator->job_detail(job);
  REQUIRE(after.ok());
  CHECK(after->summary.state == JobState::kFinished);
  CHECK(after->summary.test_accuracy == doctest::Approx(0.8));
}

TEST_CASE("a bad model upload is refused with a clear 4xx and creates no job") {
  testing::TempDir dir;
  Harness h(dir, [](CoordinatorConfig& c) { c.max_model_bytes = 2048; });
  Api api(*h.coordinator);
  ModelBlob nan = own_model();
  nan.data[4] = std::numeric_limits<float>::quiet_NaN();
  ModelBlob large{0, {{{"w", {1000}}}}, std::vector<float>(1000, 0.5f)};  // over 2048 bytes
  ModelBlob empty{0, {{{"w", {0}}}}, {}};  // a tensor without elements
  const json mlp = job_config();
  const json scripted = blob_job({{"model", "torchscript"}});
  struct Case {
    const char* what;
    std::string body;
    std::string content_type;
    int status;
    const char* says;
  };
  const Case cases[] = {
      {"non-finite parameters", multipart_body(blob_job().dump(), encode_blob(nan)),
       multipart_type(), 422, "non-finite"},
      {"over max_model_bytes", multipart_body(blob_job().dump(), encode_blob(large)),
       multipart_type(), 413, "max_model_bytes"},
      {"not a blob", multipart_body(blob_job().dump(), std::string("garbage")), multipart_type(),
       400, "model file"},
      {"no parameters", multipart_body(blob_job().dump(), encode_blob(empty)), multipart_type(),
       400, "no parameters"},
      {"torchscript without a file", multipart_body(scripted.dump()), multipart_type(), 400,
       "needs its model file"},
      {"torchscript as JSON", scripted.dump(), "application/json", 400, "needs its model file"},
      {"torchscript that is not an archive",
       multipart_body(scripted.dump(), std::string("not a zip")), multipart_type(), 400,
       "model file"},
      {"blob without a file", multipart_body(blob_job().dump()), multipart_type(), 400,
       "needs its model file"},
      {"built-in model with a file", multipart_body(mlp.dump(), encode_blob(own_model())),
       multipart_type(), 400, "built in"},
      {"an unknown part", multipart_body(blob_job().dump(), encode_blob(own_model()), "weights"),
       multipart_type(), 400, "unknown multipart part"},
      {"two configs", multipart_body(blob_job().dump(), std::nullopt, "config"), multipart_type(),
       400, "twice"},
      {"no config part",
       std::string("--") + kBoundary +
           "\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n" + encode_blob(own_model()) +
           "\r\n--" + kBoundary + "--",
       multipart_type(), 400, "\"config\" part"},
      {"config not JSON", multipart_body("{name", encode_blob(own_model())), multipart_type(), 400,
       "config part"},
      {"bad config", multipart_body(blob_job({{"loss", "l1"}}).dump(), encode_blob(own_model())),
       multipart_type(), 400, "job.loss"},
      {"no boundary", multipart_body(blob_job().dump(), encode_blob(own_model())),
       "multipart/form-data", 400, "boundary"},
      {"truncated body", multipart_body(blob_job().dump(), encode_blob(own_model())).substr(0, 200),
       multipart_type(), 400, "multipart body"},
  };
  for (const Case& c : cases) {
    const std::string what = c.what;
    CAPTURE(what);
    check_refused(call(api, http::verb::post, "/v1/admin/jobs", kAdmin, c.body, c.content_type),
                  c.status, c.says);
  }
  check_no_job(h);
  // Within the limit it is created.
  CHECK(create_multipart(api, blob_job(), encode_blob(own_model())).response.result_int() == 201);
}

// A TorchScript archive of tests/fixtures/torchscript/ (make_fixtures.py).
std::string torchscript_fixture(const std::string& file) {
  std::ifstream in(FEDCASE_SOURCE_DIR "/tests/fixtures/torchscript/" + file, std::ios::binary);
  REQUIRE(in);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST_CASE("a TorchScript job's parameters come from its archive, which it serves as its module") {
  testing::TempDir dir;
  Harness h(dir);
  Api api(*h.coordinator);
  auto tenant = h.coordinator->create_tenant({{"name", "other"}});
  REQUIRE(tenant.ok());
  const ClientId client = h.add_client();
  const std::string module = torchscript_fixture("mlp.pt");
  const std::string checksum = sha256_hex(module);
  Reply created =
      create_multipart(api, blob_job({{"model", "torchscript"}, {"clients_per_round", 1}}), module);
  REQUIRE_MESSAGE(created.response.result_int() == 201, created.response.body());
  CHECK(body_of(created)["model"] == "torchscript");
  REQUIRE(create_multipart(api, blob_job(), encode_blob(own_model())).response.result_int() == 201);
  // Model 0 holds the module's parameters, in named_parameters order.
  const ModelBlob v0 = base_model(*h.coordinator, 1, 0);
  std::vector<std::string> names;
  for (const TensorSpec& t : v0.layout.tensors) names.push_back(t.name);
  CHECK(names == std::vector<std::string>{"body.0.weight", "body.0.bias", "body.2.0.weight",
                                          "body.2.0.bias", "head.weight"});
  CHECK(v0.layout.tensors[0].shape == std::vector<uint64_t>{8, 4});
  CHECK(v0.data.size() == 8 * 4 + 8 + 6 * 8 + 6 + 3 * 6);

  auto served_module = [&] {
    Reply served = call(api, http::verb::get, "/v1/jobs/1/module", kAdmin);
    REQUIRE(served.response.result_int() == 200);
    REQUIRE(served.shared_body);
    CHECK(*served.shared_body == module);
    CHECK(served.response[http::field::content_type] == "application/octet-stream");
    CHECK(served.response[http::field::etag] == "\"" + checksum + "\"");
    return served.shared_body;
  };
  const auto first = served_module();
  // A client holding no task of the job is refused its module.
  CHECK(call(api, http::verb::get, "/v1/jobs/1/module", h.tokens[client]).response.result_int() ==
        403);
  CHECK(call(api, http::verb::get, "/v1/jobs/1/module", tenant->token).response.result_int() ==
        404);
  CHECK(call(api, http::verb::get, "/v1/jobs/2/module", kAdmin).response.result_int() == 404);
  CHECK(call(api, http::verb::get, "/v1/jobs/9/module", kAdmin).response.result_int() == 404);
  CHECK(call(api, http::verb::post, "/v1/jobs/1/module", kAdmin).response.result_int() == 405);
  Request head{http::verb::get, "/v1/jobs/1/module", 11};
  CHECK(api.route_label(head) == "/v1/jobs/{job}/module");

  const json task = next_task_json(h, api, client);
  CHECK(task["job_id"] == 1);
  CHECK(task["model"] == "torchscript");
  CHECK(task["loss"] == "mse");
  CHECK(task["module_url"] == "/v1/jobs/1/module");
  CHECK(task["module_checksum"] == checksum);
  CHECK(task["evaluate"] == json{{"max_samples", 100}});
  // Holding the task, it downloads the module: the same copy as every download, 304 when it
  // has it already.
  Reply by_client = call(api, http::verb::get, "/v1/jobs/1/module", h.tokens[client]);
  CHECK(by_client.response.result_int() == 200);
  CHECK(by_client.shared_body == first);
  CHECK(call(api, http::verb::get, "/v1/jobs/1/module", h.tokens[client], "", "",
             {{"If-None-Match", "\"" + checksum + "\""}})
            .response.result_int() == 304);
  const json detail = body_of(call(api, http::verb::get, "/v1/admin/jobs/1", kAdmin));
  CHECK(detail["model"] == "torchscript");
  CHECK(detail["module_bytes"] == module.size());
  CHECK_FALSE(
      body_of(call(api, http::verb::get, "/v1/admin/jobs/2", kAdmin)).contains("module_bytes"));
  // The module is kept with the job: after a restart it is served as before.
  h.reopen();
  Api reopened(*h.coordinator);
  Reply again = call(reopened, http::verb::get, "/v1/jobs/1/module", kAdmin);
  REQUIRE(again.response.result_int() == 200);
  CHECK(*again.shared_body == module);
  CHECK(again.response[http::field::etag] == "\"" + checksum + "\"");
}

TEST_CASE("a report of more held-out samples than the job asks for is refused") {
  testing::TempDir dir;
  Harness h(dir);
  Api api(*h.coordinator);
  const ClientId a = h.add_client();
  h.add_client();  // the round waits for two
  const json config = blob_job({{"evaluation", {{"max_samples", 50}}}});
  REQUIRE(create_multipart(api, config, encode_blob(own_model())).response.result_int() == 201);
  const ModelBlob v0 = base_model(*h.coordinator, 1, 0);
  h.coordinator->tick();
  auto reader = h.reader();
  const json before = store_view(*reader, 1);
  // One client claiming a huge held-out set would outweigh every other in the round's mean.
  auto r = h.coordinator->submit_update(
      a, 1, 1, meta_with(10, report(0, 1000000, 0.1, {{"accuracy", 1.0}})), delta_blob(v0, 0.1f));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == Code::kUnprocessable);
  CHECK(r.status().message().find("at most 50") != std::string::npos);
  CHECK(store_view(*reader, 1) == before);
  CHECK(h.coordinator
            ->submit_update(a, 1, 1, meta_with(10, report(0, 50, 0.1, {{"accuracy", 0.5}})),
                            delta_blob(v0, 0.1f))
            .ok());
}

TEST_CASE("only the admin's TorchScript jobs may be scored on a server dataset") {
  testing::TempDir dir;
  std::filesystem::create_directories(dir.path() / "datasets" / "eval");
  Harness h(dir, [&](CoordinatorConfig& c) { c.datasets_dir = dir.file("datasets"); });
  json config = blob_job({{"model", "torchscript"},
                          {"evaluation", {{"server_dataset", "eval"}, {"input_shape", {4}}}}});
  const std::string module = torchscript_fixture("mlp.pt");
  double retry_after = 0;
  auto tenant = h.coordinator->create_job(config, 5, retry_after, module);
  CHECK(tenant.status().code() == Code::kPermissionDenied);
  config["evaluation"]["server_dataset"] = "missing";
  auto missing = h.coordinator->create_job(config, 0, retry_after, module);
  CHECK(missing.status().code() == Code::kInvalidArgument);
  check_no_job(h);
  config["evaluation"]["server_dataset"] = "eval";
  auto admin = h.coordinator->create_job(config, 0, retry_after, module);
  REQUIRE_MESSAGE(admin.ok(), admin.status().to_string());
}

TEST_CASE("a TorchScript archive that cannot be a job's model is refused and creates no job") {
  testing::TempDir dir;
  // The smallest fixture archives are about 3 KiB; mlp.pt is 10.6 KiB.
  Harness h(dir, [](CoordinatorConfig& c) { c.max_model_bytes = 8192; });
  Api api(*h.coordinator);
  const json scripted = blob_job({{"model", "torchscript"}});
  struct Case {
    const char* file;
    int status;
    const char* says;
  };
  const Case cases[] = {
      {"nan.pt", 422, "model file"},         // a parameter holds NaN
      {"float64.pt", 400, "float64"},        // not float32
      {"no_params.pt", 400, "parameters"},   // a module without parameters
      {"mlp.pt", 413, "max_model_bytes"},    // over the limit
      {"checkpoint.pt", 400, "model file"},  // a zip, but not TorchScript
  };
  for (const Case& c : cases) {
    const std::string file = c.file;
    CAPTURE(file);
    check_refused(create_multipart(api, scripted, torchscript_fixture(file)), c.status, c.says);
  }
  check_no_job(h);
  CHECK(create_multipart(api, scripted, torchscript_fixture("scalar.pt")).response.result_int() ==
        201);
}

TEST_CASE("only a multipart job creation by the admin or a tenant may send a model's bytes") {
  testing::TempDir dir;
  Harness h(dir, [](CoordinatorConfig& c) { c.max_model_bytes = 4096; });
  Api api(*h.coordinator);
  auto tenant = h.coordinator->create_tenant({{"name", "team"}});
  REQUIRE(tenant.ok());
  const ClientId client = h.add_client();
  const uint64_t json_limit = h.coordinator->config().max_json_bytes;
  auto limit = [&](const std::string& token, const std::string& content_type,
                   http::verb method = http::verb::post) {
    Request header{method, "/v1/admin/jobs", 11};
    header.set(http::field::authorization, "Bearer " + token);
    header.set(http::field::content_type, content_type);
    return api.body_limit(header);
  };
  CHECK(limit(kAdmin, multipart_type()) == 4096 + json_limit);
  CHECK(limit(tenant->token, multipart_type()) == 4096 + json_limit);
  CHECK(limit(kAdmin, "application/json") == json_limit);
  CHECK(limit(h.tokens[client], multipart_type()) == json_limit);
  CHECK(limit("unknown-token-0123456789", multipart_type()) == json_limit);
  CHECK(api.largest_body_limit() ==
        std::max<uint64_t>(h.coordinator->config().max_upload_bytes, 4096 + json_limit));
}

TEST_CASE("over real HTTP: a multipart job creation, its task, and evaluated uploads") {
  testing::TempDir dir;
  auto service = testing::start_coordinator(dir, [](CoordinatorConfig& c) {
    c.max_model_bytes = 4u << 20;  // larger than max_json_bytes (1 MiB)
  });
  const uint16_t port = service->port();
  testing::Caller admin(port, testing::kAdminToken);
  // A 2 MiB model: the body is over max_json_bytes, within max_model_bytes + max_json_bytes.
  ModelBlob model{3, {{{"w", {512 * 1024}}}}, std::vector<float>(512 * 1024, 0.25f)};
  const std::string config = blob_job({{"training", {{"deadline", {{"seconds", 30}}}}}}).dump();
  testing::Reply created =
      admin.call("POST", "/v1/admin/jobs", multipart_body(config, encode_blob(model)),
                 {{"Content-Type", multipart_type()}});
  REQUIRE_MESSAGE(created.status == 201, created.raw);
  CHECK(created.body["model"] == "blob");
  const JobId job = created.body["job_id"];
  // Over max_model_bytes + max_json_bytes: 413 as soon as the header arrives, nothing read.
  testing::RawConnection big(port);
  REQUIRE(big.send("POST /v1/admin/jobs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                   std::string(testing::kAdminToken) + "\r\nContent-Type: " + multipart_type() +
                   "\r\nContent-Length: " + std::to_string((5u << 20) + 1) + "\r\n\r\n"));
  CHECK(big.read().rfind("HTTP/1.1 413", 0) == 0);
  // Within the body limit but over max_model_bytes: 413 from the coordinator.
  ModelBlob too_big{0, {{{"w", {(4u << 20) / 4}}}}, std::vector<float>((4u << 20) / 4, 0.f)};
  testing::Reply refused =
      admin.call("POST", "/v1/admin/jobs", multipart_body(config, encode_blob(too_big)),
                 {{"Content-Type", multipart_type()}});
  CHECK(refused.status == 413);
  CHECK(admin.get("/v1/admin/jobs").body["jobs"].size() == 1);

  // Two clients take the round and upload with their evaluations of model 0.
  std::deque<testing::Caller> clients;
  for (int i = 0; i < 2; ++i) {
    testing::Caller enroll(port, testing::kEnrollmentToken);
    testing::Reply registered = enroll.post("/v1/clients/register", {{"dataset_size", 100}});
    REQUIRE(registered.status == 201);
    clients.emplace_back(port, registered.body["token"].get<std::string>());
  }
  const uint64_t samples[] = {25, 75};
  const double accuracy[] = {0.6, 0.8};
  for (size_t i = 0; i < clients.size(); ++i) {
    testing::Reply task;
    REQUIRE(testing::wait_until(
        [&] {
          task = clients[i].get("/v1/task?wait=1");
          return task.status == 200;
        },
        10));
    CHECK(task.body["model"] == "blob");
    CHECK(task.body["loss"] == "mse");
    CHECK(task.body["evaluate"]["max_samples"] == 100);
    testing::Reply download = clients[i].get(task.body["model_url"].get<std::string>());
    REQUIRE(download.status == 200);
    auto base = decode_blob(download.raw, download.raw.size());
    REQUIRE(base.ok());
    const json meta_json =
        meta_with(10, report(task.body["model_version"].get<uint64_t>(), samples[i],
                             0.5 + double(i), {{"accuracy", accuracy[i]}}));
    testing::Reply uploaded = clients[i].call(
        "POST", task.body["upload_url"].get<std::string>(), delta_blob(*base, 0.01f),
        {{"Content-Type", "application/octet-stream"}, {"X-Fedcase-Meta", meta_json.dump()}});
    REQUIRE_MESSAGE(uploaded.status == 200, uploaded.raw);
  }
  json committed;
  REQUIRE(testing::wait_until(
      [&] {
        auto rounds =
            testing::committed_rounds(admin.get("/v1/admin/jobs/" + std::to_string(job)).body);
        if (!rounds.empty()) committed = rounds[0];
        return !rounds.empty();
      },
      10));
  const json& e = committed["metrics"]["federated_evaluation"];
  CHECK(e["samples"] == 100);
  CHECK(e["loss"].get<double>() == doctest::Approx((25 * 0.5 + 75 * 1.5) / 100));
  CHECK(e["metrics"]["accuracy"].get<double>() == doctest::Approx((25 * 0.6 + 75 * 0.8) / 100));
}

TEST_CASE("the client API answers in the messages the SDK reads, and checks the SDK's version") {
  testing::TempDir dir;
  Harness h(dir);
  Api api(*h.coordinator);
  const std::string enroll = "enroll-token-0123456789";
  // An SDK of a protocol version this coordinator does not serve: 422 naming both versions.
  json newer = {{"protocol_version", protocol::kProtocolVersion + 1}, {"dataset_size", 100}};
  Reply refused =
      call(api, http::verb::post, "/v1/clients/register", enroll, newer.dump(), "application/json");
  CHECK(refused.response.result_int() == 422);
  auto error = protocol::read_error_reply(body_of(refused));
  REQUIRE(error.ok());
  CHECK(error->code == "unprocessable");
  CHECK(error->message.find("protocol version " + std::to_string(protocol::kProtocolVersion + 1)) !=
        std::string::npos);
  CHECK(error->message.find("serves protocol version " +
                            std::to_string(protocol::kProtocolVersion)) != std::string::npos);
  CHECK(h.coordinator->list_clients().empty());

  // This SDK's version registers; the answer reads as a registration reply.
  protocol::Registration registration;
  registration.sdk_version = "fedcase-sdk/1";
  registration.dataset_size = 100;
  registration.device.sample_bytes = 785;
  registration.labels = {{"region", "eu"}};
  Reply registered = call(api, http::verb::post, "/v1/clients/register", enroll,
                          protocol::write_registration(registration).dump(), "application/json");
  REQUIRE(registered.response.result_int() == 201);
  auto reply = protocol::read_registration_reply(body_of(registered));
  REQUIRE(reply.ok());
  h.tokens[reply->client_id] = reply->token;
  const std::vector<ClientSummary> clients = h.coordinator->list_clients();
  REQUIRE(clients.size() == 1);
  auto stored = protocol::read_registration(clients[0].record.info);
  REQUIRE(stored.ok());
  CHECK(*stored == registration);

  // The task reads as a task offer, with the job's training settings, weight decay included.
  json config = job_config({{"clients_per_round", 1},
                            {"min_clients", 1},
                            {"selection", {{"overcommit", 1.0}}},
                            {"training", {{"weight_decay", 5e-4}, {"sampling", "importance"}}}});
  REQUIRE(h.coordinator->create_job(config).ok());
  auto task = protocol::read_task_offer(next_task_json(h, api, reply->client_id));
  REQUIRE_MESSAGE(task.ok(), task.status().to_string());
  CHECK(task->protocol_version == protocol::kProtocolVersion);
  CHECK(task->train.weight_decay == 5e-4);
  CHECK(task->sampling == protocol::Sampling::kImportance);
  CHECK(task->model_url == "/v1/jobs/" + std::to_string(task->job) + "/models/0");
  Reply status = call(api, http::verb::get, task->status_url, reply->token);
  auto answer = protocol::read_task_status(body_of(status));
  REQUIRE(answer.ok());
  CHECK(answer->needed);
  CHECK(answer->reason == "open");
}

}  // namespace
}  // namespace fedcase::server
