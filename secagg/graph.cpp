#include "secagg/graph.h"

#include <algorithm>

#include "secagg/prg.h"

namespace fedcase::secagg {
namespace {

// Uniform values below `bound` from the seed's stream (rejection sampling: no modulo bias).
class SeededDraws {
 public:
  explicit SeededDraws(const PrgKey& key) : key_(key) {}

  Result<uint64_t> below(uint64_t bound) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;  // multiple of bound
    for (;;) {
      if (next_ == buffer_.size()) {
        buffer_.assign(256, 0);
        FEDCASE_RETURN_IF_ERROR(expander_.apply(key_, offset_, buffer_.size(), 8,
                                                PrgExpander::Op::kStore, buffer_.data()));
        offset_ += buffer_.size();
        next_ = 0;
      }
      const uint64_t v = buffer_[next_++];
      if (v < limit) return v % bound;
    }
  }

 private:
  PrgKey key_;
  PrgExpander expander_;
  std::vector<uint64_t> buffer_;
  size_t next_ = 0;
  uint64_t offset_ = 0;
};

const std::vector<ClientId> kNone;

}  // namespace

namespace {

Status check_draw(const std::vector<ClientId>& participants, uint32_t degree) {
  const size_t n = participants.size();
  if (n < 2) return invalid_argument("a neighbour graph needs at least 2 participants");
  if (std::adjacent_find(participants.begin(), participants.end(), std::greater_equal<>()) !=
      participants.end()) {
    return invalid_argument("participants must be strictly increasing");
  }
  if (degree < 1 || degree > n - 1 || (degree % 2 != 0 && degree != n - 1)) {
    return invalid_argument("the degree must be in [1, participants - 1], even unless it is " +
                            std::to_string(n - 1));
  }
  return ok_status();
}

// ring[p]: the position in the participants of the client at ring position p: a uniform
// permutation (Fisher-Yates) drawn from the seed's stream.
Result<std::vector<uint32_t>> ring_of(size_t n, const Bytes32& seed) {
  Result<PrgKey> key = prg_key(seed);
  if (!key.ok()) return key.status();
  std::vector<uint32_t> ring(n);
  for (size_t i = 0; i < n; ++i) ring[i] = static_cast<uint32_t>(i);
  SeededDraws draws(*key);
  for (size_t i = n - 1; i > 0; --i) {
    Result<uint64_t> j = draws.below(i + 1);
    if (!j.ok()) return j.status();
    std::swap(ring[i], ring[*j]);
  }
  return ring;
}

// The neighbours of the client at ring position p, increasing.
std::vector<ClientId> neighbours_at(const std::vector<ClientId>& participants,
                                    const std::vector<uint32_t>& ring, size_t p, uint32_t degree) {
  const size_t n = participants.size();
  std::vector<ClientId> out;
  out.reserve(degree);
  if (degree == n - 1) {
    for (size_t q = 0; q < n; ++q) {
      if (q != ring[p]) out.push_back(participants[q]);
    }
    return out;
  }
  for (size_t d = 1; d <= degree / 2; ++d) {
    out.push_back(participants[ring[(p + d) % n]]);
    out.push_back(participants[ring[(p + n - d) % n]]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

Result<NeighbourGraph> NeighbourGraph::draw(const std::vector<ClientId>& participants,
                                            uint32_t degree, const Bytes32& seed) {
  FEDCASE_RETURN_IF_ERROR(check_draw(participants, degree));
  Result<std::vector<uint32_t>> ring = ring_of(participants.size(), seed);
  if (!ring.ok()) return ring.status();
  const size_t n = participants.size();
  NeighbourGraph g;
  g.participants_ = participants;
  g.degree_ = degree;
  g.neighbours_.resize(n);
  for (size_t i = 0; i < n; ++i) g.index_[participants[i]] = static_cast<uint32_t>(i);
  for (size_t p = 0; p < n; ++p) {
    g.neighbours_[(*ring)[p]] = neighbours_at(participants, *ring, p, degree);
  }
  return g;
}

Result<Neighbourhood> NeighbourGraph::neighbourhood(const std::vector<ClientId>& participants,
                                                    uint32_t degree, const Bytes32& seed,
                                                    ClientId client) {
  FEDCASE_RETURN_IF_ERROR(check_draw(participants, degree));
  auto it = std::lower_bound(participants.begin(), participants.end(), client);
  if (it == participants.end() || *it != client) {
    return invalid_argument("client " + std::to_string(client) + " is not a participant");
  }
  const uint32_t index = static_cast<uint32_t>(it - participants.begin());
  Result<std::vector<uint32_t>> ring = ring_of(participants.size(), seed);
  if (!ring.ok()) return ring.status();
  const size_t p =
      static_cast<size_t>(std::find(ring->begin(), ring->end(), index) - ring->begin());
  return Neighbourhood{index + 1, neighbours_at(participants, *ring, p, degree)};
}

uint32_t NeighbourGraph::index_of(ClientId client) const {
  auto it = index_.find(client);
  return it == index_.end() ? 0 : it->second + 1;
}

const std::vector<ClientId>& NeighbourGraph::neighbours(ClientId client) const {
  auto it = index_.find(client);
  return it == index_.end() ? kNone : neighbours_[it->second];
}

bool NeighbourGraph::adjacent(ClientId a, ClientId b) const {
  const std::vector<ClientId>& list = neighbours(a);
  return std::binary_search(list.begin(), list.end(), b);
}

}  // namespace fedcase::secagg
