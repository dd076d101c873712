// The neighbour graph: k-regular, symmetric, a function of its seed.

#include "secagg/graph.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <set>

namespace fedcase::secagg {
namespace {

std::vector<ClientId> ids(size_t n) {
  std::vector<ClientId> out;
  for (size_t i = 0; i < n; ++i) out.push_back(10 + 7 * i);
  return out;
}

Bytes32 seed_of(uint8_t fill) {
  Bytes32 s{};
  s.fill(fill);
  return s;
}

TEST_CASE("every participant has exactly k neighbours, and adjacency is symmetric") {
  for (auto [participants, degree] : {std::pair<size_t, uint32_t>{2, 1},
                                      {3, 2},
                                      {10, 4},
                                      {10, 9},
                                      {11, 10},
                                      {50, 10},
                                      {101, 30},
                                      {1000, 52}}) {
    const size_t n = participants;
    const uint32_t k = degree;
    CAPTURE(n);
    CAPTURE(k);
    Result<NeighbourGraph> g = NeighbourGraph::draw(ids(n), k, seed_of(1));
    REQUIRE(g.ok());
    for (ClientId c : ids(n)) {
      const std::vector<ClientId>& nb = g->neighbours(c);
      REQUIRE(nb.size() == k);
      CHECK(std::is_sorted(nb.begin(), nb.end()));
      CHECK(std::find(nb.begin(), nb.end(), c) == nb.end());
      for (ClientId d : nb) CHECK(g->adjacent(d, c));
      CHECK(g->index_of(c) >= 1);
      CHECK(g->index_of(c) <= n);
    }
  }
}

TEST_CASE("one client's neighbourhood is its part of the whole graph") {
  for (auto [participants, degree] :
       {std::pair<size_t, uint32_t>{2, 1}, {10, 4}, {10, 9}, {101, 30}}) {
    const std::vector<ClientId> p = ids(participants);
    NeighbourGraph g = *NeighbourGraph::draw(p, degree, seed_of(5));
    for (ClientId c : p) {
      Result<Neighbourhood> mine = NeighbourGraph::neighbourhood(p, degree, seed_of(5), c);
      REQUIRE(mine.ok());
      CHECK(mine->index == g.index_of(c));
      CHECK(mine->neighbours == g.neighbours(c));
    }
    CHECK_FALSE(NeighbourGraph::neighbourhood(p, degree, seed_of(5), 3).ok());
  }
}

TEST_CASE("the graph is a function of the seed") {
  const std::vector<ClientId> p = ids(200);
  NeighbourGraph a = *NeighbourGraph::draw(p, 10, seed_of(1));
  NeighbourGraph b = *NeighbourGraph::draw(p, 10, seed_of(1));
  NeighbourGraph c = *NeighbourGraph::draw(p, 10, seed_of(2));
  size_t differ = 0;
  for (ClientId id : p) {
    CHECK(a.neighbours(id) == b.neighbours(id));
    differ += a.neighbours(id) != c.neighbours(id);
  }
  CHECK(differ > 150);  // another seed relabels almost every client's neighbourhood
  CHECK(a.neighbours(3).empty());
  CHECK(a.index_of(3) == 0);
}

TEST_CASE("a degree the graph cannot have, or unsorted participants, are refused") {
  CHECK_FALSE(NeighbourGraph::draw(ids(10), 3, seed_of(1)).ok());   // odd, not n - 1
  CHECK_FALSE(NeighbourGraph::draw(ids(10), 10, seed_of(1)).ok());  // above n - 1
  CHECK_FALSE(NeighbourGraph::draw(ids(10), 0, seed_of(1)).ok());
  CHECK_FALSE(NeighbourGraph::draw({5, 3}, 1, seed_of(1)).ok());
  CHECK_FALSE(NeighbourGraph::draw({5, 5}, 1, seed_of(1)).ok());
  CHECK_FALSE(NeighbourGraph::draw({5}, 1, seed_of(1)).ok());
}

}  // namespace
}  // namespace fedcase::secagg
