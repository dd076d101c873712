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
  FedCaseConfig config;
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
  FedCaseConfig config;
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
  FedCasePolicy a(FedCaseConfig{}, 7);
  teach_ranges(a);
  a.on_round_end({2, 20, 1.5, {}});
  FedCasePolicy b(FedCaseConfig{}, 8);
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
