#include "scheduling/selection.h"

#include <doctest/doctest.h>

#include <set>

using namespace fedcase;
using namespace fedcase::scheduling;

namespace {
std::vector<Candidate> fleet(size_t n, size_t offline_every) {
  std::vector<Candidate> out;
  for (size_t i = 1; i <= n; ++i) out.push_back({i, offline_every == 0 || i % offline_every != 0});
  return out;
}
}  // namespace

TEST_CASE("invited count over-commits and rounds up") {
  CHECK(invited_count(10, 1.3) == 13);
  CHECK(invited_count(5, 1.3) == 7);
  CHECK(invited_count(10, 1.0) == 10);
  CHECK(invited_count(10, 0.5) == 10);
}

TEST_CASE("random selection draws distinct available clients, reproducibly") {
  auto candidates = fleet(100, 3);
  auto p1 = make_selection_policy({{"policy", "random"}}, 7);
  auto p2 = make_selection_policy({{"policy", "random"}}, 7);
  REQUIRE(p1.ok());
  REQUIRE(p2.ok());
  auto a = (*p1)->select({1, 10, 1.3}, candidates);
  auto b = (*p2)->select({1, 10, 1.3}, candidates);
  CHECK(a == b);
  CHECK(a.size() == 13);
  std::set<ClientId> unique(a.begin(), a.end());
  CHECK(unique.size() == a.size());
  for (ClientId id : a) CHECK(id % 3 != 0);
  CHECK((*p1)->select({2, 10, 1.3}, fleet(5, 0)).size() == 5);
  CHECK_FALSE(make_selection_policy({{"policy", "nope"}}, 1).ok());
}

TEST_CASE("every policy builds from its config; bad configs are rejected") {
  for (const char* name : {"random", "oort", "fedcase"}) {
    auto p = make_selection_policy({{"policy", name}, {"overcommit", 1.5}}, 1);
    REQUIRE(p.ok());
    CHECK((*p)->name() == name);
    CHECK_FALSE(make_selection_policy({{"policy", name}, {"overcomit", 1.5}}, 1).ok());
    CHECK_FALSE(make_selection_policy({{"policy", name}, {"overcommit", 0.5}}, 1).ok());
  }
  CHECK((*make_selection_policy(nlohmann::json::object(), 1))->name() == "random");
  CHECK_FALSE(make_selection_policy(nlohmann::json::array(), 1).ok());
  CHECK_FALSE(make_selection_policy({{"policy", 3}}, 1).ok());
  CHECK(make_selection_policy({{"policy", "oort"}, {"exploration_min", 0.1}}, 1).ok());
  CHECK_FALSE(make_selection_policy({{"policy", "oort"}, {"exploration_min", 2}}, 1).ok());
  CHECK_FALSE(make_selection_policy({{"policy", "oort"}, {"pacer_window", 0}}, 1).ok());
  CHECK_FALSE(make_selection_policy({{"policy", "oort"}, {"rho_min", 0.2}}, 1).ok());
  CHECK(make_selection_policy({{"policy", "fedcase"}, {"rho_min", 0.2}}, 1).ok());
  CHECK_FALSE(make_selection_policy({{"policy", "fedcase"}, {"rho_initial", 2}}, 1).ok());
  CHECK_FALSE(make_selection_policy({{"policy", "fedcase"}, {"rho_step", 0.5}}, 1).ok());
  CHECK_FALSE(make_selection_policy({{"policy", "random"}, {"rho_min", 0.2}}, 1).ok());
}

TEST_CASE("selection_overcommit reads the config with its default") {
  CHECK(*selection_overcommit(nlohmann::json::object()) == kDefaultOvercommit);
  CHECK(*selection_overcommit({{"overcommit", 2}}) == 2);
  CHECK_FALSE(selection_overcommit({{"overcommit", "lots"}}).ok());
}

TEST_CASE("a saved state restores the generator; another policy's state is refused") {
  auto candidates = fleet(500, 0);
  for (const char* name : {"random", "oort", "fedcase"}) {
    auto a = make_selection_policy({{"policy", name}}, 11);
    auto b = make_selection_policy({{"policy", name}}, 99);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    (*a)->select({1, 20, 1.3}, candidates);
    REQUIRE((*b)->load_state((*a)->save_state()).ok());
    CHECK((*a)->select({2, 20, 1.3}, candidates) == (*b)->select({2, 20, 1.3}, candidates));
    CHECK((*a)->save_state() == (*b)->save_state());
    nlohmann::json foreign = (*a)->save_state();
    foreign["policy"] = "other";
    CHECK((*b)->load_state(foreign).code() == Code::kInvalidArgument);
    nlohmann::json broken = (*a)->save_state();
    broken["rng"] = {0, 0, 0, 0};
    CHECK_FALSE((*b)->load_state(broken).ok());
    CHECK_FALSE((*b)->load_state("state").ok());
    CHECK((*a)->save_state() == (*b)->save_state());  // failed loads changed nothing
  }
}
