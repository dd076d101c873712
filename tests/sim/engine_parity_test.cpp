// The simulator and the coordinator drive rounds through one engine: given the same fleet,
// job, seed, contacts and updates, they invite the same clients, aggregate the same updates
// and commit models with the same checksums.

#include <doctest/doctest.h>

#include <atomic>
#include <map>

#include "common/blob.h"
#include "ml/dataset.h"
#include "ml/model.h"
#include "server/core/coordinator.h"
#include "sim/config.h"
#include "sim/simulator.h"
#include "tests/support/temp_dir.h"

namespace fedcase::sim {
namespace {

using nlohmann::json;

// The simulator's virtual time 0 on the coordinator's clock (sim/simulator.cpp).
constexpr double kClockOrigin = 86400;
constexpr double kHeartbeat = 30;

struct Data {
  ml::Dataset train, test;
};

const Data& data() {
  static const Data d = [] {
    auto train = ml::load_fashion_mnist(FEDCASE_FMNIST_DIR, ml::Split::kTrain);
    auto test = ml::load_fashion_mnist(FEDCASE_FMNIST_DIR, ml::Split::kTest);
    REQUIRE(train.ok());
    REQUIRE(test.ok());
    return Data{ml::head(*train, 3000), ml::head(*test, 200)};
  }();
  return d;
}

json job_json(const std::string& policy) {
  return {{"name", "parity"},
          {"model", "mlp"},
          {"seed", 11},
          {"rounds", 10},
          {"clients_per_round", 3},
          {"min_clients", 3},
          {"selection", {{"policy", policy}, {"overcommit", 1.5}}},
          {"training",
           {{"sample_budget", 20},
            {"batch_size", 10},
            {"deadline", {{"mode", "fixed"}, {"seconds", 3000}}}}}};
}

// One accepted update as the simulator produced it.
struct Upload {
  ClientId client;
  std::vector<float> delta;
  scheduling::RoundReport report;
};

// Replays a simulated round's contacts and uploads against a coordinator.
struct Replay {
  explicit Replay(const testing::TempDir& dir) {
    auto config = server::parse_coordinator_config({{"database", dir.file("fedcase.db")},
                                                    {"admin_token", "admin-token-0123456789"},
                                                    {"enrollment_token", "enroll-token-0123456789"},
                                                    {"client_timeout_s", 90}});
    auto store = storage::open_sqlite_store(config.database);
    REQUIRE(store.ok());
    auto evaluator = std::make_unique<server::TestSetEvaluator>(data().test, 200, 1);
    auto opened = server::Coordinator::open(config, std::move(store).value(), std::move(evaluator),
                                            [this] { return now.load(); });
    REQUIRE(opened.ok());
    coordinator = std::move(opened).value();
  }
  // Every client contacts the coordinator at each multiple of the heartbeat up to `t` (virtual).
  void hear_until(double t, size_t clients) {
    for (double at = (std::floor(heard / kHeartbeat) + 1) * kHeartbeat; at <= t; at += kHeartbeat) {
      now = at + kClockOrigin;
      for (ClientId id = 1; id <= clients; ++id) {
        REQUIRE(coordinator->heartbeat(id, json::object()).ok());
      }
      heard = at;
    }
  }
  std::atomic<double> now{kClockOrigin};
  double heard = -1;
  std::unique_ptr<server::Coordinator> coordinator;
};

void check_parity(const std::string& policy) {
  CAPTURE(policy);
  json sim_json = {{"eval_samples", 200},
                   {"stop_at_target", false},
                   {"fleet", {{"clients", 12}, {"min_samples", 40}, {"max_samples", 200}}},
                   {"job", job_json(policy)}};
  auto config = parse_sim_config(sim_json);
  REQUIRE(config.ok());
  const std::vector<Bandwidth> trace = {{2000, 80}, {57000, 11000}, {300000, 40000}};
  auto fleet = build_fleet(draw_devices(config->fleet, trace), config->fleet, data().train.labels);
  REQUIRE(fleet.ok());
  for (SimClient& c : *fleet) c.spells = Spells(true, {});  // always online
  const std::vector<SimClient> clients = *fleet;
  ml::set_torch_threads(1);
  auto sim = Simulator::create(*config, data().train, data().test, std::move(fleet).value());
  REQUIRE(sim.ok());
  std::vector<Upload> uploads;
  (*sim)->set_update_observer(
      [&](const UpdateEvent& u) { uploads.push_back({u.client, u.delta, u.report}); });

  testing::TempDir dir;
  Replay replay(dir);
  server::Coordinator& coordinator = *replay.coordinator;
  for (const SimClient& c : clients) {
    const DeviceRow& d = c.device;
    auto r =
        coordinator.register_client({{"dataset_size", c.samples.size()},
                                     {"cache_capacity_bytes", d.cache_bytes},
                                     {"device",
                                      {{"sample_bytes", double(d.sample_bytes)},
                                       {"compute_ms_per_sample", d.compute_ms_per_sample},
                                       {"storage_read_bytes_per_s", d.storage_mb_per_s * 1e6}}}});
    REQUIRE(r.ok());
    REQUIRE(r->id == c.id);
  }
  auto created = coordinator.create_job(job_json(policy));
  REQUIRE(created.ok());
  const JobId job = created->id;

  for (int round = 1; round <= 3; ++round) {
    CAPTURE(round);
    uploads.clear();
    auto rec = (*sim)->run_round();
    REQUIRE(rec.ok());
    replay.hear_until(rec->open_s, clients.size());
    replay.now = rec->open_s + kClockOrigin;
    coordinator.tick();
    std::vector<ClientId> invited_sim, invited_coordinator;
    for (const TaskTrace& t : rec->tasks) invited_sim.push_back(t.client);
    auto detail = coordinator.job_detail(job);
    REQUIRE(detail.ok());
    REQUIRE(detail->current_round);
    REQUIRE(detail->rounds.back().index == rec->round);
    invited_coordinator = detail->rounds.back().selected;
    CHECK(invited_coordinator == invited_sim);

    // Every invitee fetches its task at the open; the kept ones upload at their finish.
    std::map<ClientId, double> finish;
    for (const TaskTrace& t : rec->tasks) {
      finish[t.client] = rec->open_s + t.duration_s + kClockOrigin;
      REQUIRE(coordinator.next_task(t.client).ok());
    }
    const auto base = coordinator.model(job, detail->summary.model_version);
    REQUIRE(base.ok());
    auto layout = decode_blob(*base->blob, base->blob->size());
    REQUIRE(layout.ok());
    REQUIRE(uploads.size() == rec->participants);
    for (const Upload& u : uploads) {
      replay.now = finish.at(u.client);
      const scheduling::RoundReport& r = u.report;
      const json meta = {{"samples", r.samples},
                         {"loss_sum", r.loss_sum},
                         {"loss_sq_sum", r.loss_sq_sum},
                         {"compute_s", r.compute_s},
                         {"io_s", r.io_s},
                         {"download_s", r.download_s},
                         {"cache_hits", r.cache_hits},
                         {"cache_misses", r.cache_misses},
                         {"bytes_read", uint64_t(r.sample_bytes * double(r.cache_misses))}};
      ModelBlob delta{detail->summary.model_version, layout->layout, u.delta};
      auto accepted = coordinator.submit_update(u.client, job, rec->round, meta, encode_blob(delta),
                                                r.upload_s);
      REQUIRE_MESSAGE(accepted.ok(), accepted.status().to_string());
    }
    replay.now = rec->close_s + kClockOrigin;
    coordinator.tick();
    auto after = coordinator.job_detail(job);
    REQUIRE(after.ok());
    CHECK(after->rounds.back().state ==
          (rec->committed ? RoundState::kCommitted : RoundState::kFailed));
    CHECK(after->summary.model_checksum == (*sim)->model_checksum());
    CHECK(after->policy_state == json::parse((*sim)->policy_state().dump()));
  }
}

// An asynchronous job replayed event by event: the coordinator's driver ticks at each of the
// simulator's updates, so it refills and concludes buffers at the same moments; every task the
// simulator hands out must be the coordinator's, and every buffer must commit the same model.
void check_async_parity(const std::string& policy) {
  CAPTURE(policy);
  json job = job_json(policy);
  job["mode"] = "async";
  job["clients_per_round"] = 3;
  job["async"] = {{"concurrency", 5}, {"max_staleness", 4}};
  json sim_json = {{"eval_samples", 200},
                   {"stop_at_target", false},
                   {"fleet", {{"clients", 12}, {"min_samples", 40}, {"max_samples", 200}}},
                   {"job", job}};
  auto config = parse_sim_config(sim_json);
  REQUIRE_MESSAGE(config.ok(), config.status().to_string());
  const std::vector<Bandwidth> trace = {{2000, 80}, {57000, 11000}, {300000, 40000}};
  auto fleet = build_fleet(draw_devices(config->fleet, trace), config->fleet, data().train.labels);
  REQUIRE(fleet.ok());
  for (SimClient& c : *fleet) c.spells = Spells(true, {});  // always online
  const std::vector<SimClient> clients = *fleet;
  ml::set_torch_threads(1);
  auto sim = Simulator::create(*config, data().train, data().test, std::move(fleet).value());
  REQUIRE(sim.ok());
  struct Update {
    ClientId client;
    std::vector<float> delta;
    scheduling::RoundReport report;
    double at_s;
    RoundIndex task_round;
    uint64_t trained_on;
  };
  std::vector<Update> updates;
  (*sim)->set_update_observer([&](const UpdateEvent& u) {
    updates.push_back({u.client, u.delta, u.report, u.at_s, u.task_round, u.trained_on});
  });
  std::vector<RoundRecord> records;
  std::vector<std::string> checksums;
  for (int buffer = 1; buffer <= 4; ++buffer) {
    auto rec = (*sim)->run_round();
    REQUIRE_MESSAGE(rec.ok(), rec.status().to_string());
    records.push_back(*rec);
    checksums.push_back((*sim)->model_checksum());
  }
  const json sim_policy_state = json::parse((*sim)->policy_state().dump());
  // Some update joined a buffer later than the one its task was handed out in: the replay
  // covers tasks carried over, and their staleness weights.
  CHECK(std::any_of(updates.begin(), updates.end(), [&](const Update& u) {
    return std::any_of(records.begin(), records.end(), [&](const RoundRecord& r) {
      return r.open_s <= u.at_s && u.at_s <= r.close_s && u.task_round < r.round;
    });
  }));

  testing::TempDir dir;
  Replay replay(dir);
  server::Coordinator& coordinator = *replay.coordinator;
  for (const SimClient& c : clients) {
    const DeviceRow& d = c.device;
    auto r =
        coordinator.register_client({{"dataset_size", c.samples.size()},
                                     {"cache_capacity_bytes", d.cache_bytes},
                                     {"device",
                                      {{"sample_bytes", double(d.sample_bytes)},
                                       {"compute_ms_per_sample", d.compute_ms_per_sample},
                                       {"storage_read_bytes_per_s", d.storage_mb_per_s * 1e6}}}});
    REQUIRE(r.ok());
  }
  auto created = coordinator.create_job(job);
  REQUIRE_MESSAGE(created.ok(), created.status().to_string());
  const JobId job_id = created->id;
  const auto layout = decode_blob(*coordinator.model(job_id, 0)->blob, 1 << 26)->layout;

  // Every task handed out, and every update, by virtual time; an update comes before the tasks
  // its arrival frees a slot for.
  struct Event {
    double at_s;
    int kind;  // 0: an update, 1: a task handed out
    size_t index;
  };
  std::vector<Event> events;
  for (size_t i = 0; i < updates.size(); ++i) events.push_back({updates[i].at_s, 0, i});
  std::vector<TaskTrace> dispatched;
  for (const RoundRecord& r : records) {
    for (const TaskTrace& t : r.tasks) {
      events.push_back({t.start_s, 1, dispatched.size()});
      dispatched.push_back(t);
    }
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& x, const Event& y) {
    return x.at_s != y.at_s ? x.at_s < y.at_s : x.kind < y.kind;
  });
  replay.hear_until(0, clients.size());
  replay.now = kClockOrigin;
  coordinator.tick();
  size_t flushed = 0;
  for (const Event& e : events) {
    replay.hear_until(e.at_s, clients.size());
    replay.now = e.at_s + kClockOrigin;
    if (e.kind == 1) {
      const TaskTrace& t = dispatched[e.index];
      CAPTURE(t.client);
      CAPTURE(e.at_s);
      auto offer = coordinator.next_task(t.client);
      REQUIRE(offer.ok());
      CHECK(offer->has_value());  // the coordinator picked the same client at the same time
      continue;
    }
    const Update& u = updates[e.index];
    const scheduling::RoundReport& r = u.report;
    const json meta = {{"samples", r.samples},
                       {"loss_sum", r.loss_sum},
                       {"loss_sq_sum", r.loss_sq_sum},
                       {"compute_s", r.compute_s},
                       {"io_s", r.io_s},
                       {"download_s", r.download_s},
                       {"cache_hits", r.cache_hits},
                       {"cache_misses", r.cache_misses},
                       {"bytes_read", uint64_t(r.sample_bytes * double(r.cache_misses))}};
    auto accepted = coordinator.submit_update(u.client, job_id, u.task_round, meta,
                                              encode_blob({u.trained_on, layout, u.delta}),
                                              r.upload_s);
    REQUIRE_MESSAGE(accepted.ok(), accepted.status().to_string());
    coordinator.tick();
    auto detail = coordinator.job_detail(job_id);
    REQUIRE(detail.ok());
    const size_t committed = size_t(std::count_if(
        detail->rounds.begin(), detail->rounds.end(),
        [](const storage::RoundRecord& x) { return x.state == RoundState::kCommitted; }));
    if (committed > flushed) {
      CAPTURE(committed);
      REQUIRE(committed <= checksums.size());
      CHECK(detail->summary.model_checksum == checksums[committed - 1]);
      flushed = committed;
    }
  }
  CHECK(flushed == records.size());
  CHECK(coordinator.job_detail(job_id)->policy_state == sim_policy_state);
}

TEST_CASE("the simulator and the coordinator run the same buffers: random selection") {
  check_async_parity("random");
}

TEST_CASE("the simulator and the coordinator run the same buffers: FedCaSe selection") {
  check_async_parity("fedcase");
}

TEST_CASE("the simulator and the coordinator run the same buffers: Oort selection") {
  check_async_parity("oort");
}

TEST_CASE("the simulator and the coordinator run the same rounds: random selection") {
  check_parity("random");
}

TEST_CASE("the simulator and the coordinator run the same rounds: FedCaSe selection") {
  check_parity("fedcase");
}

TEST_CASE("the simulator and the coordinator run the same rounds: Oort selection") {
  check_parity("oort");
}

}  // namespace
}  // namespace fedcase::sim
