// transfer_bench: large models over a slow, flaky link (docs/protocol.md, "Uploads in chunks").
// A real coordinator in this process (SQLite in a temp dir); the devices in a forked process
// (bench/fleet_rounds.h), so this process's memory is the coordinator's.
//
//   (a) One SDK session (client::Session, a trainer that returns the model it got) downloads a
//       model of --model-mib MiB and uploads its update in chunks through a link shaped to
//       --rate-mbit Mbit/s each way that drops the connection every --cut-every-mb MB
//       (bench/shaped_link.h): goodput each way (the model's or update's bytes over the seconds
//       from their first byte to their last, resumptions included) against the shaped rate.
//       Target >= 0.9x.
//   (b) --uploads uploads of that update in chunks at once, straight to the coordinator (raw
//       HTTP clients holding the round's other places but one, so that the round does not
//       commit meanwhile): the coordinator's peak RSS during them, against 1 model + uploads x 2
//       chunks + 64 MiB (the target), and against its RSS before them.
//   (c) Bytes of an update of --model-mib MiB of values, 8-bit (blocks of 256) and top-1% with
//       indices, against float32 (targets <= 0.26x and <= 0.03x). Their fold throughput is
//       aggregation_bench's.
//   (d) A job that trains a head of 64 Ki values on a 64 MiB backbone: the bytes a device moves
//       in its second round (the head's part of the model down, the head's update up), against
//       the whole model both ways.
//
// Prints one JSON object as its last line.

#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench/fleet_rounds.h"
#include "bench/http_bench_util.h"
#include "bench/peak_probe.h"
#include "bench/shaped_link.h"
#include "cli/request.h"
#include "client_sdk/sample_source.h"
#include "client_sdk/session.h"
#include "common/crypto.h"
#include "protocol/task_offer.h"
#include "protocol/upload_session.h"
#include "server/service.h"
#include "tests/support/temp_dir.h"

namespace {

using fedcase::ModelBlob;
using fedcase::ModelLayout;
using fedcase::bench::ShapedLink;
using nlohmann::json;
namespace bench = fedcase::bench;
namespace client = fedcase::client;

constexpr const char* kBench = "transfer_bench";
constexpr uint64_t kMiB = 1 << 20;

[[noreturn]] void die(const std::string& what) { bench::die(kBench, what); }

struct Plan {
  uint64_t model_mib = 1024;
  double rate_mbit = 100;
  uint64_t cut_every_mb = 100;
  size_t uploads = 8;
  uint64_t chunk_mib = 8;
};

Plan parse_args(int argc, char** argv) {
  Plan plan;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) die(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--model-mib") {
      plan.model_mib = std::stoull(value());
    } else if (arg == "--rate-mbit") {
      plan.rate_mbit = std::stod(value());
    } else if (arg == "--cut-every-mb") {
      plan.cut_every_mb = std::stoull(value());
    } else if (arg == "--uploads") {
      plan.uploads = std::stoull(value());
    } else if (arg == "--chunk-mib") {
      plan.chunk_mib = std::stoull(value());
    } else {
      die("usage: transfer_bench [--model-mib 1024] [--rate-mbit 100] [--cut-every-mb 100] "
          "[--uploads 8] [--chunk-mib 8]");
    }
  }
  return plan;
}

// A trainer that hands back the model it got: the update is all zeros, at no cost.
class ReturnTrainer final : public client::Trainer {
 public:
  fedcase::Status prepare(const client::ModelInfo&) override { return fedcase::ok_status(); }
  fedcase::Result<std::vector<float>> train(const std::vector<float>& parameters,
                                            client::RoundSamples&,
                                            const client::TrainSettings&) override {
    return parameters;
  }
  fedcase::Result<client::Evaluation> evaluate(const std::vector<float>&,
                                               client::RoundSamples&) override {
    return client::Evaluation{1, 0, {}};
  }
};

// A device of the SDK at `port`, registered with `labels`, that trains with ReturnTrainer until
// `updates` of its updates were accepted (or `timeout_s` passed); `between` runs once each
// update is accepted.
void run_session(uint16_t port, std::map<std::string, std::string> labels, uint64_t updates,
                 double timeout_s, const std::function<void(uint64_t)>& between) {
  client::SessionConfig config;
  config.labels = std::move(labels);
  config.coordinator = client::plain_connection("127.0.0.1", port);
  config.enrollment_token = bench::kEnrollmentToken;
  config.name = "device";
  config.trainer = std::make_shared<ReturnTrainer>();
  config.train_data = std::make_shared<client::MemorySource>(std::vector<std::string>(10, "x"));
  config.poll_wait_s = 1;
  config.request_timeout_s = 600;
  auto session = client::Session::create(std::move(config));
  if (!session.ok()) die("session: " + session.status().to_string());
  std::atomic<bool> stop{false};
  std::thread worker([&] { (*session)->run(stop); });
  const auto start = std::chrono::steady_clock::now();
  uint64_t seen = 0;
  while (seen < updates && bench::seconds_since(start) < timeout_s) {
    const uint64_t accepted = (*session)->stats().updates_accepted;
    for (; seen < accepted; ++seen) between(seen + 1);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  stop = true;
  worker.join();
  if (seen < updates) die("the device's updates were not all accepted in time");
}

// A registered device driven by raw HTTP: it holds a task and sends an update in chunks.
struct RawDevice {
  std::unique_ptr<bench::Caller> http;
  std::optional<fedcase::protocol::TaskOffer> task;

  explicit RawDevice(uint16_t port) {
    bench::Caller enroll(kBench, client::plain_connection("127.0.0.1", port),
                         bench::kEnrollmentToken);
    auto r = enroll.call("POST", "/v1/clients/register", json{{"dataset_size", 10}}.dump(),
                         {{"Content-Type", "application/json"}});
    if (r.status != 201) die("register: " + r.body);
    http = std::make_unique<bench::Caller>(kBench, client::plain_connection("127.0.0.1", port),
                                           json::parse(r.body)["token"].get<std::string>());
  }
  void wait_for_task() {
    while (!task) {
      auto r = http->call("GET", "/v1/task?wait=5");
      if (r.status != 200) continue;
      auto offer = fedcase::protocol::read_task_offer(json::parse(r.body));
      if (!offer.ok()) die("task: " + offer.status().to_string());
      task = *offer;
    }
  }
  // Sends `update` (its SHA-256 `sha256`) in chunks; dies unless it is accepted.
  void upload(const std::string& update, const std::string& sha256) {
    auto opened = http->call("POST", task->uploads_url,
                             fedcase::protocol::write_upload_open({update.size(), sha256}).dump(),
                             {{"Content-Type", "application/json"},
                              {"X-Fedcase-Meta", json{{"samples", 10}}.dump()}});
    if (opened.status != 201) die("open: " + opened.body);
    auto state = fedcase::protocol::read_upload_state(json::parse(opened.body));
    if (!state.ok()) die("open: " + state.status().to_string());
    for (uint64_t first = 0; first < update.size(); first += state->chunk_bytes) {
      const uint64_t length = std::min<uint64_t>(state->chunk_bytes, update.size() - first);
      auto put = http->call(
          "PUT", state->url, update.substr(first, length),
          {{"Content-Type", "application/octet-stream"},
           {"Content-Range", fedcase::protocol::write_content_range(
                                 {first, first + length - 1, update.size()})}});
      if (put.status != 200) die("chunk at " + std::to_string(first) + ": " + put.body);
    }
  }
};

// A job of model kind "blob" created through the admin API with its model file.
void create_job(uint16_t port, const json& config, const ModelBlob& model) {
  fedcase::cli::Invocation inv;
  inv.command = fedcase::cli::Command::kJobsCreate;
  inv.model_file = "model.blob";
  inv.token = bench::kAdminToken;
  const fedcase::cli::ApiRequest request =
      fedcase::cli::api_request(inv, config.dump(), fedcase::encode_blob(model));
  bench::Caller admin(kBench, client::plain_connection("127.0.0.1", port), bench::kAdminToken);
  auto created = admin.call(request.method, request.target, request.body, request.headers);
  if (created.status != 201) die("job: " + created.body);
}

// (c): bytes of an update of `values` random values, encoded 8-bit and top-1%, over float32.
json compressed_bytes(uint64_t values) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0, 0.01f);
  ModelBlob update{0, {{{"w", {values}}}}, std::vector<float>(values)};
  for (float& v : update.data) v = normal(rng);
  const double dense = double(fedcase::encode_blob(update).size());
  const double q8 = double(fedcase::encode_blob_quantized(update, 256, 1).size());
  std::vector<uint32_t> top(values / 100);
  for (size_t i = 0; i < top.size(); ++i) top[i] = uint32_t(i * 100);  // which ones: any 1%
  const double sparse = double(fedcase::encode_blob_sparse(update, top).size());
  return {{"q8_vs_float32", q8 / dense}, {"top_k_vs_float32", sparse / dense}};
}

// The devices' side: every figure but the coordinator's memory.
json run_devices(bench::Channel& coordinator, const Plan& plan) {
  const uint16_t port = uint16_t(std::stoi(coordinator.receive()));
  const uint64_t model_bytes = plan.model_mib * kMiB;
  const uint64_t values = model_bytes / sizeof(float);
  const ModelLayout layout{{{"w", {values}}}};
  json job = {{"name", "large"},
              {"model", "blob"},
              {"loss", "mse"},
              {"rounds", 1},
              {"clients_per_round", plan.uploads + 2},
              {"min_clients", plan.uploads + 2},
              {"selection", {{"policy", "random"}, {"overcommit", 1.0}}},
              {"training",
               {{"sample_budget", 10}, {"deadline", {{"mode", "fixed"}, {"seconds", 7200}}}}}};
  {
    const ModelBlob model{0, layout, std::vector<float>(values, 0.5f)};
    create_job(port, job, model);
  }
  // The round's places: the device of (a), the uploads of (b), and one device that never
  // uploads, so that the round does not commit (a model's worth of memory) while (b) measures.
  std::vector<RawDevice> raw;
  for (size_t i = 0; i < plan.uploads + 1; ++i) raw.emplace_back(port);
  std::vector<std::thread> polls;
  for (RawDevice& device : raw) polls.emplace_back([&device] { device.wait_for_task(); });

  // (a) one device through the shaped link.
  const double rate = plan.rate_mbit * 1e6 / 8;
  ShapedLink link(port, rate, plan.cut_every_mb * 1000 * 1000);
  link.begin(ShapedLink::kDown);
  link.begin(ShapedLink::kUp);
  const auto a_start = std::chrono::steady_clock::now();
  double down_s = 0, up_s = 0;
  run_session(link.port(), {}, 1, 7200, [&](uint64_t) {
    down_s = link.seconds(ShapedLink::kDown);
    up_s = link.seconds(ShapedLink::kUp);
  });
  const double a_s = bench::seconds_since(a_start);
  for (std::thread& t : polls) t.join();
  const std::string update = fedcase::encode_blob({0, layout, std::vector<float>(values, 0.0f)});
  const double down_goodput = double(model_bytes) / down_s / rate;
  const double up_goodput = double(update.size()) / up_s / rate;
  // What the link carried each way (requests, answers and resent bytes included), against the
  // model's and the update's bytes: above 1 by what the cuts made resend.
  const double down_carried = double(link.bytes(ShapedLink::kDown)) / double(model_bytes);
  const double up_carried = double(link.bytes(ShapedLink::kUp)) / double(update.size());
  std::printf("(a) %.0f MiB through %.0f Mbit/s cut every %llu MB: download %.1f s (%.3fx the "
              "rate, %d cuts, the link carried %.3fx the model), upload %.1f s (%.3fx, %d cuts, "
              "%.3fx the update); %.0f s in all\n",
              double(plan.model_mib), plan.rate_mbit, (unsigned long long)plan.cut_every_mb,
              down_s, down_goodput, link.cuts(ShapedLink::kDown), down_carried, up_s, up_goodput,
              link.cuts(ShapedLink::kUp), up_carried, a_s);
  std::fflush(stdout);

  // (b) the other devices' uploads at once, while the coordinator watches its memory.
  const std::string sha256 = fedcase::sha256_hex(update);
  coordinator.send("uploads");
  coordinator.receive();
  const auto b_start = std::chrono::steady_clock::now();
  std::vector<std::thread> uploads;
  for (size_t i = 0; i < plan.uploads; ++i) {
    uploads.emplace_back([&device = raw[i], &update, &sha256] { device.upload(update, sha256); });
  }
  for (std::thread& t : uploads) t.join();
  const double b_s = bench::seconds_since(b_start);
  coordinator.send("uploaded");

  // (c) compressed updates.
  json compressed = compressed_bytes(values);

  // (d) a head-only job, for a device of its own (client_labels).
  const uint64_t backbone = (64 * kMiB) / sizeof(float), head = 64 << 10;
  const ModelLayout partial{{{"backbone", {backbone}}, {"head", {head}}}};
  json head_job = job;
  head_job["name"] = "head-only";
  head_job["rounds"] = 2;
  head_job["clients_per_round"] = 1;
  head_job["min_clients"] = 1;
  head_job["trainable"] = {"head"};
  head_job["client_labels"] = {{"bench", "head-only"}};  // the devices of (a) and (b) are gone
  create_job(port, head_job, {0, partial, std::vector<float>(backbone + head, 0.5f)});
  ShapedLink counter(port, 1e12, UINT64_MAX);
  uint64_t round_bytes[3] = {0, 0, 0};
  run_session(counter.port(), {{"bench", "head-only"}}, 2, 600, [&](uint64_t accepted) {
    round_bytes[accepted] = counter.bytes(ShapedLink::kUp) + counter.bytes(ShapedLink::kDown);
  });
  const double head_model_bytes = double((backbone + head) * sizeof(float));
  const double second_round = double(round_bytes[2] - round_bytes[1]);
  const double head_vs_full = second_round / (2 * head_model_bytes);
  std::printf("(d) head-only job (%llu of %llu values): a device's second round moved %.0f bytes, "
              "%.5fx the whole model both ways (its first: %llu bytes)\n",
              (unsigned long long)head, (unsigned long long)(backbone + head), second_round,
              head_vs_full, (unsigned long long)round_bytes[1]);
  std::fflush(stdout);
  return {{"model_bytes", model_bytes},
          {"update_bytes", update.size()},
          {"download_s", down_s},
          {"upload_s", up_s},
          {"download_goodput_vs_rate", down_goodput},
          {"upload_goodput_vs_rate", up_goodput},
          {"download_cuts", link.cuts(ShapedLink::kDown)},
          {"upload_cuts", link.cuts(ShapedLink::kUp)},
          {"download_link_bytes_vs_model", down_carried},
          {"upload_link_bytes_vs_update", up_carried},
          {"concurrent_uploads_s", b_s},
          {"compressed", compressed},
          {"head_only_round_bytes", second_round},
          {"head_only_vs_full_model", head_vs_full}};
}

}  // namespace

int main(int argc, char** argv) {
  const Plan plan = parse_args(argc, argv);
  fedcase::testing::TempDir dir;
  json config_json = bench::unthrottled_config(0, dir.file("bench.db"), 16 * kMiB, 30);
  config_json["max_model_bytes"] = (plan.model_mib + 64) * kMiB;
  config_json["max_chunked_upload_bytes"] = (plan.model_mib + 64) * kMiB;
  config_json["upload_chunk_bytes"] = plan.chunk_mib * kMiB;
  config_json["spool_dir"] = dir.path();
  config_json["read_timeout_s"] = 3600;

  bench::Channel channel(kBench);
  const pid_t devices = bench::fork_clients(kBench, channel, [&](bench::Channel& coordinator) {
    coordinator.send(run_devices(coordinator, plan).dump());
  });
  auto started =
      fedcase::server::CoordinatorService::start(fedcase::server::parse_coordinator_config(config_json));
  if (!started.ok()) die("coordinator: " + started.status().to_string());
  auto service = std::move(started).value();
  channel.send(std::to_string(service->port()));

  if (channel.receive() != "uploads") die("the devices went off script");
  const double before_mib = double(bench::status_bytes("VmRSS")) / kMiB;
  std::optional<bench::PeakProbe> probe(std::in_place);
  channel.send("go");
  if (channel.receive() != "uploaded") die("the devices went off script");
  const auto peak = probe->peak_bytes();
  if (!peak) die("cannot reset the peak RSS counter (/proc/self/clear_refs)");
  const double peak_mib = before_mib + double(*peak) / kMiB;
  json figures = json::parse(channel.receive());
  waitpid(devices, nullptr, 0);
  service.reset();

  const double bound_mib = double(plan.model_mib + plan.uploads * 2 * plan.chunk_mib + 64);
  std::printf("(b) %zu uploads of %.0f MiB in chunks at once (%.1f s): coordinator peak RSS %.0f "
              "MiB (target <= %.0f MiB: 1 model + %zu x 2 chunks + 64 MiB; %.0f MiB before them)\n",
              plan.uploads, double(plan.model_mib), figures["concurrent_uploads_s"].get<double>(),
              peak_mib, bound_mib, plan.uploads, before_mib);
  std::printf("(c) update bytes vs float32: 8-bit %.3fx (target <= 0.26x), top-1%% %.3fx "
              "(target <= 0.03x)\n",
              figures["compressed"]["q8_vs_float32"].get<double>(),
              figures["compressed"]["top_k_vs_float32"].get<double>());
  figures.update({{"bench", "transfer"},
                  {"model_mib", plan.model_mib},
                  {"rate_mbit", plan.rate_mbit},
                  {"cut_every_mb", plan.cut_every_mb},
                  {"uploads", plan.uploads},
                  {"chunk_mib", plan.chunk_mib},
                  {"goodput_target", 0.9},
                  {"rss_before_uploads_mib", before_mib},
                  {"peak_rss_during_uploads_mib", peak_mib},
                  {"rss_bound_mib", bound_mib}});
  std::printf("%s\n", figures.dump().c_str());
  return 0;
}
