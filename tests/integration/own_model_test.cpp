// Bring your own model: a job created from a TorchScript module that is none of the built-in
// models (made with libtorch here), sent with its config as the operators' CLI sends it
// (multipart), trained by three SDK sessions through TorchScriptTrainer on folders of their
// own sample files, and scored by federated evaluation on their held-out folders.

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "cli/request.h"
#include "client_sdk/session.h"
#include "client_sdk/torchscript_trainer.h"
#include "common/torchscript_archive.h"
#include "ml/model.h"
#include "tests/support/coordinator_harness.h"
#include "tests/support/torchscript_module.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

// Fashion-MNIST training samples [first, first + count) as float record files under `dir`.
std::shared_ptr<client::SampleSource> image_folder(const std::filesystem::path& dir, size_t first,
                                                   size_t count) {
  const ml::Dataset& data = fmnist_train();
  std::filesystem::create_directories(dir);
  for (size_t i = first; i < first + count; ++i) {
    std::vector<float> pixels(784);
    for (size_t k = 0; k < 784; ++k) pixels[k] = data.pixels[i * 784 + k] / 255.0f;
    std::ofstream(dir / ("sample-" + std::to_string(i) + ".f32"), std::ios::binary)
        << client::float_record(pixels, {float(data.labels[i])});
  }
  auto source = client::FolderSource::open(dir.string());
  REQUIRE(source.ok());
  return std::move(source).value();
}

// POST /v1/admin/jobs with the config and the module, as `fedcase jobs create --model` does.
Reply create_job(uint16_t port, const json& config, const std::string& module) {
  cli::Invocation inv;
  inv.command = cli::Command::kJobsCreate;
  inv.model_file = "model.pt";
  inv.token = kAdminToken;
  const cli::ApiRequest request = cli::api_request(inv, config.dump(), module);
  Caller admin(port, kAdminToken);
  return admin.call(request.method, request.target, request.body, request.headers);
}

}  // namespace

TEST_CASE("a TorchScript job trains on the clients' own files and its federated accuracy rises") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  const std::string module = classifier_module(784, 32, 10, 7);
  json config = {{"name", "own-model"},
                 {"model", "torchscript"},
                 {"loss", "cross_entropy"},
                 {"rounds", 4},
                 {"clients_per_round", 3},
                 {"selection", {{"policy", "random"}, {"overcommit", 1.0}}},
                 {"training",
                  {{"local_epochs", 1},
                   {"batch_size", 32},
                   {"lr", 0.1},
                   {"momentum", 0.9},
                   {"deadline", {{"mode", "fixed"}, {"seconds", 60}}}}},
                 {"evaluation", {{"federated", true}}}};
  Reply created = create_job(port, config, module);
  REQUIRE_MESSAGE(created.status == 201, created.raw);
  const uint64_t job = created.body["job_id"];
  CHECK(created.body["model"] == "torchscript");

  // The coordinator serves the module it stored and the parameters it read from it.
  Caller admin(port, kAdminToken);
  Reply served = admin.get("/v1/jobs/" + std::to_string(job) + "/module");
  REQUIRE(served.status == 200);
  CHECK(served.response.body == module);
  Reply initial = admin.get("/v1/jobs/" + std::to_string(job) + "/models/0");
  REQUIRE(initial.status == 200);
  auto blob = decode_blob(initial.response.body, 1 << 20);
  REQUIRE(blob.ok());
  CHECK(blob->data == read_torchscript_parameters(module, {})->data);

  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<client::Session>> sessions;
  std::vector<std::thread> threads;
  for (size_t i = 0; i < 3; ++i) {
    client::SessionConfig s;
    s.coordinator.port = port;
    s.enrollment_token = kEnrollmentToken;
    s.name = "device-" + std::to_string(i);
    s.trainer = std::move(client::make_torchscript_trainer({{1, 28, 28}})).value();
    s.train_data = image_folder(dir.path() / s.name / "train", i * 400, 400);
    s.eval_data = image_folder(dir.path() / s.name / "held-out", 20000 + i * 100, 100);
    s.state_dir = (dir.path() / s.name / "state").string();
    s.poll_wait_s = 1;
    auto session = client::Session::create(std::move(s));
    REQUIRE_MESSAGE(session.ok(), session.status().to_string());
    sessions.push_back(std::move(session).value());
  }
  for (auto& session : sessions) {
    threads.emplace_back([&session, &stop] {
      ml::set_torch_threads(1);
      session->run(stop);
    });
  }
  json detail;
  const bool finished = wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/" + std::to_string(job)).body;
        return detail.value("state", "") == "finished";
      },
      180);
  stop = true;
  for (auto& t : threads) t.join();
  REQUIRE_MESSAGE(finished, detail.dump());

  const auto rounds = committed_rounds(detail);
  REQUIRE(rounds.size() == 4);
  std::vector<double> accuracy;
  for (const json& r : rounds) {
    const json& e = r["metrics"]["federated_evaluation"];
    REQUIRE_MESSAGE(e.is_object(), r.dump());
    CHECK(e["clients"] == 3);
    CHECK(e["samples"] == 300);
    CHECK(e["model_version"] == r["base_version"]);
    accuracy.push_back(e["metrics"]["accuracy"].get<double>());
  }
  MESSAGE("federated accuracy by round: " << json(accuracy).dump());
  CHECK(accuracy.back() > accuracy.front() + 0.2);
  for (const auto& session : sessions) {
    CHECK(session->stats().updates_accepted == 4);
    CHECK(session->stats().model_downloads >= 4);
  }
}
