#pragma once
// The round's neighbour graph: a Harary graph H(n, k) over the participants, relabelled by a
// random permutation drawn from a 32-byte seed the coordinator chooses (as SecAgg+ uses it,
// Bell et al. CCS 2020, section 3): participant at ring position p is joined to the k/2
// positions on each side (k even), or to every other participant (k = n - 1). Every client has
// exactly k neighbours, and under the random relabelling a client's neighbours are a uniform
// k-subset of the others (the premise of params.h's bounds). The graph is a function of the
// seed, the sorted participants and k only, so a client can redraw it and check the
// neighbours the coordinator gave it.
//
// Thread safety: immutable once drawn; any thread may read it.

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "secagg/crypto.h"

namespace fedcase::secagg {

// One client's part of the graph.
struct Neighbourhood {
  uint32_t index = 0;                // its position in the participants plus 1 (>= 1)
  std::vector<ClientId> neighbours;  // increasing
};

class NeighbourGraph {
 public:
  // `participants` strictly increasing, at least 2; `degree` in [1, n - 1], even unless n - 1.
  // kInvalidArgument otherwise.
  static Result<NeighbourGraph> draw(const std::vector<ClientId>& participants, uint32_t degree,
                                     const Bytes32& seed);

  // One client's index and neighbours, as draw() gives them, in O(n + k) time and memory
  // instead of the whole graph's O(n k): what a client needs. kInvalidArgument as draw(), and
  // for a client not among the participants.
  static Result<Neighbourhood> neighbourhood(const std::vector<ClientId>& participants,
                                             uint32_t degree, const Bytes32& seed, ClientId client);

  const std::vector<ClientId>& participants() const { return participants_; }
  uint32_t degree() const { return degree_; }
  bool contains(ClientId client) const { return index_.count(client) != 0; }
  // The client's position in participants() plus 1: its Shamir x coordinate (0: unknown).
  uint32_t index_of(ClientId client) const;
  // The client's neighbours, increasing (empty for a client not in the graph).
  const std::vector<ClientId>& neighbours(ClientId client) const;
  bool adjacent(ClientId a, ClientId b) const;
  // The bytes of its adjacency lists and index (payload only).
  size_t memory_bytes() const {
    return participants_.size() * (sizeof(ClientId) * (size_t(degree_) + 3) + sizeof(uint32_t));
  }

 private:
  std::vector<ClientId> participants_;
  uint32_t degree_ = 0;
  std::unordered_map<ClientId, uint32_t> index_;   // client -> position in participants_
  std::vector<std::vector<ClientId>> neighbours_;  // by position in participants_
};

}  // namespace fedcase::secagg
