#include "sim/simulator.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

#include "ml/model.h"
#include "sim/run.h"

namespace fedcase::sim {
namespace {

struct Data {
  ml::Dataset train, test;
};

const Data& data() {
  static const Data d = [] {
    Data out;
    auto train = ml::load_fashion_mnist(FEDCASE_FMNIST_DIR, ml::Split::kTrain);
    auto test = ml::load_fashion_mnist(FEDCASE_FMNIST_DIR, ml::Split::kTest);
    REQUIRE(train.ok());
    REQUIRE(test.ok());
    out.train = ml::head(*train, 6000);
    out.test = ml::head(*test, 500);
    return out;
  }();
  return d;
}

// 50 clients with short on/off spells, so some go offline during their tasks.
SimConfig small_config(const std::string& policy) {
  nlohmann::json j = {{"eval_samples", 500},
                      {"stop_at_target", false},
                      {"fleet",
                       {{"clients", 50},
                        {"min_samples", 20},
                        {"max_samples", 200},
                        {"availability", {{"median_online_s", 120}, {"median_offline_s", 60}}}}},
                      {"job",
                       {{"name", "sim-test"},
                        {"model", "mlp"},
                        {"seed", 7},
                        {"clients_per_round", 5},
                        {"min_clients", 1},
                        {"rounds", 6},
                        {"selection", {{"policy", policy}}},
                        {"training",
                         {{"sample_budget", 20},
                          {"batch_size", 10},
                          {"sampling", "importance"},
                          {"cache", {{"policy", "importance"}, {"repetition_factor", 2}}}}}}}};
  auto c = parse_sim_config(j);
  REQUIRE(c.ok());
  return *c;
}

std::unique_ptr<Simulator> make_simulator(const SimConfig& config) {
  const std::vector<Bandwidth> trace = {{2000, 80}, {57000, 11000}, {300000, 40000}, {800, 300}};
  auto fleet = build_fleet(draw_devices(config.fleet, trace), config.fleet, data().train.labels);
  REQUIRE(fleet.ok());
  ml::set_torch_threads(1);
  auto sim = Simulator::create(config, data().train, data().test, std::move(fleet).value());
  REQUIRE(sim.ok());
  return std::move(sim).value();
}

std::vector<RoundRecord> run_rounds(Simulator& sim, RoundIndex n) {
  std::vector<RoundRecord> out;
  for (RoundIndex r = 0; r < n; ++r) {
    auto rec = sim.run_round();
    REQUIRE(rec.ok());
    out.push_back(*rec);
  }
  return out;
}

TEST_CASE("the same seed gives the same curve") {
  for (const char* policy : {"random", "oort", "fedcase"}) {
    CAPTURE(policy);
    const SimConfig config = small_config(policy);
    auto a = make_simulator(config);
    auto b = make_simulator(config);
    std::vector<RoundRecord> ra = run_rounds(*a, 4), rb = run_rounds(*b, 4);
    for (size_t i = 0; i < ra.size(); ++i) {
      CHECK(round_csv_row(ra[i]) == round_csv_row(rb[i]));
      CHECK(ra[i].close_s == rb[i].close_s);
      CHECK(ra[i].loss == rb[i].loss);
    }
  }
}

TEST_CASE("virtual time advances by the slowest kept participant, or to the deadline") {
  const SimConfig config = small_config("fedcase");
  auto sim = make_simulator(config);
  double previous_close = 0;
  bool some_filled = false;
  for (const RoundRecord& r : run_rounds(*sim, 6)) {
    CHECK(r.open_s >= previous_close);
    previous_close = r.close_s;
    double slowest = 0;
    size_t kept = 0;
    for (const TaskTrace& t : r.tasks) {
      if (!t.kept) continue;
      ++kept;
      slowest = std::max(slowest, t.duration_s);
    }
    CHECK(kept == r.participants);
    if (r.participants == config.job.clients_per_round) {
      some_filled = true;
      CHECK(r.close_s - r.open_s == doctest::Approx(slowest));
      // Kept are the fastest finishers.
      for (const TaskTrace& t : r.tasks) {
        if (t.finished && !t.kept) CHECK(t.duration_s >= slowest);
      }
    } else {
      CHECK(r.close_s - r.open_s == doctest::Approx(r.deadline_s));
    }
  }
  CHECK(some_filled);
}

TEST_CASE("clients offline at the open or before finishing never report") {
  const SimConfig config = small_config("random");
  auto sim = make_simulator(config);
  size_t offline_invitees = 0;
  for (const RoundRecord& r : run_rounds(*sim, 6)) {
    size_t dropped = 0;
    for (const TaskTrace& t : r.tasks) {
      const Spells& spells = sim->fleet()[t.client - 1].spells;
      CHECK(t.online_at_open == spells.online_at(r.open_s));
      if (!t.online_at_open) {
        ++offline_invitees;
        CHECK(!t.finished);
      }
      if (t.finished) {
        CHECK(spells.online_until(r.open_s) >= r.open_s + t.duration_s);
        CHECK(t.duration_s <= r.deadline_s);
      }
      if (t.kept) CHECK(t.finished);
      dropped += !t.finished;
    }
    CHECK(dropped == r.dropped);
  }
  // The short spells make some invitees offline by the time their round opens.
  CHECK(offline_invitees > 0);
}

TEST_CASE("an LRU cache's hits are repeated at the task's repetition factor") {
  double hit_ratio[2] = {0, 0};
  for (int k = 0; k < 2; ++k) {
    SimConfig config = small_config("random");
    config.job.training.sampling = protocol::Sampling::kUniform;
    config.job.training.cache.policy = protocol::CachePolicy::kLru;
    config.job.training.cache.repetition_factor = k == 0 ? 1 : 4;
    auto sim = make_simulator(config);
    for (const RoundRecord& r : run_rounds(*sim, 6)) hit_ratio[k] += r.hit_ratio;
  }
  MESSAGE("summed hit ratio over 6 rounds: R = 1 " << hit_ratio[0] << ", R = 4 " << hit_ratio[1]);
  CHECK(hit_ratio[1] > hit_ratio[0]);
}

TEST_CASE("the sampler's frequency order is a sim option") {
  nlohmann::json j = {{"job", {{"name", "j"}, {"model", "mlp"}}}};
  CHECK(parse_sim_config(j)->frequency_order == client::FrequencyOrder::kPeriodic);
  j["frequency_order"] = "while_improving";
  CHECK(parse_sim_config(j)->frequency_order == client::FrequencyOrder::kWhileImproving);
  j["frequency_order"] = "sometimes";
  CHECK(parse_sim_config(j).status().code() == Code::kInvalidArgument);
  j["frequency_order"] = 1;
  CHECK(parse_sim_config(j).status().code() == Code::kInvalidArgument);
}

TEST_CASE("CSV rows and the JSON summary are well formed") {
  SimConfig config = small_config("fedcase");
  config.job.rounds = 3;
  auto sim = make_simulator(config);
  std::vector<std::string> rows;
  auto summary =
      run_simulation(*sim, config, [&](const RoundRecord& r) { rows.push_back(round_csv_row(r)); });
  REQUIRE(summary.ok());
  REQUIRE(rows.size() == 3);
  CHECK(round_csv_header() ==
        "virtual_s,round,accuracy,loss,participants,dropped,hit_ratio,client_s,wasted,"
        "mean_staleness");
  for (const std::string& row : rows) {
    std::stringstream in(row);
    std::string field;
    size_t fields = 0;
    while (std::getline(in, field, ',')) {
      ++fields;
      char* end = nullptr;
      std::strtod(field.c_str(), &end);
      CHECK(*end == '\0');
    }
    CHECK(fields == 10);
  }
  auto json = nlohmann::json::parse(summary_json(*summary).dump());
  CHECK(json["policy"] == "fedcase");
  CHECK(json["rounds"] == 3);
  for (const char* key : {"time_to_target_s", "sustained_time_to_target_s"}) {
    CHECK(json.contains(key));
    CHECK((json[key].is_null() || json[key].is_number()));
  }
  CHECK(json["sustained_evaluations"] == 3);
  CHECK(json["virtual_s"].get<double>() == doctest::Approx(sim->now_s()));
}

TEST_CASE("the sustained target is the start of the first streak that lasts") {
  TargetTracker t(0.8, 3);
  auto at = [](double time_s, RoundIndex round) { return TargetReached{time_s, round, 0, 0}; };
  t.observe(true, 0.5, at(10, 1));
  t.observe(true, 0.81, at(20, 2));  // a lone crossing: first, but it does not last
  t.observe(true, 0.79, at(30, 3));
  REQUIRE(t.first());
  CHECK(t.first()->round == 2);
  t.observe(true, 0.80, at(40, 4));
  t.observe(false, 0.10, at(45, 5));  // no model committed: no evaluation, the streak holds
  t.observe(true, 0.82, at(50, 6));
  CHECK_FALSE(t.sustained());
  t.observe(true, 0.85, at(60, 7));
  REQUIRE(t.sustained());
  CHECK(t.sustained()->round == 4);
  CHECK(t.sustained()->time_s == 40);
  t.observe(true, 0.5, at(70, 8));  // found once, kept
  CHECK(t.sustained()->round == 4);
  CHECK(t.first()->round == 2);

  TargetTracker once(0.8, 1);  // one evaluation: the first crossing
  once.observe(true, 0.9, at(5, 1));
  REQUIRE(once.sustained());
  CHECK(once.sustained()->round == 1);
  TargetTracker zero(0.8, 0);  // read as 1
  CHECK(zero.sustained_evaluations() == 1);
}

}  // namespace
TEST_CASE("a steered fleet: rounds choose among the checked-in pool, and fill as unsteered") {
  // 400 clients, online most of the time; rounds of K = 5 invite 7 (overcommit 1.3), so the
  // job wants 4 x 7 = 28 checked in, each for 10 s of a cycle of 10 * (400 / 28 - 1) + 10 s.
  nlohmann::json j = {{"eval_samples", 200},
                      {"stop_at_target", false},
                      {"fleet",
                       {{"clients", 400},
                        {"min_samples", 20},
                        {"max_samples", 60},
                        {"availability", {{"median_online_s", 36000}, {"median_offline_s", 600}}}}},
                      {"job",
                       {{"name", "sim-steered"},
                        {"model", "mlp"},
                        {"seed", 3},
                        {"clients_per_round", 5},
                        {"rounds", 12},
                        {"selection", {{"policy", "oort"}, {"overcommit", 1.3}}},
                        {"training", {{"sample_budget", 20}, {"batch_size", 10}}}}}};
  // Mean clients available at a round's open, and mean updates kept, over 12 rounds.
  auto run = [&](const nlohmann::json& config) {
    auto parsed = parse_sim_config(config);
    REQUIRE(parsed.ok());
    auto sim = make_simulator(*parsed);
    double available = 0, kept = 0;
    for (const RoundRecord& r : run_rounds(*sim, 12)) {
      available += double(r.available) / 12;
      kept += double(r.participants) / 12;
    }
    return std::make_pair(available, kept);
  };
  const auto [all_available, all_kept] = run(j);
  j["pace"] = {{"awake_s", 10}, {"max_period_s", 3600}};
  const auto [pool, pool_kept] = run(j);
  MESSAGE("at a round's open: " << pool << " of 400 clients checked in (unsteered: "
                                << all_available << " available); updates kept " << pool_kept
                                << " (unsteered: " << all_kept << ")");
  CHECK(pool == doctest::Approx(28).epsilon(0.5));  // about the pool the rounds want
  CHECK(all_available > 300);
  CHECK(pool_kept >= 0.8 * all_kept);  // rounds fill from the pool as from the fleet
  // A pace that is not a pace is refused, naming it.
  j["pace"] = {{"jitter", 1}};
  auto bad = parse_sim_config(j);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("pace") != std::string::npos);
}

}  // namespace fedcase::sim
