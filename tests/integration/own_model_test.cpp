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
#include "common/crypto.h"
#include "formats/torchscript_reader.h"
#include "ml/model.h"
#include "ml/sample_files.h"
#include "ml/torchscript_model.h"
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

// What `command` prints on standard output.
std::string run_command(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  CHECK(pclose(pipe) == 0);
  return out;
}

// SDK sessions of TorchScript devices, each on a thread of its own; halted at destruction.
struct Devices {
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<client::Session>> sessions;
  std::vector<std::thread> threads;

  // Starts a device training on `train` (and scoring on `held_out`, if any) with the images'
  // input shape.
  void start(uint16_t port, const std::string& name, std::shared_ptr<client::SampleSource> train,
             std::shared_ptr<client::SampleSource> held_out, const std::string& state_dir) {
    client::SessionConfig s;
    s.coordinator.port = port;
    s.enrollment_token = kEnrollmentToken;
    s.name = name;
    s.trainer = std::move(client::make_torchscript_trainer({{1, 28, 28}})).value();
    s.train_data = std::move(train);
    s.eval_data = std::move(held_out);
    s.state_dir = state_dir;
    s.poll_wait_s = 1;
    auto session = client::Session::create(std::move(s));
    REQUIRE_MESSAGE(session.ok(), session.status().to_string());
    sessions.push_back(std::move(session).value());
    threads.emplace_back([session = sessions.back().get(), this] {
      ml::set_torch_threads(1);
      session->run(stop);
    });
  }
  void halt() {
    stop = true;
    for (auto& t : threads) t.join();
    threads.clear();
  }
  ~Devices() { halt(); }
};

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
  CHECK(blob->data == formats::read_torchscript_model(module, {})->data);

  Devices devices;
  for (size_t i = 0; i < 3; ++i) {
    const std::filesystem::path home = dir.path() / ("device-" + std::to_string(i));
    devices.start(port, home.filename().string(), image_folder(home / "train", i * 400, 400),
                  image_folder(home / "held-out", 20000 + i * 100, 100), (home / "state").string());
  }
  json detail;
  const bool finished = wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/" + std::to_string(job)).body;
        return detail.value("state", "") == "finished";
      },
      180);
  devices.halt();
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
  for (const auto& session : devices.sessions) {
    CHECK(session->stats().updates_accepted == 4);
    CHECK(session->stats().model_downloads >= 4);
  }
}

TEST_CASE("the coordinator scores a TorchScript job on its server dataset") {
  TempDir dir;
  // The server dataset: Fashion-MNIST test-like records (here from the training set's tail,
  // which no client trains on) in a folder under datasets_dir.
  image_folder(dir.path() / "datasets" / "fmnist-eval", 50000, 300);
  auto service = start_coordinator(
      dir, [&](server::CoordinatorConfig& c) { c.datasets_dir = dir.file("datasets"); });
  const uint16_t port = service->port();
  const std::string module = classifier_module(784, 32, 10, 9);
  json config = {
      {"name", "server-scored"},
      {"model", "torchscript"},
      {"rounds", 3},
      {"clients_per_round", 2},
      {"selection", {{"policy", "random"}, {"overcommit", 1.0}}},
      {"training", {{"lr", 0.1}, {"momentum", 0.9}}},
      {"evaluation",
       {{"federated", false}, {"server_dataset", "fmnist-eval"}, {"input_shape", {1, 28, 28}}}}};

  // A dataset the coordinator does not have is refused before anything is stored.
  json missing = config;
  missing["evaluation"]["server_dataset"] = "no-such-dataset";
  Reply refused = create_job(port, missing, module);
  CHECK(refused.status == 400);
  CHECK(refused.raw.find("not a folder") != std::string::npos);
  Caller admin(port, kAdminToken);
  CHECK(admin.get("/v1/admin/jobs").body["jobs"].empty());

  Reply created = create_job(port, config, module);
  REQUIRE_MESSAGE(created.status == 201, created.raw);
  const uint64_t job = created.body["job_id"];
  Devices devices;
  for (size_t i = 0; i < 2; ++i) {
    const std::filesystem::path home = dir.path() / ("device-" + std::to_string(i));
    devices.start(port, home.filename().string(), image_folder(home, i * 500, 500), nullptr, "");
  }
  json detail;
  // Finished, and the last model scored (the evaluation runs after the commit).
  const bool scored = wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/" + std::to_string(job)).body;
        const auto rounds = committed_rounds(detail);
        return detail.value("state", "") == "finished" && rounds.size() == 3 &&
               rounds.back()["metrics"].contains("test_accuracy");
      },
      180);
  devices.halt();
  REQUIRE_MESSAGE(scored, detail.dump());
  std::vector<double> accuracy;
  for (const json& r : committed_rounds(detail)) {
    CHECK(r["metrics"]["test_samples"] == 300);
    CHECK_FALSE(r["metrics"].contains("federated_evaluation"));  // the clients were not asked
    accuracy.push_back(r["metrics"]["test_accuracy"].get<double>());
  }
  MESSAGE("server accuracy by round: " << json(accuracy).dump());
  CHECK(accuracy.back() > 0.5);
  CHECK(detail["test_accuracy"] == accuracy.back());

  // The trained model leaves as it came in: TorchScript for libtorch and PyTorch, npz for
  // numpy, holding the committed parameters and scoring what the coordinator scored.
  const json last = committed_rounds(detail).back();
  const std::string version = std::to_string(last["metrics"]["model_version"].get<uint64_t>());
  const std::string models = "/v1/admin/jobs/" + std::to_string(job) + "/models/";
  Reply script = admin.get(models + "latest/export?format=torchscript");
  REQUIRE(script.status == 200);
  CHECK(script.response.header("x-fedcase-model-version") == version);
  CHECK(script.response.header("etag") == "\"" + sha256_hex(script.response.body) + "\"");
  Reply npz = admin.get(models + version + "/export?format=npz");
  REQUIRE(npz.status == 200);
  Reply blob = admin.get("/v1/jobs/" + std::to_string(job) + "/models/" + version);
  REQUIRE(blob.status == 200);
  auto committed = decode_blob(blob.response.body, blob.response.body.size());
  REQUIRE(committed.ok());

  auto exported = ml::TorchScriptModel::load(script.response.body);
  REQUIRE_MESSAGE(exported.ok(), exported.status().to_string());
  CHECK(exported->layout() == committed->layout);
  CHECK(exported->parameters() == committed->data);
  // The coordinator's evaluation of that version, redone on the export: the same records in
  // the same batches.
  auto files = ml::list_sample_files(dir.file("datasets/fmnist-eval"));
  REQUIRE(files.ok());
  std::vector<std::string> records(files->size());
  for (size_t i = 0; i < records.size(); ++i) {
    REQUIRE(ml::read_sample_file((*files)[i], records[i]).ok());
  }
  const std::vector<int64_t> shape = {1, 28, 28};
  auto rescored = exported->evaluate(
      ml::Loss::kCrossEntropy,
      ml::record_batches([&](size_t i) { return Result<std::string_view>(records[i]); },
                         records.size(), 128, ml::Loss::kCrossEntropy, shape,
                         [](size_t i) { return std::to_string(i); }));
  REQUIRE(rescored.ok());
  CHECK(rescored->samples == last["metrics"]["test_samples"]);
  CHECK(rescored->accuracy == last["metrics"]["test_accuracy"]);
  CHECK(rescored->loss == doctest::Approx(last["metrics"]["test_loss"].get<double>()));

  // PyTorch and numpy read the files as they are, and agree.
  std::ofstream(dir.file("model.pt"), std::ios::binary) << script.response.body;
  std::ofstream(dir.file("model.npz"), std::ios::binary) << npz.response.body;
  const std::string command = "/usr/bin/python3 " FEDCASE_SOURCE_DIR
                              "/tests/integration/export_check.py --torchscript " +
                              dir.file("model.pt") + " --npz " + dir.file("model.npz") +
                              " --records " + dir.file("datasets/fmnist-eval");
  const json python = json::parse(run_command(command), nullptr, false);
  REQUIRE_MESSAGE(python.is_object(), command);
  CHECK(python["equal"] == true);
  CHECK(python["tensors"] == committed->layout.tensors.size());
  CHECK(python["samples"] == last["metrics"]["test_samples"]);
  CHECK(python["accuracy"] == last["metrics"]["test_accuracy"]);
  CHECK(python["loss"].get<double>() ==
        doctest::Approx(last["metrics"]["test_loss"].get<double>()).epsilon(1e-5));
}

// BatchNorm's statistics travel with the parameters and the committed model holds the devices'
// mean; with local_buffers they stay on the devices and the committed model keeps the module's.
TEST_CASE("BatchNorm statistics are federated, or kept on the devices with local_buffers") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  const std::string module = batchnorm_classifier_module(784, 16, 10, 11);
  const std::vector<float> initial = formats::read_torchscript_model(module, {})->data;
  json config = {{"name", "batchnorm"},
                 {"model", "torchscript"},
                 {"rounds", 2},
                 {"clients_per_round", 3},
                 {"selection", {{"policy", "random"}, {"overcommit", 1.0}}},
                 {"training", {{"batch_size", 32}, {"lr", 0.1}, {"momentum", 0.5}}},
                 {"evaluation", {{"federated", true}}}};
  Caller admin(port, kAdminToken);

  // DP bounds each update by a clip the running statistics do not respect: refused, unless
  // the statistics stay on the devices.
  json private_config = config;
  private_config["aggregation"] = {{"clip_norm", 1.0}, {"dp_noise_multiplier", 0.5}};
  Reply refused = create_job(port, private_config, module);
  CHECK(refused.status == 400);
  CHECK(refused.raw.find("DP cannot protect them") != std::string::npos);
  private_config["local_buffers"] = {"bn"};
  Reply accepted = create_job(port, private_config, module);
  REQUIRE_MESSAGE(accepted.status == 201, accepted.raw);
  const std::string private_job = std::to_string(accepted.body["job_id"].get<uint64_t>());
  CHECK(admin.post("/v1/admin/jobs/" + private_job + "/cancel", json::object()).status == 200);

  // Three devices of 320 images each (10 batches of 32 a round) take part in both jobs.
  Devices devices;
  for (size_t i = 0; i < 3; ++i) {
    const std::filesystem::path home = dir.path() / ("device-" + std::to_string(i));
    devices.start(port, home.filename().string(), image_folder(home / "train", i * 320, 320),
                  image_folder(home / "held-out", 20000 + i * 100, 100), "");
  }
  // Runs `job_config` to its end; returns its detail, its last committed model and listing.
  auto run = [&](const json& job_config) {
    Reply created = create_job(port, job_config, module);
    REQUIRE_MESSAGE(created.status == 201, created.raw);
    const uint64_t job = created.body["job_id"];
    json detail;
    const bool finished = wait_until(
        [&] {
          detail = admin.get("/v1/admin/jobs/" + std::to_string(job)).body;
          return detail.value("state", "") == "finished";
        },
        180);
    REQUIRE_MESSAGE(finished, detail.dump());
    Reply blob = admin.get("/v1/jobs/" + std::to_string(job) + "/models/2");
    REQUIRE(blob.status == 200);
    auto model = decode_blob(blob.response.body, blob.response.body.size());
    REQUIRE(model.ok());
    const json listing = admin.get("/v1/admin/jobs/" + std::to_string(job) + "/models").body;
    return std::make_tuple(detail, std::move(model).value(), listing);
  };
  auto [shared_detail, shared, shared_listing] = run(config);
  const size_t buffers_at = shared.layout.parameter_count();
  const size_t count_at = shared.data.size() - 1;
  REQUIRE(shared.layout.tensors.back().name == "bn.num_batches_tracked");
  CHECK(shared_listing["buffer_values"] == 16 + 16 + 1);
  CHECK(shared_listing["local_buffers"].empty());
  // The devices' mean: each counted 10 batches a round; their running means moved off zero.
  CHECK(shared.data[count_at] == 20);
  CHECK(shared.data[buffers_at] != initial[buffers_at]);

  json local_config = config;
  local_config["local_buffers"] = {"bn"};
  auto [local_detail, local, local_listing] = run(local_config);
  CHECK(local_listing["local_buffers"] ==
        json{"bn.running_mean", "bn.running_var", "bn.num_batches_tracked"});
  // The committed model holds the module's statistics; the parameters trained.
  CHECK(std::vector<float>(local.data.begin() + buffers_at, local.data.end()) ==
        std::vector<float>(initial.begin() + buffers_at, initial.end()));
  CHECK(std::vector<float>(local.data.begin(), local.data.begin() + buffers_at) !=
        std::vector<float>(initial.begin(), initial.begin() + buffers_at));
  // Each device scored the model it was sent with its own statistics, as it deploys it.
  const auto rounds = committed_rounds(local_detail);
  REQUIRE(rounds.size() == 2);
  const double local_accuracy =
      rounds.back()["metrics"]["federated_evaluation"]["metrics"]["accuracy"].get<double>();
  MESSAGE("federated accuracy after one round, statistics kept on the devices: "
          << local_accuracy << "; shared: "
          << committed_rounds(shared_detail).back()["metrics"]["federated_evaluation"]["metrics"]["accuracy"]);
  CHECK(local_accuracy > 0.5);
}

// A job that fine-tunes part of its model: the frozen tensors never change, the devices
// download them once, and rounds carry the trained part only.
TEST_CASE("a job trains only its trainable tensors; devices fetch the frozen rest once") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  const std::string module = classifier_module(784, 32, 10, 5);
  const std::vector<float> initial = formats::read_torchscript_model(module, {})->data;
  json config = {{"name", "head-only"},
                 {"model", "torchscript"},
                 {"rounds", 3},
                 {"clients_per_round", 3},
                 {"trainable", {"w2", "b2"}},
                 {"selection", {{"policy", "random"}, {"overcommit", 1.0}}},
                 {"training", {{"batch_size", 32}, {"lr", 0.1}, {"momentum", 0.5}}},
                 {"evaluation", {{"federated", true}}}};
  json unknown = config;
  unknown["trainable"] = {"head"};
  Reply refused = create_job(port, unknown, module);
  CHECK(refused.status == 400);
  CHECK(refused.raw.find("job.trainable entry \\\"head\\\" names no tensor") != std::string::npos);
  Reply created = create_job(port, config, module);
  REQUIRE_MESSAGE(created.status == 201, created.raw);
  const std::string job = std::to_string(created.body["job_id"].get<uint64_t>());
  Devices devices;
  for (size_t i = 0; i < 3; ++i) {
    const std::filesystem::path home = dir.path() / ("device-" + std::to_string(i));
    devices.start(port, home.filename().string(), image_folder(home / "train", i * 300, 300),
                  image_folder(home / "held-out", 20000 + i * 100, 100), "");
  }
  Caller admin(port, kAdminToken);
  json detail;
  const bool finished = wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/" + job).body;
        return detail.value("state", "") == "finished";
      },
      180);
  devices.halt();
  REQUIRE_MESSAGE(finished, detail.dump());
  Reply last = admin.get("/v1/jobs/" + job + "/models/3");
  REQUIRE(last.status == 200);
  auto model = decode_blob(last.response.body, last.response.body.size());
  REQUIRE(model.ok());
  // w1 [32, 784] and b1 [32] are frozen; w2 [10, 32] and b2 [10] trained.
  const size_t frozen = 32 * 784 + 32;
  CHECK(std::equal(initial.begin(), initial.begin() + frozen, model->data.begin()));
  CHECK_FALSE(std::equal(initial.begin() + frozen, initial.end(), model->data.begin() + frozen));
  // The part served is the trained tensors alone.
  Reply part = admin.get("/v1/jobs/" + job + "/models/3/trainable");
  REQUIRE(part.status == 200);
  auto trained = decode_blob(part.response.body, part.response.body.size());
  REQUIRE(trained.ok());
  CHECK(trained->layout.describe() == "w2[10,32], b2[10]");
  CHECK(part.response.body.size() * 50 < last.response.body.size());
  for (const auto& session : devices.sessions) {
    CHECK(session->stats().updates_accepted == 3);
    // The first task downloads the whole model; the later ones only its trained part.
    CHECK(session->stats().trainable_downloads >= 1);
    CHECK(session->stats().model_downloads - session->stats().trainable_downloads == 1);
  }
  const double accuracy = committed_rounds(detail)
                              .back()["metrics"]["federated_evaluation"]["metrics"]["accuracy"]
                              .get<double>();
  MESSAGE("federated accuracy after two rounds training the head only: " << accuracy);
  CHECK(accuracy > 0.2);  // chance is 0.1; a random hidden layer bounds it
}
