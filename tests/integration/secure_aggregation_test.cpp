// Secure aggregation end to end through a real coordinator on 127.0.0.1: clients driven stage
// by stage over HTTP with the library's SecAggClient (dropouts at each stage, at and just below
// the threshold; malformed, replayed and wrong-length messages), what the coordinator stores
// and receives, and SDK fleets training with secure aggregation on (with DP, a server
// optimizer and the importance sampler; and the demo job, short, to 80%).

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "cli/request.h"
#include "client_sdk/fleet.h"
#include "common/blob.h"
#include "protocol/secagg.h"
#include "protocol/task_offer.h"
#include "protocol/update_meta.h"
#include "protocol/base64.h"
#include "secagg/client.h"
#include "storage/store.h"
#include "tests/support/coordinator_harness.h"

using namespace fedcase;
using namespace fedcase::testing;
using nlohmann::json;

namespace {

constexpr size_t kParams = 4096;

ModelLayout layout() { return {{{"w", {kParams}}}}; }

// A job of a raw model of kParams zeros, created with its file as the CLI does.
JobId create_blob_job(uint16_t port, const json& config) {
  cli::Invocation inv;
  inv.command = cli::Command::kJobsCreate;
  inv.model_file = "model.blob";
  inv.token = kAdminToken;
  const std::string model = encode_blob(ModelBlob{0, layout(), std::vector<float>(kParams, 0)});
  const cli::ApiRequest request = cli::api_request(inv, config.dump(), model);
  Caller admin(port, kAdminToken);
  Reply created = admin.call(request.method, request.target, request.body, request.headers);
  REQUIRE_MESSAGE(created.status == 201, created.raw);
  return created.body["job_id"].get<JobId>();
}

json raw_job(json secure) {
  return {{"name", "secure-raw"},
          {"model", "blob"},
          {"loss", "mse"},
          {"rounds", 20},
          {"clients_per_round", 5},
          {"min_updates", 1},
          {"selection", {{"overcommit", 1.0}}},
          // Tasks of 2,000 samples: the raw clients' weights (their samples) stay within them.
          {"training",
           {{"sample_budget", 2000}, {"deadline", {{"mode", "fixed"}, {"seconds", 4}}}}},
          {"secure_aggregation", secure}};
}

std::vector<float> model_of(uint16_t port, JobId job, uint64_t version) {
  Caller admin(port, kAdminToken);
  Reply r = admin.get("/v1/jobs/" + std::to_string(job) + "/models/" + std::to_string(version));
  REQUIRE_MESSAGE(r.status == 200, r.raw);
  auto blob = decode_blob(r.response.body, 1 << 26);
  REQUIRE(blob.ok());
  return blob->data;
}

// One client driven by the test over HTTP, stage by stage, with the library's client.
struct RawClient {
  Caller http;
  ClientId id = 0;
  std::optional<protocol::TaskOffer> task;
  std::unique_ptr<secagg::SecAggClient> secure;
  std::vector<float> delta;
  uint64_t weight = 0;

  secagg::KeyPair signing;  // its long-term key, registered

  explicit RawClient(uint16_t port, uint64_t seed) : http(port, kEnrollmentToken) {
    auto key = secagg::generate_signing_key();
    REQUIRE(key.ok());
    signing = *key;
    Reply r = http.post("/v1/clients/register",
                        {{"dataset_size", 100},
                         {"signing_public_key", protocol::encode_base64(std::string(
                                                    secagg::as_view(signing.public_key)))}});
    REQUIRE_MESSAGE(r.status == 201, r.raw);
    id = r.body["client_id"];
    http.set_token(r.body["token"]);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(0, 0.05f);  // skewed: all positive
    delta.resize(kParams);
    for (float& v : delta) v = u(rng);
    weight = 100 + 50 * seed;
  }

  // Polls until it holds a task of round `round`.
  void poll(RoundIndex round) {
    const bool got = wait_until(
        [&] {
          Reply r = http.get("/v1/task?wait=1");
          if (r.status != 200) return false;
          auto t = protocol::read_task_offer(r.body);
          REQUIRE(t.ok());
          task = *t;
          return task->round == round;
        },
        30);
    REQUIRE_MESSAGE(got, "client " << id << " got no task of round " << round);
    REQUIRE(task->secure_aggregation);
    secure = std::make_unique<secagg::SecAggClient>(task->job, task->round, id, signing.private_key);
  }
  const protocol::SecAggTask& urls() const { return *task->secure_aggregation; }

  Reply post(const std::string& url, const json& body) { return http.post(url, body); }
  // A stage's message: long polls until the coordinator answers other than 204.
  Reply wait(const std::string& url) {
    Reply r;
    wait_until(
        [&] {
          r = http.get(url + "?wait=2");
          return r.status != 204;
        },
        30);
    return r;
  }

  protocol::SecAggAdvertiseKeys advertise() {
    auto keys = secure->advertise_keys();
    REQUIRE(keys.ok());
    Reply r = post(urls().keys_url, protocol::write_secagg_advertise_keys(*keys));
    REQUIRE_MESSAGE(r.status == 200, r.raw);
    return *keys;
  }
  protocol::SecAggShares shares() {
    Reply r = wait(urls().keys_url);
    REQUIRE_MESSAGE(r.status == 200, r.raw);
    auto keys = protocol::read_secagg_keys(r.body);
    REQUIRE_MESSAGE(keys.ok(), keys.status().to_string());
    auto out = secure->share_keys(keys->graph, keys->key_list);
    REQUIRE_MESSAGE(out.ok(), out.status().to_string());
    return *out;
  }
  void share() {
    Reply r = post(urls().shares_url, protocol::write_secagg_shares(shares()));
    REQUIRE_MESSAGE(r.status == 200, r.raw);
  }
  secagg::SecAggMaskedVector masked() {
    Reply r = wait(urls().shares_url);
    REQUIRE_MESSAGE(r.status == 200, r.raw);
    auto forwarded = protocol::read_secagg_forwarded_shares(r.body);
    REQUIRE(forwarded.ok());
    auto out = secure->mask_input(*forwarded, delta.data(), delta.size(), weight, 1);
    REQUIRE_MESSAGE(out.ok(), out.status().to_string());
    return *out;
  }
  Reply send(const secagg::SecAggMaskedVector& v, const std::string& body) {
    protocol::UpdateMeta meta;
    meta.samples = weight;
    meta.loss_sum = 0.5 * double(weight);
    meta.loss_sq_sum = 0.3 * double(weight);
    return http.call("POST", urls().masked_input_url, body,
                     {{"Content-Type", "application/octet-stream"},
                      {"X-Fedcase-SecAgg", protocol::write_secagg_masked_input(v.header).dump()},
                      {"X-Fedcase-Meta", protocol::write_update_meta(meta).dump()}});
  }
  std::string send_input() {
    const secagg::SecAggMaskedVector v = masked();
    Reply r = send(v, v.body);
    REQUIRE_MESSAGE(r.status == 200, r.raw);
    return v.body;
  }
  protocol::SecAggUnmaskRequest unmask() {
    Reply r = wait(urls().unmask_url);
    REQUIRE_MESSAGE(r.status == 200, r.raw);
    auto request = protocol::read_secagg_unmask_request(r.body);
    REQUIRE(request.ok());
    auto response = secure->unmask(*request);
    REQUIRE_MESSAGE(response.ok(), response.status().to_string());  // never both shares
    Reply answered = post(urls().unmask_url, protocol::write_secagg_unmask_response(*response));
    REQUIRE_MESSAGE(answered.status == 200, answered.raw);
    return *request;
  }
};

struct RawFleet {
  std::vector<std::unique_ptr<RawClient>> clients;
  RawFleet(uint16_t port, size_t n) {
    for (size_t i = 0; i < n; ++i) clients.push_back(std::make_unique<RawClient>(port, i + 1));
  }
  void poll(RoundIndex round) {
    for (auto& c : clients) c->poll(round);
  }
  RawClient& operator[](size_t i) { return *clients[i]; }
};

json round_record(uint16_t port, JobId job, RoundIndex round) {
  Caller admin(port, kAdminToken);
  json found;
  wait_until(
      [&] {
        json detail = admin.get("/v1/admin/jobs/" + std::to_string(job)).body;
        for (const json& r : detail["rounds"]) {
          if (r["round"] == round && r["state"] != "open") found = r;
        }
        return !found.is_null();
      },
      30);
  REQUIRE_MESSAGE(!found.is_null(), "round " << round << " did not conclude");
  return found;
}

// The weighted mean of `clients`' deltas.
std::vector<float> weighted_mean(const std::vector<RawClient*>& clients) {
  std::vector<double> sum(kParams, 0);
  double total = 0;
  for (const RawClient* c : clients) {
    for (size_t i = 0; i < kParams; ++i) sum[i] += double(c->weight) * c->delta[i];
    total += double(c->weight);
  }
  std::vector<float> out(kParams);
  for (size_t i = 0; i < kParams; ++i) out[i] = float(sum[i] / total);
  return out;
}

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  return worst;
}

// Pearson's chi-square statistic of the top byte of the little-endian 32-bit words of `bodies`.
double top_byte_chi_square(const std::vector<std::string>& bodies) {
  std::vector<double> counts(256, 0);
  double n = 0;
  for (const std::string& body : bodies) {
    for (size_t i = 3; i < body.size(); i += 4) {
      counts[static_cast<uint8_t>(body[i])] += 1;
      n += 1;
    }
  }
  double chi = 0;
  for (double c : counts) chi += (c - n / 256) * (c - n / 256) / (n / 256);
  return chi;
}

}  // namespace

TEST_CASE("dropouts after key sharing and after masked input, at and just below the threshold") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  RawFleet fleet(port, 5);
  const JobId job =
      create_blob_job(port, raw_job({{"threshold", 3}, {"clip", 10}, {"stage_seconds", 2}}));

  // With a threshold of 3, each survivor's seed needs 3 holders among the other survivors
  // (and each dropped client's key 3 among the survivors): 4 inputs (or answers) of 5 are the
  // threshold, 3 are below it.
  // Round 1: all five share their keys, one drops before its masked input; its mask key is
  // rebuilt from the survivors' shares.
  fleet.poll(1);
  for (auto& c : fleet.clients) c->advertise();
  for (auto& c : fleet.clients) c->share();
  std::vector<std::string> bodies;
  for (size_t i = 0; i < 4; ++i) bodies.push_back(fleet[i].send_input());
  for (size_t i = 0; i < 4; ++i) {
    const protocol::SecAggUnmaskRequest request = fleet[i].unmask();
    CHECK(request.dropped == std::vector<ClientId>{fleet[4].id});  // its key, not its seed
    CHECK(request.survivors.size() == 3);
    for (ClientId d : request.dropped) {
      CHECK(std::find(request.survivors.begin(), request.survivors.end(), d) ==
            request.survivors.end());
    }
  }
  json r1 = round_record(port, job, 1);
  REQUIRE_MESSAGE(r1["state"] == "committed", r1.dump());
  const json& s1 = r1["metrics"]["secure_aggregation"];
  CHECK(s1["stage"] == "done");
  CHECK(s1["dropouts"]["masked_input"] == 1);
  CHECK(s1["unmasked_dropped"].size() == 1);
  CHECK(r1["metrics"]["updates"] == 4);
  const std::vector<float> mean1 = weighted_mean({&fleet[0], &fleet[1], &fleet[2], &fleet[3]});
  CHECK(max_difference(model_of(port, job, 1), mean1) < 1e-3);
  // The masked vectors the coordinator received look uniform (a chi-square over 256 buckets
  // of each word's top byte, about 255 +- 23 for uniform words); the plain quantised words of
  // these small positive deltas all have a top byte of 0.
  CHECK(top_byte_chi_square(bodies) < 400);

  // Round 2: two drop after sharing: three inputs, below the threshold: the round fails with
  // the reason and nothing is committed.
  fleet.poll(2);
  for (auto& c : fleet.clients) c->advertise();
  for (auto& c : fleet.clients) c->share();
  for (size_t i = 0; i < 3; ++i) fleet[i].send_input();
  json r2 = round_record(port, job, 2);
  CHECK(r2["state"] == "failed");
  CHECK_MESSAGE(r2["metrics"]["failure"].get<std::string>().find("fewer than the threshold 3") !=
                    std::string::npos,
                r2.dump());
  CHECK(r2["metrics"]["secure_aggregation"]["failed_in"] == "masked_input");
  // A waiting client's poll is answered with a refusal, not left hanging.
  Reply told = fleet[0].http.get(fleet[0].urls().unmask_url + "?wait=1");
  CHECK(told.status == 409);

  // Round 3: all five send their input, one drops before unmasking: four answers rebuild every
  // seed.
  fleet.poll(3);
  for (auto& c : fleet.clients) c->advertise();
  for (auto& c : fleet.clients) c->share();
  for (auto& c : fleet.clients) c->send_input();
  for (size_t i = 0; i < 4; ++i) fleet[i].unmask();
  json r3 = round_record(port, job, 3);
  REQUIRE_MESSAGE(r3["state"] == "committed", r3.dump());
  CHECK(r3["metrics"]["secure_aggregation"]["dropouts"]["unmask"] == 1);
  std::vector<RawClient*> all;
  for (auto& c : fleet.clients) all.push_back(c.get());
  std::vector<float> expected = mean1;
  const std::vector<float> mean3 = weighted_mean(all);
  for (size_t i = 0; i < kParams; ++i) expected[i] += mean3[i];
  CHECK(max_difference(model_of(port, job, 3), expected) < 2e-3);

  // Round 4: two drop before unmasking: three answers are below the threshold.
  fleet.poll(4);
  for (auto& c : fleet.clients) c->advertise();
  for (auto& c : fleet.clients) c->share();
  for (auto& c : fleet.clients) c->send_input();
  for (size_t i = 0; i < 3; ++i) fleet[i].unmask();
  json r4 = round_record(port, job, 4);
  CHECK(r4["state"] == "failed");
  CHECK_MESSAGE(
      r4["metrics"]["failure"].get<std::string>().find("the threshold is 3") != std::string::npos,
      r4.dump());
  CHECK(r4["metrics"]["secure_aggregation"]["failed_in"] == "unmask");

  // The store holds each accepted input's statistics only, and the committed sums' models.
  auto store = storage::open_sqlite_store(dir.file("fedcase.db"));
  REQUIRE(store.ok());
  for (RoundIndex round : {1, 2, 3, 4}) {
    auto updates = (*store)->list_updates(job, round);
    REQUIRE(updates.ok());
    for (const auto& u : *updates) {
      for (const auto& [key, value] : u.meta.items()) {
        CHECK_MESSAGE(key != "values", "an update's values in the store");
        CHECK(!value.is_string());
      }
      CHECK(u.meta.dump().size() < 512);  // statistics, never a vector of 4,096 values
    }
  }
  auto latest = (*store)->latest_model(job);
  REQUIRE(latest.ok());
  CHECK(latest->version == 3);
  CHECK((*store)->get_model(job, 2).status().code() == Code::kNotFound);
  CHECK((*store)->get_model(job, 4).status().code() == Code::kNotFound);

  Caller admin(port, kAdminToken);
  const std::string metrics = admin.get("/metrics").raw;
  CHECK(metrics.find("fedcase_secagg_rounds_total{outcome=\"committed\",stage=\"done\"} 2") !=
        std::string::npos);
  CHECK(metrics.find("fedcase_secagg_dropouts_total{stage=\"masked_input\"} 3") !=
        std::string::npos);
}

TEST_CASE(
    "malformed shares, replayed keys and wrong-length vectors are refused; the round goes on") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  RawFleet fleet(port, 5);
  const JobId job =
      create_blob_job(port, raw_job({{"threshold", 3}, {"clip", 10}, {"stage_seconds", 5}}));

  fleet.poll(1);
  std::map<ClientId, protocol::SecAggAdvertiseKeys> round1_keys;
  for (auto& c : fleet.clients) round1_keys[c->id] = c->advertise();
  // A second advertisement in the stage is refused.
  Reply again = fleet[0].post(fleet[0].urls().keys_url,
                              protocol::write_secagg_advertise_keys(round1_keys[fleet[0].id]));
  CHECK(again.status == 409);
  for (auto& c : fleet.clients) c->share();
  for (auto& c : fleet.clients) c->send_input();
  for (auto& c : fleet.clients) c->unmask();
  REQUIRE(round_record(port, job, 1)["state"] == "committed");

  fleet.poll(2);
  // A key of round 1 replayed in round 2 (its round rewritten) is refused; fresh keys are not.
  protocol::SecAggAdvertiseKeys replayed = round1_keys[fleet[0].id];
  replayed.round = 2;
  Reply refused =
      fleet[0].post(fleet[0].urls().keys_url, protocol::write_secagg_advertise_keys(replayed));
  CHECK(refused.status == 403);
  CHECK(refused.raw.find("replays a public key") != std::string::npos);
  // Another client's message, and a message of another round, are refused too.
  protocol::SecAggAdvertiseKeys theirs = round1_keys[fleet[1].id];
  theirs.round = 2;
  CHECK(fleet[0]
            .post(fleet[0].urls().keys_url, protocol::write_secagg_advertise_keys(theirs))
            .status == 403);
  for (auto& c : fleet.clients) c->advertise();

  // Malformed shares: a ciphertext cut short, a missing neighbour, bad base64.
  protocol::SecAggShares good = fleet[0].shares();
  protocol::SecAggShares cut = good;
  cut.shares[0].ciphertext.pop_back();
  CHECK(fleet[0].post(fleet[0].urls().shares_url, protocol::write_secagg_shares(cut)).status ==
        400);
  protocol::SecAggShares fewer = good;
  fewer.shares.pop_back();
  CHECK(fleet[0].post(fleet[0].urls().shares_url, protocol::write_secagg_shares(fewer)).status ==
        400);
  json garbled = protocol::write_secagg_shares(good);
  garbled["shares"][0]["ciphertext"] = "not base64!";
  CHECK(fleet[0].post(fleet[0].urls().shares_url, garbled).status == 400);
  CHECK(fleet[0].post(fleet[0].urls().shares_url, protocol::write_secagg_shares(good)).status ==
        200);
  for (size_t i = 1; i < 5; ++i) fleet[i].share();

  // A plain upload to a secure job is refused; so is a vector one word short.
  Reply plain = fleet[0].http.call("POST", fleet[0].task->upload_url,
                                   encode_blob(ModelBlob{1, layout(), fleet[0].delta}),
                                   {{"X-Fedcase-Meta", R"({"samples": 100})"}});
  CHECK(plain.status == 409);
  const secagg::SecAggMaskedVector v = fleet[0].masked();
  CHECK(fleet[0].send(v, v.body.substr(0, v.body.size() - 4)).status == 422);
  secagg::SecAggMaskedVector wrong = v;
  wrong.header.words -= 1;
  CHECK(fleet[0].send(wrong, v.body.substr(0, v.body.size() - 4)).status == 422);
  CHECK(fleet[0].send(v, v.body).status == 200);
  CHECK(fleet[0].send(v, v.body).status == 409);  // a second input
  for (size_t i = 1; i < 5; ++i) fleet[i].send_input();
  for (auto& c : fleet.clients) c->unmask();
  json r2 = round_record(port, job, 2);
  REQUIRE_MESSAGE(r2["state"] == "committed", r2.dump());
  CHECK(r2["metrics"]["updates"] == 5);
  std::vector<RawClient*> all;
  for (auto& c : fleet.clients) all.push_back(c.get());
  const std::vector<float> mean = weighted_mean(all);
  std::vector<float> expected(kParams);
  for (size_t i = 0; i < kParams; ++i) expected[i] = 2 * mean[i];
  CHECK(max_difference(model_of(port, job, 2), expected) < 2e-3);
}

TEST_CASE("a secure job's config is refused with rules that need each update, norms and buffers") {
  TempDir dir;
  auto service = start_coordinator(dir);
  Caller admin(service->port(), kAdminToken);
  auto refused = [&](json patch, const std::string& why) {
    json config = {{"name", "x"}, {"secure_aggregation", {{"clip", 5}}}};
    config.merge_patch(patch);
    Reply r = admin.post("/v1/admin/jobs", config);
    CHECK(r.status == 400);
    CHECK_MESSAGE(r.raw.find(why) != std::string::npos, r.raw);
  };
  refused({{"aggregation", {{"rule", "median"}}}}, "needs each update");
  refused({{"aggregation", {{"rule", "multi_krum"}, {"byzantine_f", 1}}}}, "needs each update");
  refused({{"max_update_norm", 10}}, "clips its own");
  refused({{"secure_aggregation", {{"clip", nullptr}}}}, "needs clip");
  refused({{"secure_aggregation", {{"threshold", 20}}}}, "does not fit a round of 10 clients");
  refused({{"secure_aggregation", {{"dropout", 0.6}}}}, "dropout");
  refused({{"secure_aggregation", {{"unknown", 1}}}}, "unknown");
  Reply ok = admin.post("/v1/admin/jobs",
                        {{"name", "ok"}, {"secure_aggregation", {{"clip", 5}, {"dropout", 0.1}}}});
  CHECK_MESSAGE(ok.status == 201, ok.raw);
}

TEST_CASE("SDK sessions train with secure aggregation, with DP and a server optimizer too") {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);
  ml::Dataset slice = ml::head(fmnist_train(), 6000);
  client::FleetConfig fleet_config = test_fleet(port, 5, slice);
  fleet_config.require_secure_aggregation = true;  // a plain job would get no update
  auto fleet = client::Fleet::start(fleet_config);
  REQUIRE(fleet.ok());

  json plain_mean = {
      {"name", "secure-e2e"},
      {"model", "cnn"},
      {"rounds", 3},
      {"clients_per_round", 5},
      {"selection", {{"overcommit", 1.0}}},
      {"training",
       {{"lr", 0.05}, {"momentum", 0.9}, {"deadline", {{"mode", "fixed"}, {"seconds", 120}}}}},
      {"secure_aggregation", {{"dropout", 0.0}, {"corrupt", 0.0}, {"clip", 20}}}};
  json private_job = plain_mean;
  private_job["name"] = "secure-dp";
  private_job["rounds"] = 2;
  private_job["selection"] = {{"policy", "fedcase"}, {"overcommit", 1.0}};
  private_job["training"]["sampling"] = "importance";
  private_job["aggregation"] = {
      {"rule", "fedavg"}, {"clip_norm", 20}, {"dp_noise_multiplier", 0.1}};
  private_job["server_optimizer"] = {{"name", "fedadam"}, {"lr", 0.01}};
  private_job["secure_aggregation"] = {{"threshold", 3}};
  // 8-bit clients: the masked words carry only the bits the sum of 5 clients needs.
  json q8_job = plain_mean;
  q8_job["name"] = "secure-q8";
  q8_job["compression"] = {{"kind", "q8"}};
  q8_job["secure_aggregation"]["max_weight"] = 255;
  q8_job["secure_aggregation"]["clip"] = 5;
  for (const json& config : {plain_mean, private_job, q8_job}) {
    Reply created = admin.post("/v1/admin/jobs", config);
    REQUIRE_MESSAGE(created.status == 201, created.raw);
  }
  json first, second, third;
  const bool finished = wait_until(
      [&] {
        first = admin.get("/v1/admin/jobs/1").body;
        second = admin.get("/v1/admin/jobs/2").body;
        third = admin.get("/v1/admin/jobs/3").body;
        const auto done = [](const json& d) {
          auto rounds = committed_rounds(d);
          return d.value("state", "") == "finished" && !rounds.empty() &&
                 rounds.back()["metrics"].contains("test_accuracy");
        };
        return done(first) && done(second) && done(third);
      },
      400);
  (*fleet)->stop();
  REQUIRE_MESSAGE(finished, first.dump() << "\n" << second.dump() << "\n" << third.dump());
  auto rounds = committed_rounds(first);
  REQUIRE(rounds.size() == 3);
  for (const json& r : rounds) {
    CHECK(r["metrics"]["updates"] == 5);
    CHECK(r["metrics"]["secure_aggregation"]["stage"] == "done");
  }
  const double accuracy = rounds.back()["metrics"]["test_accuracy"];
  MESSAGE("secure rounds' accuracy " << rounds[0]["metrics"]["test_accuracy"] << " -> "
                                     << accuracy);
  CHECK(accuracy > 0.6);
  auto private_rounds = committed_rounds(second);
  REQUIRE(private_rounds.size() == 2);
  CHECK(private_rounds.back()["metrics"]["privacy"]["rounds"] == 2);
  CHECK(second["privacy"]["epsilon"].get<double>() > 0);
  // Every committed round's inputs were unmasked with their clients' answers.
  uint64_t answers = 0, inputs = 0;
  for (size_t i = 0; i < (*fleet)->size(); ++i)
    answers += (*fleet)->session(i).stats().unmask_answers;
  for (const json& r : rounds) inputs += r["metrics"]["updates"].get<uint64_t>();
  for (const json& r : private_rounds) inputs += r["metrics"]["updates"].get<uint64_t>();
  CHECK(answers >= inputs);
  // max(ceil(log2(2 x 5 x 127 + 2)), ceil(log2(5 x 255 + 1))) = 11 bits: 2-byte words.
  auto q8_rounds = committed_rounds(third);
  REQUIRE(q8_rounds.size() == 3);
  for (const json& r : q8_rounds) {
    CHECK(r["metrics"]["updates"] == 5);
    CHECK(r["metrics"]["secure_aggregation"]["bits"] == 11);
    CHECK(r["metrics"]["secure_aggregation"]["scale"].get<double>() == doctest::Approx(127.0 / 5));
  }
  const double q8_accuracy = q8_rounds.back()["metrics"]["test_accuracy"];
  MESSAGE("secure 8-bit rounds' accuracy " << q8_rounds[0]["metrics"]["test_accuracy"] << " -> "
                                           << q8_accuracy);
  CHECK(q8_accuracy > 0.5);
}

namespace {

// configs/jobs/fmnist-demo.json with secure aggregation on (scripts/demo.sh
// --secure-aggregation), 25 rounds at most, `patch` merged in.
json secure_demo_job(const json& patch) {
  json job = json::parse(
      std::ifstream(std::string(FEDCASE_SOURCE_DIR) + "/configs/jobs/fmnist-demo.json"));
  job.erase("max_update_norm");
  job["secure_aggregation"] = {{"clip", 100}};
  job["rounds"] = 25;
  job.merge_patch(patch);
  return job;
}

// Trains `job` with 20 SDK clients (two training at once) of a 12,000-image slice, instead of
// the demo's 100 of 60,000, until it ends; its detail, with a result.
json train_secure_demo(const json& job) {
  TempDir dir;
  auto service = start_coordinator(dir);
  const uint16_t port = service->port();
  Caller admin(port, kAdminToken);
  Reply created = admin.post("/v1/admin/jobs", job);
  REQUIRE_MESSAGE(created.status == 201, created.raw);
  ml::Dataset slice = ml::head(fmnist_train(), 12000);
  client::FleetConfig fleet_config = test_fleet(port, 20, slice, 0.5);
  fleet_config.require_secure_aggregation = true;
  fleet_config.concurrent_training = 2;
  auto fleet = client::Fleet::start(fleet_config);
  REQUIRE(fleet.ok());
  json detail;
  const bool finished = wait_until(
      [&] {
        detail = admin.get("/v1/admin/jobs/1").body;
        return detail.value("state", "") != "running" && !detail.contains("current_round");
      },
      400);
  (*fleet)->stop();
  REQUIRE_MESSAGE(finished, detail.dump());
  REQUIRE_MESSAGE(!detail["result"].is_null(), detail.dump());
  return detail;
}

}  // namespace

TEST_CASE("the demo job with secure aggregation reaches 80% test accuracy (short variant)") {
  const json detail = train_secure_demo(secure_demo_job(json::object()));
  MESSAGE("reached " << detail["result"]["test_accuracy"] << " in round "
                     << detail["result"]["round"]);
  CHECK(detail["result"]["test_accuracy"].get<double>() >= 0.8);
}

TEST_CASE("the demo job, asynchronous with secure aggregation (ready cohorts), reaches 80%") {
  // Asynchronous: 20 clients train from the newest version, 12 at a time; each version is the
  // masked sum of a cohort of 10 updates reported ready, each scaled by its staleness factor
  // on its device.
  const json detail =
      train_secure_demo(secure_demo_job({{"mode", "async"}, {"async", {{"concurrency", 12}}}}));
  // Every version is a cohort's unmasked sum of 10 updates, some of them stale.
  size_t stale = 0;
  for (const json& r : committed_rounds(detail)) {
    CHECK(r["metrics"]["updates"] == 10);
    CHECK(r["metrics"]["secure_aggregation"]["stage"] == "done");
    for (const auto& [tau, count] : r["metrics"]["staleness"].items()) {
      if (tau != "0") stale += count.get<size_t>();
    }
  }
  MESSAGE("reached " << detail["result"]["test_accuracy"] << " in version "
                     << detail["result"]["round"] << ", " << stale << " stale updates");
  CHECK(stale > 0);
  CHECK(detail["result"]["test_accuracy"].get<double>() >= 0.8);
}
