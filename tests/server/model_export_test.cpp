// A job's models leave the coordinator: the versions with their accuracy, exports as the blob,
// npz and TorchScript (named by number, "latest" or "best"), scoped like the job itself; and a
// new job may start from another job's trained model (init_from). In-process through the Api
// over a fixture coordinator with a real SQLite store and evaluator.

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <cstring>

#include "common/crypto.h"
#include "formats/zip_reader.h"
#include "ml/torchscript_model.h"
#include "server/api/views.h"
#include "server/core/base/model_exports.h"
#include "tests/server/api_calls.h"
#include "tests/server/coordinator_fixture.h"
#include "tests/support/torchscript_module.h"

namespace fedcase::server {
namespace {

using nlohmann::json;
using namespace fixture;

// Commits one round of `job`: every invitee among `clients` uploads `delta` in every parameter
// (with a federated `accuracy` of the base model when given).
void commit_round(Harness& h, JobId job, const std::vector<ClientId>& clients, float delta,
                  std::optional<double> accuracy = std::nullopt) {
  h.now = h.now + 100;
  for (ClientId id : clients) REQUIRE(h.coordinator->heartbeat(id, json::object()).ok());
  h.coordinator->tick();
  const auto offers = invitees(*h.coordinator, clients);
  REQUIRE_FALSE(offers.empty());
  for (const auto& [id, offer] : offers) {
    const ModelBlob base = base_model(*h.coordinator, job, offer.model_version);
    json m = meta(10);
    if (accuracy) {
      m["evaluation"] = {{"model_version", offer.model_version},
                         {"samples", 10},
                         {"loss", 0.5},
                         {"metrics", {{"accuracy", *accuracy}}}};
    }
    REQUIRE(h.coordinator->submit_update(id, job, offer.round, m, delta_blob(base, delta)).ok());
  }
  h.coordinator->tick();
}

// The job's committed rounds once each holds its test accuracy (the evaluator runs on its own
// thread).
std::vector<storage::RoundRecord> evaluated_rounds(Harness& h, JobId job, size_t count) {
  std::vector<storage::RoundRecord> rounds;
  for (int i = 0; i < 600; ++i) {
    auto detail = h.coordinator->job_detail(job);
    REQUIRE(detail.ok());
    rounds.clear();
    for (const auto& r : detail->rounds) {
      if (r.state == RoundState::kCommitted && r.metrics.contains("test_accuracy")) {
        rounds.push_back(r);
      }
    }
    if (rounds.size() >= count) return rounds;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL("the evaluations did not arrive");
  return rounds;
}

Reply get(Api& api, const std::string& target, const std::string& token = kAdmin) {
  return call(api, http::verb::get, target, token);
}

int status_of(Api& api, const std::string& target, const std::string& token = kAdmin) {
  return get(api, target, token).response.result_int();
}

// The floats of each entry of an npz archive, by tensor name.
std::map<std::string, std::vector<float>> npz_tensors(const std::string& archive) {
  formats::ZipArchive zip(1 << 26);
  REQUIRE(zip.open(archive).ok());
  std::map<std::string, std::vector<float>> out;
  for (const formats::ZipEntry& entry : zip.entries()) {
    auto npy = zip.read(entry, 1 << 26);
    REQUIRE(npy.ok());
    uint16_t header = 0;
    std::memcpy(&header, npy->data() + 8, 2);
    const std::string_view data = npy->substr(10 + header);
    std::vector<float> values(data.size() / sizeof(float));
    std::memcpy(values.data(), data.data(), data.size());
    std::string name(entry.name);
    out[name.substr(0, name.size() - 4)] = std::move(values);  // without ".npy"
  }
  return out;
}

}  // namespace

TEST_CASE("version selectors and listings follow the job's evaluation target") {
  CHECK(parse_export_format("npz").value() == ExportFormat::kNpz);
  CHECK(parse_export_format("onnx").status().code() == Code::kInvalidArgument);
  std::vector<storage::RoundRecord> rounds(4);
  for (size_t i = 0; i < rounds.size(); ++i) {
    rounds[i].index = i + 1;
    rounds[i].base_version = i;
    rounds[i].closed_at = 10.0 * (i + 1);
    rounds[i].state = RoundState::kCommitted;
    rounds[i].metrics = {{"model_version", i + 1}};
  }
  rounds[2].state = RoundState::kFailed;  // makes no version 3
  rounds[2].metrics = {{"federated_evaluation", {{"metrics", {{"accuracy", 0.99}}}}}};
  rounds[0].metrics["test_accuracy"] = 0.5;
  rounds[1].metrics["test_accuracy"] = 0.7;
  rounds[3].metrics["test_accuracy"] = 0.7;
  rounds[3].metrics["federated_evaluation"] = {{"metrics", {{"accuracy", 0.6}}}};

  const auto server = model_versions(rounds, "server", 1.0);
  REQUIRE(server.size() == 4);  // 0, 1, 2, 4
  CHECK(server[0].version == 0);
  CHECK_FALSE(server[0].round);
  CHECK(server[0].created_at == 1.0);
  CHECK_FALSE(server[0].accuracy);
  CHECK(server[3].version == 4);
  CHECK(server[3].round == 4);
  CHECK(server[3].created_at == 40.0);
  CHECK(server[1].accuracy == 0.5);
  CHECK(resolve_version("latest", server).value() == 4);
  CHECK(resolve_version("best", server).value() == 4);  // a tie goes to the newer version
  CHECK(resolve_version("2", server).value() == 2);
  CHECK(resolve_version("17", server).value() == 17);  // the store decides whether it exists
  CHECK(resolve_version("newest", server).status().code() == Code::kInvalidArgument);
  CHECK(resolve_version("-1", server).status().code() == Code::kInvalidArgument);

  // A federated figure scores the round's base model, even a failed round's.
  const auto federated = model_versions(rounds, "federated", 1.0);
  CHECK(federated[2].version == 2);
  CHECK(federated[2].accuracy == 0.99);
  CHECK(federated[3].version == 4);
  CHECK_FALSE(federated[3].accuracy);  // round 4 scored version 3, which was never committed
  CHECK(resolve_version("best", federated).value() == 2);
  CHECK(resolve_version("best", model_versions({}, "server", 0)).status().code() ==
        Code::kNotFound);
}

TEST_CASE("a job's versions are listed and exported as the blob, npz and TorchScript") {
  testing::TempDir dir;
  Harness h(dir);
  Api api(*h.coordinator);
  const std::vector<ClientId> clients = {h.add_client(), h.add_client()};
  REQUIRE(h.coordinator->create_job(job_config({{"selection", {{"overcommit", 1.0}}}})).ok());
  const JobId job = 1;
  commit_round(h, job, clients, 0.01f);
  commit_round(h, job, clients, -0.02f);
  const auto rounds = evaluated_rounds(h, job, 2);
  const double accuracy_1 = rounds[0].metrics["test_accuracy"];
  const double accuracy_2 = rounds[1].metrics["test_accuracy"];
  const uint64_t best = accuracy_2 >= accuracy_1 ? 2 : 1;

  Reply listed = get(api, "/v1/admin/jobs/1/models");
  REQUIRE(listed.response.result_int() == 200);
  const json listing = body_of(listed);
  const std::string blob_1 = *h.coordinator->model(job, 1)->blob;
  CHECK(listing["job_id"] == 1);
  CHECK(listing["evaluation_target"] == "server");
  CHECK(listing["latest"] == 2);
  CHECK(listing["best"] == best);
  CHECK(listing["bytes"] == blob_1.size());
  REQUIRE(listing["models"].size() == 3);
  CHECK(listing["models"][0]["round"].is_null());
  CHECK(listing["models"][0]["accuracy"].is_null());
  CHECK(listing["models"][1]["round"] == 1);
  CHECK(listing["models"][1]["accuracy"] == accuracy_1);
  CHECK(listing["models"][2]["accuracy"] == accuracy_2);
  CHECK(listing["models"][2]["exports"]["npz"] == "/v1/admin/jobs/1/models/2/export?format=npz");

  // The blob, as stored, named and checksummed for saving.
  Reply blob = get(api, "/v1/admin/jobs/1/models/1/export?format=blob");
  REQUIRE(blob.response.result_int() == 200);
  REQUIRE(blob.shared_body);
  CHECK(*blob.shared_body == blob_1);
  const std::string sha = sha256_hex(blob_1);
  CHECK(blob.response[http::field::etag] == "\"" + sha + "\"");
  CHECK(blob.response["Repr-Digest"] == "sha-256=:" + hex_to_base64(sha) + ":");
  CHECK(blob.response[http::field::content_disposition] ==
        "attachment; filename=\"job-1-v1.blob\"");
  CHECK(blob.response["X-Fedcase-Model-Version"] == "1");
  CHECK(blob.response[http::field::cache_control].find("immutable") != std::string::npos);
  // "latest" and "best" move on as the job trains: revalidated, never cached for good.
  Reply latest = get(api, "/v1/admin/jobs/1/models/latest/export?format=blob");
  CHECK(latest.response["X-Fedcase-Model-Version"] == "2");
  CHECK(latest.response[http::field::cache_control] == "no-cache");
  CHECK(get(api, "/v1/admin/jobs/1/models/best/export?format=blob")
            .response["X-Fedcase-Model-Version"] == std::to_string(best));
  Reply again = call(api, http::verb::get, "/v1/admin/jobs/1/models/1/export?format=blob", kAdmin,
                     "", "", {{"If-None-Match", "\"" + sha + "\""}});
  CHECK(again.response.result_int() == 304);

  // npz: every tensor under its name, with the committed values.
  const ModelBlob v2 = base_model(*h.coordinator, job, 2);
  Reply npz = get(api, "/v1/admin/jobs/1/models/2/export?format=npz");
  REQUIRE(npz.response.result_int() == 200);
  const auto tensors = npz_tensors(*npz.shared_body);
  REQUIRE(tensors.size() == v2.layout.tensors.size());
  size_t offset = 0;
  for (const TensorSpec& t : v2.layout.tensors) {
    const std::vector<float> expected(v2.data.begin() + offset,
                                      v2.data.begin() + offset + t.element_count());
    CHECK(tensors.at(t.name) == expected);
    offset += t.element_count();
  }

  // TorchScript (the default format): the built-in model with the committed parameters, whose
  // outputs on the evaluator's test set give the accuracy the coordinator recorded.
  Reply script = get(api, "/v1/admin/jobs/1/models/2/export");
  REQUIRE(script.response.result_int() == 200);
  CHECK(script.response[http::field::content_disposition] ==
        "attachment; filename=\"job-1-v2.pt\"");
  auto loaded = ml::TorchScriptModel::load(*script.shared_body);
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().to_string());
  CHECK(loaded->layout() == v2.layout);
  CHECK(loaded->parameters() == v2.data);
  const ml::Dataset& test = small_test_set();
  size_t scored = 0;
  auto evaluation = loaded->evaluate(ml::Loss::kCrossEntropy, [&](ml::TensorBatch& batch) {
    batch.sample_shape = {1, 28, 28};
    batch.target_width = 1;
    for (; scored < test.size() && batch.count < 128; ++scored, ++batch.count) {
      for (size_t k = 0; k < test.image_bytes(); ++k) {
        batch.inputs.push_back(test.pixels[scored * test.image_bytes() + k] / 255.0f);
      }
      batch.targets.push_back(float(test.labels[scored]));
    }
    return Result<bool>(batch.count > 0);
  });
  REQUIRE(evaluation.ok());
  CHECK(evaluation->samples == rounds[1].metrics["test_samples"]);
  CHECK(evaluation->accuracy == accuracy_2);
  CHECK(evaluation->loss == doctest::Approx(rounds[1].metrics["test_loss"].get<double>()));

  // Built once: the second request shares the first one's bytes.
  auto first = h.coordinator->export_model(job, "2", ExportFormat::kTorchScript);
  auto second = h.coordinator->export_model(job, "latest", ExportFormat::kTorchScript);
  REQUIRE((first.ok() && second.ok()));
  CHECK(first->body.get() == second->body.get());

  // Unknown versions and jobs are 404, bad selectors and formats 400, a client 403.
  CHECK(status_of(api, "/v1/admin/jobs/1/models/3/export") == 404);
  CHECK(get(api, "/v1/admin/jobs/1/models/3/export").response.body().find("no model version 3") !=
        std::string::npos);
  CHECK(status_of(api, "/v1/admin/jobs/9/models/1/export") == 404);
  CHECK(status_of(api, "/v1/admin/jobs/9/models") == 404);
  CHECK(status_of(api, "/v1/admin/jobs/1/models/newest/export") == 400);
  CHECK(status_of(api, "/v1/admin/jobs/1/models/1/export?format=onnx") == 400);
  CHECK(status_of(api, "/v1/admin/jobs/1/models/1/export", h.tokens[clients[0]]) == 403);
  CHECK(status_of(api, "/v1/admin/jobs/1/models", h.tokens[clients[0]]) == 403);
  CHECK(call(api, http::verb::post, "/v1/admin/jobs/1/models/1/export", kAdmin)
            .response.result_int() == 405);
}

TEST_CASE("a tenant exports its own jobs only; a blob has no TorchScript; best needs a score") {
  testing::TempDir dir;
  Harness h(dir);
  Api api(*h.coordinator);
  auto team = h.coordinator->create_tenant({{"name", "team"}});
  auto other = h.coordinator->create_tenant({{"name", "other"}});
  REQUIRE((team.ok() && other.ok()));
  const std::vector<ClientId> clients = {h.add_client(), h.add_client()};
  Reply created =
      call(api, http::verb::post, "/v1/admin/jobs", team->token,
           multipart_body(blob_job({{"loss", "cross_entropy"}}).dump(), encode_blob(own_model())),
           multipart_type());
  REQUIRE_MESSAGE(created.response.result_int() == 201, created.response.body());
  const JobId job = 1;

  // Nothing evaluated yet: no best version.
  CHECK(body_of(get(api, "/v1/admin/jobs/1/models", team->token))["best"].is_null());
  Reply no_best = get(api, "/v1/admin/jobs/1/models/best/export?format=npz", team->token);
  CHECK(no_best.response.result_int() == 404);
  CHECK(body_of(no_best)["error"]["message"] == "job 1: no model version has been evaluated yet");

  commit_round(h, job, clients, 0.5f, 0.4);
  commit_round(h, job, clients, 0.5f, 0.8);  // scores version 1
  commit_round(h, job, clients, 0.5f, 0.6);  // scores version 2
  const json listing = body_of(get(api, "/v1/admin/jobs/1/models", team->token));
  CHECK(listing["evaluation_target"] == "federated");
  CHECK(listing["latest"] == 3);
  CHECK(listing["best"] == 1);
  CHECK(listing["models"][0]["accuracy"] == 0.4);
  CHECK(listing["models"][3]["accuracy"].is_null());
  Reply best = get(api, "/v1/admin/jobs/1/models/best/export?format=blob", team->token);
  REQUIRE(best.response.result_int() == 200);
  CHECK(*best.shared_body == *h.coordinator->model(job, 1)->blob);

  // A model uploaded as a blob has no TorchScript code; its npz holds its own tensors.
  Reply script = get(api, "/v1/admin/jobs/1/models/1/export?format=torchscript", team->token);
  CHECK(script.response.result_int() == 400);
  CHECK(body_of(script)["error"]["message"].get<std::string>().find("uploaded as a blob") !=
        std::string::npos);
  Reply npz = get(api, "/v1/admin/jobs/1/models/0/export?format=npz", team->token);
  REQUIRE(npz.response.result_int() == 200);
  const auto tensors = npz_tensors(*npz.shared_body);
  CHECK(tensors.at("dense.weight") == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(tensors.at("dense.bias") == std::vector<float>{-1, 0, 1});

  // Another tenant does not see the job; the admin does.
  CHECK(status_of(api, "/v1/admin/jobs/1/models", other->token) == 404);
  CHECK(status_of(api, "/v1/admin/jobs/1/models/1/export?format=blob", other->token) == 404);
  CHECK(status_of(api, "/v1/admin/jobs/1/models/1/export?format=blob") == 200);
}

TEST_CASE("a TorchScript job whose stored module is corrupt still exports npz and says why not") {
  testing::TempDir dir;
  Harness h(dir);
  Api api(*h.coordinator);
  REQUIRE(create_multipart(api, blob_job({{"model", "torchscript"}}),
                           testing::classifier_module(4, 3, 2, 1))
              .response.result_int() == 201);
  CHECK(status_of(api, "/v1/admin/jobs/1/models/0/export") == 200);
  h.coordinator.reset();
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(dir.file("fedcase.db").c_str(), &db) == SQLITE_OK);
  REQUIRE(sqlite3_exec(db, "UPDATE job_modules SET module = X'504B0304DEADBEEF'", nullptr, nullptr,
                       nullptr) == SQLITE_OK);
  sqlite3_close(db);
  h.reopen();
  Api reopened(*h.coordinator);
  Reply refused = get(reopened, "/v1/admin/jobs/1/models/0/export");
  CHECK(refused.response.result_int() == 422);
  CHECK(body_of(refused)["error"]["message"].get<std::string>().find(
            "job 1 cannot be exported as TorchScript") != std::string::npos);
  CHECK(status_of(reopened, "/v1/admin/jobs/1/models/0/export?format=npz") == 200);
}

TEST_CASE("a job starts from another job's trained model when its tensors fit") {
  testing::TempDir dir;
  Harness h(dir);
  Api api(*h.coordinator);
  auto team = h.coordinator->create_tenant({{"name", "team"}});
  REQUIRE(team.ok());
  const std::vector<ClientId> clients = {h.add_client(), h.add_client()};
  REQUIRE(h.coordinator->create_job(job_config({{"selection", {{"overcommit", 1.0}}}})).ok());
  commit_round(h, 1, clients, 0.05f);
  const ModelBlob trained = base_model(*h.coordinator, 1, 1);

  auto warm =
      h.coordinator->create_job(job_config({{"name", "fine-tune"}, {"init_from", {{"job", 1}}}}));
  REQUIRE_MESSAGE(warm.ok(), warm.status().to_string());
  CHECK(base_model(*h.coordinator, warm->id, 0).data == trained.data);
  // The stored config names the version it started from.
  CHECK(h.reader()->get_job(warm->id)->config["init_from"] == json{{"job", 1}, {"version", 1}});
  h.reopen();
  CHECK(base_model(*h.coordinator, warm->id, 0).data == trained.data);
  Api reopened(*h.coordinator);

  auto refused = [&](json init_from, const std::string& says, const std::string& token = kAdmin,
                     const std::string& model = "mlp") {
    CAPTURE(init_from);
    const size_t jobs = h.coordinator->list_jobs().size();
    Reply r =
        call(reopened, http::verb::post, "/v1/admin/jobs", token,
             job_config({{"model", model}, {"init_from", init_from}}).dump(), "application/json");
    CHECK(r.response.result_int() == 400);
    CHECK(body_of(r)["error"]["message"].get<std::string>().find(says) != std::string::npos);
    CHECK(h.coordinator->list_jobs().size() == jobs);
  };
  refused({{"job", 1}}, "tensor 'fc1.weight' comes where 'conv1.weight' is here", kAdmin, "cnn");
  refused({{"job", 9}}, "init_from: job 9 not found");
  refused({{"job", 1}, {"version", 7}}, "job 1 has no model version 7");
  refused({{"job", 1}, {"version", "best"}, {"extra", 1}}, "init_from.extra");
  refused({{"job", 1}, {"version", "newest"}}, "init_from.version");
  refused({{"version", 1}}, "init_from.job is required");
  refused({{"job", 1}}, "init_from: job 1 not found", team->token);  // not the tenant's job

  // Two uploaded models with the same names but other shapes do not fit either.
  REQUIRE(create_multipart(reopened, blob_job(), encode_blob(own_model())).response.result_int() ==
          201);
  const JobId blob_job_id = h.coordinator->list_jobs().back().id;
  ModelBlob transposed = own_model();
  transposed.layout.tensors[0].shape = {2, 3};
  Reply mismatch =
      create_multipart(reopened, blob_job({{"init_from", {{"job", blob_job_id}, {"version", 0}}}}),
                       encode_blob(transposed));
  CHECK(mismatch.response.result_int() == 400);
  CHECK(body_of(mismatch)["error"]["message"].get<std::string>().find(
            "tensor 'dense.weight' is [2,3] here and [3,2] there") != std::string::npos);
}

}  // namespace fedcase::server
