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

TEST_CASE("Oort scores: clipped utility, staleness bonus, (T/t)^2 beyond T") {
  // Durations 10..50: T is the 30th percentile, index floor(0.3 * 5) = 1, so T = 20.
  // Utilities 30, 30, 10, 50, 20: clip (95th) = 50, lowest = 10.
  std::vector<ClientProfile> profiles = {explored_profile(1, 30, 4), explored_profile(2, 30, 4),
                                         explored_profile(3, 10, 2), explored_profile(4, 50, 2),
                                         explored_profile(5, 20, 1), fresh_profile(6)};
  std::vector<Candidate> candidates = {candidate_of(profiles[0], 10), candidate_of(profiles[1], 40),
                                       candidate_of(profiles[2], 20), candidate_of(profiles[3], 30),
                                       candidate_of(profiles[4], 50), candidate_of(profiles[5], 5)};
  OortPolicy oort(OortConfig{}, 1);
  const SelectionRequest request{10, 2, 1.0};
  std::vector<double> s = oort.scores(request, candidates);
  REQUIRE(s.size() == 6);
  const double bonus4 = std::sqrt(0.1 * std::log(10.0) / 4);
  CHECK(s[0] == doctest::Approx(0.5 + bonus4));
  CHECK(s[1] / s[0] == doctest::Approx(std::pow(20.0 / 40.0, 2)));
  CHECK(s[2] == doctest::Approx(std::sqrt(0.1 * std::log(10.0) / 2)));  // t == T: no penalty
  CHECK(s[3] ==
        doctest::Approx((1.0 + std::sqrt(0.1 * std::log(10.0) / 2)) * std::pow(20.0 / 30, 2)));
  CHECK(s[5] == 0);  // unexplored

  candidates[0].available = false;
  CHECK(oort.scores(request, candidates)[0] == 0);
}

TEST_CASE("Oort's exploration decays from 0.9 by 0.98 a round to a floor of 0.3") {
  OortPolicy oort(OortConfig{}, 1);
  CHECK(oort.save_state()["exploration"] == 0.9);
  oort.on_round_end({1, 10, 1.0, {}});
  CHECK(oort.save_state()["exploration"].get<double>() == doctest::Approx(0.882));
  for (RoundIndex r = 2; r <= 100; ++r) oort.on_round_end({r, 10, 1.0, {}});
  CHECK(oort.save_state()["exploration"].get<double>() == doctest::Approx(0.3));
}

TEST_CASE("Oort explores unexplored clients fastest first") {
  std::vector<ClientProfile> profiles;
  for (ClientId id = 1; id <= 70; ++id) {
    profiles.push_back(id <= 20 ? explored_profile(id, 10.0 * id, 1) : fresh_profile(id));
  }
  std::vector<Candidate> candidates;
  for (const auto& p : profiles) candidates.push_back(candidate_of(p, 1000.0 - p.id));
  OortPolicy oort(OortConfig{}, 5);
  // 10 invitations at epsilon 0.9: floor(10 * 0.1) = 1 exploits, 9 explore.
  std::vector<ClientId> picked = oort.select({2, 10, 1.0}, candidates);
  REQUIRE(picked.size() == 10);
  std::set<ClientId> fresh, seasoned;
  for (ClientId id : picked) (id > 20 ? fresh : seasoned).insert(id);
  CHECK(seasoned.size() == 1);
  CHECK(fresh == std::set<ClientId>{62, 63, 64, 65, 66, 67, 68, 69, 70});  // the 9 fastest
}

TEST_CASE("Oort exploitation favours high scores but samples") {
  std::vector<ClientProfile> profiles;
  for (ClientId id = 1; id <= 40; ++id) profiles.push_back(explored_profile(id, id, 1));
  std::vector<Candidate> candidates;
  for (const auto& p : profiles) candidates.push_back(candidate_of(p, 10));
  OortConfig config;
  config.exploration_start = config.exploration_min = 0;
  OortPolicy oort(config, 3);
  std::map<ClientId, int> count;
  for (RoundIndex r = 2; r < 202; ++r) {
    std::vector<ClientId> picked = oort.select({r, 4, 1.0}, candidates);
    REQUIRE(picked.size() == 4);
    REQUIRE(std::set<ClientId>(picked.begin(), picked.end()).size() == 4);
    for (ClientId id : picked) ++count[id];
  }
  int top = 0, bottom = 0;
  for (ClientId id = 31; id <= 40; ++id) top += count[id];
  for (ClientId id = 1; id <= 10; ++id) bottom += count[id];
  CHECK(top > 2 * bottom);
  CHECK(count.size() > 20);  // not only the top 4
}

TEST_CASE("Oort's pacer relaxes T when utility stalls and tightens it when utility jumps") {
  OortConfig config;
  config.pacer_window = 2;
  OortPolicy oort(config, 1);
  auto round = [&](RoundIndex r, double utility) {
    oort.on_round_end({r, 10, 1.0, {{1, true, 5, utility}, {2, false, 0, 0}}});
  };
  round(1, 10);
  round(2, 10);
  CHECK(oort.save_state()["pacer_percentile"] == 30);  // one window only
  round(3, 10);
  round(4, 10.5);
  CHECK(oort.save_state()["pacer_percentile"] == 35);  // within 10%: relax
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
  for (RoundIndex r = 2; r < 30; ++r) {
    std::vector<ClientId> picked = oort.select({r, 5, 1.0}, candidates);
    REQUIRE(picked.size() == 5);
    for (ClientId id : picked) CHECK(id > 3);
  }
  // Nine invitations need two of the three most selected clients back.
  std::vector<ClientId> picked = oort.select({30, 9, 1.0}, candidates);
  CHECK(picked.size() == 9);
}
