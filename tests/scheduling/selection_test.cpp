#include <doctest/doctest.h>

#include <set>

#include "scheduling/selection.h"

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
