#include "scheduling/oort.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "tests/scheduling/fleet.h"

using namespace fedcase;
using namespace fedcase::scheduling;
using namespace fedcase::scheduling::testing;

TEST_CASE("Oort scores: normalised clipped utility, staleness since feedback, (T/t)^2 beyond T") {
  // Utilities 30, 30, 10, 50, 20 from feedback in rounds 4, 4, 2, 2, 1; client 6 unexplored
  // (40 distinct samples); client 7 explored but unavailable.
  std::vector<ClientProfile> profiles = {explored_profile(1, 30, 4),  explored_profile(2, 30, 4),
                                         explored_profile(3, 10, 2),  explored_profile(4, 50, 2),
                                         explored_profile(5, 20, 1),  fresh_profile(6),
                                         explored_profile(7, 1000, 9)};
  profiles[0].last_selected_round = 9;  // invited since, no feedback yet: staleness counts from 4
  profiles[2].duration_floor_s = 20;    // not kept last time: at least 20 s
  std::vector<Candidate> candidates = {
      candidate_of(profiles[0], 10),      candidate_of(profiles[1], 40),
      candidate_of(profiles[2], 8),       candidate_of(profiles[3], 30),
      candidate_of(profiles[4], 50),      candidate_of(profiles[5], 5),
      candidate_of(profiles[6], 1, false)};
  candidates[5].unique_samples = 40;
  // T: the 30th percentile of every known client's duration, index floor(0.3 * 7) = 2 of
  // 1 5 10 20 30 40 50 -> 10. Rewards of the eligible clients 10 20 30 30 40 50 (the
  // unexplored one's being its 40 samples): lowest 0.999 x 10, range 50 - 9.99, clip 50.
  const double lowest = 9.99, range = 50 - 9.99;
  auto bonus = [](double f) { return std::sqrt(0.1 * std::log(10.0) / f); };
  OortPolicy oort(OortConfig{}, 1);
  const SelectionRequest request{10, 2, 1.0};
  std::vector<double> s = oort.scores(request, candidates);
  REQUIRE(s.size() == 7);
  CHECK(s[0] == doctest::Approx((30 - lowest) / range + bonus(4)));
  CHECK(s[1] == doctest::Approx(((30 - lowest) / range + bonus(4)) * std::pow(10.0 / 40, 2)));
  CHECK(s[2] == doctest::Approx(((10 - lowest) / range + bonus(2)) * std::pow(10.0 / 20, 2)));
  CHECK(s[3] == doctest::Approx((1.0 + bonus(2)) * std::pow(10.0 / 30, 2)));
  CHECK(s[4] == doctest::Approx(((20 - lowest) / range + bonus(1)) * std::pow(10.0 / 50, 2)));
  CHECK(s[5] == 0);  // unexplored
  CHECK(s[6] == 0);  // unavailable

  // A lower clip caps the best utility: the median, index 3 of the rewards, is 30.
  OortConfig clipped;
  clipped.clip_quantile = 0.5;
  s = OortPolicy(clipped, 1).scores(request, candidates);
  CHECK(s[3] == doctest::Approx(((30 - lowest) / range + bonus(2)) * std::pow(10.0 / 30, 2)));
}

TEST_CASE("Oort's first selection is uniform; later ones decay epsilon before using it") {
  std::vector<ClientProfile> profiles;
  for (ClientId id = 1; id <= 20; ++id) {
    profiles.push_back(id <= 10 ? explored_profile(id, 10, 1) : fresh_profile(id));
  }
  std::vector<Candidate> candidates;
  for (const auto& p : profiles) candidates.push_back(candidate_of(p, 10));
  OortPolicy oort(OortConfig{}, 1);
  CHECK(oort.select({1, 10, 1.0}, candidates).size() == 10);
  CHECK(oort.save_state()["exploration"] == 0.9);
  // 0.9 x 0.98 = 0.882 before use: floor(10 x 0.882) = 8 explore, 2 exploit.
  std::vector<ClientId> picked = oort.select({2, 10, 1.0}, candidates);
  CHECK(oort.save_state()["exploration"].get<double>() == doctest::Approx(0.882));
  CHECK(std::count_if(picked.begin(), picked.end(), [](ClientId id) { return id <= 10; }) == 2);
  oort.on_round_end({2, 10, 1.0, {}});  // a round's end does not decay it
  CHECK(oort.save_state()["exploration"].get<double>() == doctest::Approx(0.882));
  for (RoundIndex r = 3; r <= 100; ++r) oort.select({r, 10, 1.0}, candidates);
  CHECK(oort.save_state()["exploration"].get<double>() == doctest::Approx(0.3));
}

// Ten unexplored clients of 10 x id distinct samples; 8-10 take 100 s, the others 10 s, so
// T (30th percentile of the ten) is 10 and the slow ones weigh 10 x id x (10/100)^2.
struct ExploreFleet {
  std::vector<ClientProfile> profiles;
  std::vector<Candidate> candidates;
  ExploreFleet() {
    for (ClientId id = 1; id <= 10; ++id) profiles.push_back(fresh_profile(id));
    for (const auto& p : profiles) {
      candidates.push_back(candidate_of(p, p.id >= 8 ? 100 : 10));
      candidates.back().unique_samples = 10 * p.id;
    }
  }
  static double weight(ClientId id) { return 10.0 * id * (id >= 8 ? 0.01 : 1.0); }
};

OortConfig explore_only(double window) {
  OortConfig c;
  c.exploration_start = c.exploration_min = 1;
  c.explore_window = window;
  return c;
}

TEST_CASE("Oort explores within the window of the heaviest size x duration penalty") {
  ExploreFleet fleet;
  OortPolicy oort(explore_only(1), 5);
  oort.select({1, 3, 1.0}, fleet.candidates);  // the uniform first round
  for (RoundIndex r = 2; r < 10; ++r) {
    // A window of 1 x 3: the three heaviest, 7, 6 and 5; 8-10 are larger but slow.
    std::vector<ClientId> picked = oort.select({r, 3, 1.0}, fleet.candidates);
    CHECK(std::set<ClientId>(picked.begin(), picked.end()) == std::set<ClientId>{5, 6, 7});
  }
}

TEST_CASE("Oort samples exploration proportionally to size x duration penalty") {
  ExploreFleet fleet;
  OortPolicy oort(explore_only(100), 5);
  oort.select({1, 1, 1.0}, fleet.candidates);
  std::map<ClientId, int> count;
  const int draws = 20000;
  for (int r = 0; r < draws; ++r) {
    std::vector<ClientId> picked = oort.select({RoundIndex(r) + 2, 1, 1.0}, fleet.candidates);
    REQUIRE(picked.size() == 1);
    ++count[picked[0]];
  }
  double total = 0;
  for (ClientId id = 1; id <= 10; ++id) total += ExploreFleet::weight(id);
  for (ClientId id = 1; id <= 10; ++id) {
    CAPTURE(id);
    CHECK(count[id] / double(draws) ==
          doctest::Approx(ExploreFleet::weight(id) / total).epsilon(0.1));
  }
}

TEST_CASE("Oort exploitation favours high scores but samples") {
  std::vector<ClientProfile> profiles;
  for (ClientId id = 1; id <= 40; ++id) profiles.push_back(explored_profile(id, id, 1));
  std::vector<Candidate> candidates;
  for (const auto& p : profiles) candidates.push_back(candidate_of(p, 10));
  OortConfig config;
  config.exploration_start = config.exploration_min = 0;
  OortPolicy oort(config, 3);
  oort.select({1, 4, 1.0}, candidates);  // the uniform first round
  std::map<ClientId, int> count;
  for (RoundIndex r = 2; r < 1002; ++r) {
    std::vector<ClientId> picked = oort.select({r, 4, 1.0}, candidates);
    REQUIRE(picked.size() == 4);
    REQUIRE(std::set<ClientId>(picked.begin(), picked.end()).size() == 4);
    for (ClientId id : picked) ++count[id];
  }
  int top = 0, bottom = 0;
  for (ClientId id = 31; id <= 40; ++id) top += count[id];
  for (ClientId id = 1; id <= 10; ++id) bottom += count[id];
  // Scores run from the staleness bonus (~0.7) alone to 1 + bonus: the top ten weigh about
  // twice the bottom ten.
  CHECK(top > 1.5 * bottom);
  CHECK(count.size() > 20);  // not only the top 4
}

TEST_CASE("Oort's pacer relaxes T when exploited utility stalls and tightens it when it jumps") {
  std::vector<ClientProfile> profiles = {explored_profile(1, 10, 1)};
  std::vector<Candidate> candidates = {candidate_of(profiles[0], 10)};
  OortConfig config;
  config.exploration_start = config.exploration_min = 0;
  config.pacer_window = 2;
  OortPolicy oort(config, 1);
  // Each round exploits client 1 (after the uniform first round, which exploits nobody and
  // enters 0), which brings back `utility`; the entry is utility / (1 + 1e-4).
  auto round = [&](RoundIndex r, double utility) {
    std::vector<ClientId> picked = oort.select({r, 1, 1.0}, candidates);
    REQUIRE(picked == std::vector<ClientId>{1});
    oort.on_round_end({r, 10, 1.0, {{1, true, 5, utility}}});
  };
  round(1, 10);
  round(2, 10);
  CHECK(oort.save_state()["pacer_percentile"] == 30);  // one window only
  round(3, 5);
  round(4, 5.5);
  CHECK(oort.save_state()["pacer_percentile"] == 35);  // 0 + 10 against 5 + 5.5: relax
  round(5, 100);
  round(6, 100);
  CHECK(oort.save_state()["pacer_percentile"] == 30);  // a jump over 5x: tighten
  round(7, 150);
  round(8, 150);
  CHECK(oort.save_state()["pacer_percentile"] == 30);  // 1.5x: hold
}

TEST_CASE("Oort's blacklist leaves out the most selected clients, but never starves a round") {
  std::vector<ClientProfile> profiles;
  for (ClientId id = 1; id <= 10; ++id) {
    profiles.push_back(explored_profile(id, 10, 1));
    profiles.back().times_selected = id <= 3 ? 50 : 1;
  }
  std::vector<Candidate> candidates;
  for (const auto& p : profiles) candidates.push_back(candidate_of(p, 10));
  OortConfig config;
  config.blacklist_after = 10;
  config.blacklist_max_fraction = 0.3;
  OortPolicy oort(config, 1);
  oort.select({1, 5, 1.0}, candidates);  // the uniform first round
  for (RoundIndex r = 2; r < 30; ++r) {
    std::vector<ClientId> picked = oort.select({r, 5, 1.0}, candidates);
    REQUIRE(picked.size() == 5);
    for (ClientId id : picked) CHECK(id > 3);
  }
  // Nine invitations need two of the three most selected clients back.
  std::vector<ClientId> picked = oort.select({30, 9, 1.0}, candidates);
  CHECK(picked.size() == 9);
}
