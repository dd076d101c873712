#include "scheduling/fedcase.h"

#include <doctest/doctest.h>

#include <map>
#include <set>

#include "tests/scheduling/fleet.h"

using namespace fedcase;
using namespace fedcase::scheduling;
using namespace fedcase::scheduling::testing;

namespace {

// Teaches `policy` the running ranges: durations [10, 30], utilities [1, 5].
void teach_ranges(FedCasePolicy& policy) {
  policy.on_round_end({1, 30, 2.0, {{100, true, 10, 1}, {101, true, 30, 5}, {102, false, 0, 0}}});
}

// The defaults with the perturb-and-observe rho controller.
FedCaseConfig perturb_config() {
  FedCaseConfig config;
  config.rho_controller = RhoController::kPerturb;
  return config;
}

}  // namespace

TEST_CASE("experience mixes normalised time (0.1) and utility (0.9) over running ranges") {
  FedCasePolicy policy(FedCaseConfig{}, 1);
  teach_ranges(policy);
  ClientProfile useful = explored_profile(1, 4, 1);
  ClientProfile useless = explored_profile(2, 1, 1);
  // normtime = (30 - 15) / 20 = 0.75, normutil = (4 - 1) / 4 = 0.75
  CHECK(*policy.experience(candidate_of(useful, 15)) == doctest::Approx(0.75));
  CHECK(*policy.experience(candidate_of(useless, 30)) == doctest::Approx(0.0));
  // Beyond the ranges: clamped.
  CHECK(*policy.experience(candidate_of(useful, 5)) == doctest::Approx(0.1 + 0.9 * 0.75));
  CHECK(*policy.experience(candidate_of(useless, 300)) == doctest::Approx(0.0));
  ClientProfile fresh = fresh_profile(3);
  CHECK_FALSE(policy.experience(candidate_of(fresh, 15)).has_value());
}

TEST_CASE("FedCaSe prefers a fast useful client over a slow useless one") {
  FedCasePolicy policy(FedCaseConfig{}, 2);
  teach_ranges(policy);
  std::vector<ClientProfile> profiles;
  for (ClientId id = 1; id <= 40; ++id) {
    // 1..10 fast and useful, 11..20 slow and useless, 21..40 never ran a task.
    profiles.push_back(id <= 10   ? explored_profile(id, 5, 1)
                       : id <= 20 ? explored_profile(id, 1, 1)
                                  : fresh_profile(id));
  }
  std::vector<Candidate> candidates;
  for (const auto& p : profiles) {
    candidates.push_back(candidate_of(p, p.id <= 10 ? 10 : p.id <= 20 ? 30 : 20));
  }
  CHECK(*policy.experience(candidates[0]) > *policy.experience(candidates[10]));
  int good = 0, bad = 0;
  for (RoundIndex r = 2; r < 52; ++r) {
    for (ClientId id : policy.select({r, 4, 1.0}, candidates)) {
      if (id <= 10) ++good;
      if (id > 10 && id <= 20) ++bad;
    }
  }
  CHECK(good > 5 * std::max(bad, 1));
}

TEST_CASE("FedCaSe never picks an unavailable client nor one predicted to go offline") {
  std::vector<ClientProfile> profiles;
  for (ClientId id = 1; id <= 30; ++id) profiles.push_back(explored_profile(id, 5, 1));
  // Clients 1..5 stay online about 10 s at a time; their 100 s task would not finish.
  for (ClientId id = 1; id <= 5; ++id) profiles[id - 1].availability.session_s.fold(10, 0.3);
  std::vector<Candidate> candidates;
  for (const auto& p : profiles) {
    // Clients 6..10 are the fastest, but unavailable.
    candidates.push_back(
        candidate_of(p, p.id <= 5 ? 5 : 100 + static_cast<double>(p.id), p.id <= 5 || p.id > 10));
    if (p.id <= 5) candidates.back().expected_duration_s = 100;
  }
  FedCasePolicy policy(FedCaseConfig{}, 3);
  for (RoundIndex r = 1; r <= 20; ++r) {
    std::vector<ClientId> picked = policy.select({r, 5, 1.3}, candidates);
    CHECK(picked.size() == 7);
    CHECK(std::set<ClientId>(picked.begin(), picked.end()).size() == 7);
    for (ClientId id : picked) CHECK(id > 10);
  }
  // Predicted-offline clients are used only when nobody else is left.
  std::vector<ClientId> all = policy.select({21, 25, 1.0}, candidates);
  CHECK(all.size() == 25);
}

TEST_CASE("FedCaSe keeps exploring fresh clients") {
  std::vector<ClientProfile> profiles;
  for (ClientId id = 1; id <= 100; ++id) {
    profiles.push_back(id <= 10 ? explored_profile(id, 5, 1) : fresh_profile(id));
  }
  std::vector<Candidate> candidates;
  // The experienced clients are also the fastest, so they win every place they compete for.
  for (const auto& p : profiles) candidates.push_back(candidate_of(p, p.id <= 10 ? 5 : 50));
  FedCaseConfig config;
  config.rho_initial = config.rho_max = 0.6;  // ceil(0.6 * 5) = 3 experienced extras
  FedCasePolicy policy(config, 4);
  teach_ranges(policy);
  std::set<ClientId> fresh_seen;
  size_t fresh_picks = 0;
  for (RoundIndex r = 2; r < 22; ++r) {
    std::vector<ClientId> picked = policy.select({r, 5, 1.3}, candidates);
    REQUIRE(picked.size() == 7);
    for (ClientId id : picked) {
      if (id > 10) {
        ++fresh_picks;
        fresh_seen.insert(id);
      }
    }
  }
  // Of 7 random draws a round at most 3 are displaced; most draws are fresh clients.
  CHECK(fresh_picks >= 40);
  CHECK(fresh_seen.size() >= 30);
}

TEST_CASE("rho follows perturb-and-observe on loss decrease per second") {
  FedCaseConfig config = perturb_config();
  config.warmup_rounds = 0;
  config.rho_initial = 0.5;
  config.rho_step = 2;
  FedCasePolicy policy(config, 5);
  auto round = [&](RoundIndex r, double loss) { policy.on_round_end({r, 10, loss, {}}); };
  round(1, 10);  // no previous loss: no progress yet
  CHECK(policy.rho() == 0.5);
  round(2, 9);  // progress 0.1 /s: first step, upwards
  CHECK(policy.rho() == 1.0);
  round(3, 7);  // 0.2 /s: better, keep going up (clamped at rho_max)
  CHECK(policy.rho() == 1.0);
  round(4, 6.5);  // 0.05 /s: worse, turn around
  CHECK(policy.rho() == 0.5);
  round(5, 6.0);  // 0.05 /s: not worse, keep going
  CHECK(policy.rho() == 0.25);
  policy.on_round_end({6, 10, std::numeric_limits<double>::quiet_NaN(), {}});  // loss unknown
  CHECK(policy.rho() == 0.25);
}

TEST_CASE("warm-up draws rho at random, then starts from the best one seen") {
  FedCaseConfig config = perturb_config();
  config.warmup_rounds = 4;
  FedCasePolicy policy(config, 6);
  std::map<double, double> progress_by_rho;
  double loss = 100;
  const double drops[] = {0, 1, 5, 2};
  for (RoundIndex r = 1; r <= 4; ++r) {
    const double rho = policy.rho();
    CHECK(rho >= config.rho_min);
    CHECK(rho <= config.rho_max);
    loss -= drops[r - 1];
    policy.on_round_end({r, 1, loss, {}});
    if (r > 1) progress_by_rho[rho] = drops[r - 1];
  }
  // Round 3 made the most progress (5 /s); its rho is where the controller starts.
  double best_rho = 0, best = -1;
  for (auto [rho, progress] : progress_by_rho) {
    if (progress > best) best = progress, best_rho = rho;
  }
  CHECK(policy.rho() == best_rho);
}

TEST_CASE("FedCaSe state round-trips") {
  FedCasePolicy a(perturb_config(), 7);
  teach_ranges(a);
  a.on_round_end({2, 20, 1.5, {}});
  FedCasePolicy b(perturb_config(), 8);
  REQUIRE(b.load_state(nlohmann::json::parse(a.save_state().dump())).ok());
  CHECK(b.save_state() == a.save_state());
  CHECK(b.rho() == a.rho());
  ClientProfile p = explored_profile(1, 3, 1);
  CHECK(*b.experience(candidate_of(p, 20)) == *a.experience(candidate_of(p, 20)));
  nlohmann::json bad = a.save_state();
  bad["duration_range"] = {5, 1};
  CHECK_FALSE(b.load_state(bad).ok());
  bad = a.save_state();
  bad["direction"] = 0.5;
  CHECK_FALSE(b.load_state(bad).ok());
  bad = a.save_state();
  bad["rho"] = 7;
  CHECK_FALSE(b.load_state(bad).ok());
}

namespace {

FedCaseConfig learned_config(uint32_t warmup_rounds) {
  FedCaseConfig config;
  config.rho_controller = RhoController::kLearned;
  config.rho_min = 0.1;
  config.rho_max = 0.9;
  config.warmup_rounds = warmup_rounds;
  return config;
}

// A round whose outcome the rho it was selected with decides: from 0.5 up the loss falls by 1
// in 10 s (0.1 /s), below it by 0.2 in 30 s (about 0.0067 /s).
RoundOutcome round_with_rho(RoundIndex round, double rho, double& loss) {
  const bool fast = rho >= 0.5;
  loss -= fast ? 1.0 : 0.2;
  return {round, fast ? 10.0 : 30.0, loss, {}};
}

}  // namespace

TEST_CASE("the learned controller draws rho at random during the warm-up") {
  const FedCaseConfig config = learned_config(8);
  FedCasePolicy policy(config, 9);
  CHECK(policy.rho() == config.rho_initial);
  std::set<double> drawn;
  double loss = 100;
  for (RoundIndex r = 1; r < 8; ++r) {
    policy.on_round_end(round_with_rho(r, policy.rho(), loss));
    CHECK(policy.rho() >= config.rho_min);
    CHECK(policy.rho() <= config.rho_max);
    drawn.insert(policy.rho());
  }
  CHECK(drawn.size() == 7);
}

TEST_CASE("the learned controller picks the rho that went with the fastest loss decrease") {
  const FedCaseConfig config = learned_config(20);
  FedCasePolicy policy(config, 10);
  double loss = 100;
  std::vector<double> fast_rhos, slow_rhos;
  for (RoundIndex r = 1; r <= 20; ++r) {
    const double rho = policy.rho();
    policy.on_round_end(round_with_rho(r, rho, loss));
    if (r > 1) (rho >= 0.5 ? fast_rhos : slow_rhos).push_back(rho);  // round 1 has no decrease
  }
  REQUIRE(fast_rhos.size() >= 4);
  REQUIRE(slow_rhos.size() >= 4);
  // The aim point lies past the fast rounds in every feature, so each tree whose sample drew
  // enough fast rounds to split them off (here every one) ends in a leaf of fast rounds: the
  // prediction is a mean of their rhos.
  const double predicted = policy.rho();
  CHECK(predicted >= *std::min_element(fast_rhos.begin(), fast_rhos.end()));
  CHECK(predicted <= *std::max_element(fast_rhos.begin(), fast_rhos.end()));
  // It keeps to the fast rounds as its own rounds join them.
  for (RoundIndex r = 21; r <= 30; ++r) {
    policy.on_round_end(round_with_rho(r, policy.rho(), loss));
    CHECK(policy.rho() >= 0.5);
    CHECK(policy.rho() <= config.rho_max);
  }
  // Nothing to learn from: rho stays.
  const double kept = policy.rho();
  policy.on_round_end({31, 10, std::numeric_limits<double>::quiet_NaN(), {}});
  CHECK(policy.rho() == kept);
  policy.on_round_end({32, 0, loss - 1, {}});  // a round of no duration
  CHECK(policy.rho() == kept);
}

TEST_CASE("the learned controller needs a few observations before it fits") {
  // Two remembered rounds of different rho, loaded as a saved state: a fast one at 0.9 and a
  // slow one at 0.2; the policy's rho is 0.5 and the last loss 100.
  FedCasePolicy policy(learned_config(0), 11);
  nlohmann::json state = policy.save_state();
  state["rho"] = 0.5;
  state["rounds"] = 3;
  state["last_loss"] = 100.0;
  state["rho_observations"] = {{1.0, 10.0, 0.9}, {0.2, 30.0, 0.2}};
  state["max_loss_decrease"] = 1.0;
  state["min_round_duration"] = 10.0;
  REQUIRE(policy.load_state(state).ok());
  // A third observation (fast, at 0.5): still too few to fit, rho stays.
  policy.on_round_end({4, 10, 99, {}});
  CHECK(policy.rho() == 0.5);
  // The fourth (fast, at 0.5) lets the forest fit: the aim point lies with the fast rounds, whose
  // rhos are 0.9, 0.5 and 0.5, so rho moves off 0.5 towards 0.9 (the slow round's 0.2 is not
  // among them).
  policy.on_round_end({5, 10, 98, {}});
  CHECK(policy.rho() > 0.5);
  CHECK(policy.rho() <= 0.9);
}

TEST_CASE("the learned controller's state round-trips and stays bounded") {
  const FedCaseConfig config = learned_config(5);
  FedCasePolicy a(config, 12);
  double loss = 1000;
  for (RoundIndex r = 1; r <= 300; ++r) a.on_round_end(round_with_rho(r, a.rho(), loss));
  const nlohmann::json saved = a.save_state();
  CHECK(saved["rho_controller"] == "learned");
  CHECK(saved["rho_observations"].size() == FedCasePolicy::kMaxRhoObservations);
  CHECK(saved["max_loss_decrease"] == 1.0);
  CHECK(saved["min_round_duration"] == 10.0);

  FedCasePolicy b(config, 13);
  REQUIRE(b.load_state(nlohmann::json::parse(saved.dump())).ok());
  CHECK(b.save_state() == saved);
  CHECK(b.rho() == a.rho());
  // The next refit draws its seed from the restored generator: the same rho follows.
  double loss_b = loss;
  a.on_round_end(round_with_rho(301, a.rho(), loss));
  b.on_round_end(round_with_rho(301, b.rho(), loss_b));
  CHECK(b.rho() == a.rho());
  CHECK(b.save_state() == a.save_state());
}

TEST_CASE("a bad learned controller state is refused") {
  const FedCaseConfig config = learned_config(2);
  FedCasePolicy a(config, 14);
  double loss = 100;
  for (RoundIndex r = 1; r <= 6; ++r) a.on_round_end(round_with_rho(r, a.rho(), loss));
  const nlohmann::json good = a.save_state();
  FedCasePolicy b(config, 15);
  REQUIRE(b.load_state(good).ok());
  auto refused = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json bad = good;
    bad[key] = value;
    CAPTURE(bad.dump());
    CHECK_FALSE(b.load_state(bad).ok());
  };
  refused("rho_observations", {{1, 10, 0.95}});  // rho beyond rho_max
  refused("rho_observations", {{1, 0, 0.5}});    // no duration
  refused("rho_observations", {{1, -10, 0.5}});
  refused("rho_observations", {{1, 10}});
  refused("rho_observations", {{1, "10", 0.5}});
  refused("rho_observations", {{1, 10, 0.5}, 7});
  refused("rho_observations", 3);
  refused("rho_observations",
          std::vector<std::vector<double>>(FedCasePolicy::kMaxRhoObservations + 1, {1, 10, 0.5}));
  refused("rho_observations", {{std::numeric_limits<double>::infinity(), 10, 0.5}});
  refused("max_loss_decrease", std::numeric_limits<double>::infinity());
  refused("max_loss_decrease", "1");
  refused("min_round_duration", 0);
  refused("rho_controller", "perturb");  // saved by the other controller
  refused("rho_controller", "fancy");
  refused("rho_controller", 1);
  // The refusals left b as it was.
  CHECK(b.save_state() == good);
  CHECK(b.load_state(good).ok());

  // A state of the perturb controller is not the learned one's, and the other way round; a
  // state saved before the controller was named loads into either.
  FedCasePolicy perturb(perturb_config(), 16);
  nlohmann::json unnamed = perturb.save_state();
  CHECK_FALSE(b.load_state(unnamed).ok());
  CHECK_FALSE(perturb.load_state(good).ok());
  unnamed.erase("rho_controller");
  CHECK(perturb.load_state(unnamed).ok());
  CHECK(b.load_state(unnamed).ok());
  CHECK(b.rho() == perturb.rho());
}

TEST_CASE("rho_controller selects the controller; other values are refused") {
  CHECK(parse_fedcase_config(nlohmann::json::object())->rho_controller == RhoController::kLearned);
  CHECK(parse_fedcase_config({{"rho_controller", "perturb"}})->rho_controller ==
        RhoController::kPerturb);
  CHECK(parse_fedcase_config({{"rho_controller", "learned"}})->rho_controller ==
        RhoController::kLearned);
  for (const nlohmann::json& bad : {nlohmann::json("Learned"), nlohmann::json(""),
                                    nlohmann::json(1), nlohmann::json(nullptr)}) {
    CAPTURE(bad.dump());
    Result<FedCaseConfig> parsed = parse_fedcase_config({{"rho_controller", bad}});
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.status().code() == Code::kInvalidArgument);
  }
  CHECK(make_selection_policy({{"policy", "fedcase"}, {"rho_controller", "learned"}}, 1).ok());
  CHECK_FALSE(make_selection_policy({{"policy", "fedcase"}, {"rho_controller", "pid"}}, 1).ok());
  CHECK_FALSE(make_selection_policy({{"policy", "oort"}, {"rho_controller", "learned"}}, 1).ok());
}
