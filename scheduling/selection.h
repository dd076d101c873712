#pragma once
// Selection policies choose the participants of a round among the available clients.
// Pure logic: no I/O, no clock of its own; every random draw comes from the policy's seeded
// generator, so a job's selections are reproducible.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/ids.h"
#include "common/status.h"

namespace fedcase::scheduling {

// What a policy may know of one candidate client.
struct Candidate {
  ClientId id = 0;
  bool available = false;  // seen recently and not busy with another job's task
};

struct SelectionRequest {
  RoundIndex round = 0;
  size_t target = 0;        // K: updates the round needs
  double overcommit = 1.3;  // invite ceil(K * overcommit) clients
};

class SelectionPolicy {
 public:
  virtual ~SelectionPolicy() = default;
  virtual std::string name() const = 0;
  // Returns distinct ids of available candidates, at most ceil(target * overcommit).
  virtual std::vector<ClientId> select(const SelectionRequest& request,
                                       const std::vector<Candidate>& candidates) = 0;
};

// Number of clients to invite for `target` updates with `overcommit` (>= 1).
size_t invited_count(size_t target, double overcommit);

// Builds the policy a job's `selection` config names ({"policy": "random"}), seeded by `seed`.
Result<std::unique_ptr<SelectionPolicy>> make_selection_policy(const nlohmann::json& config,
                                                                uint64_t seed);

}  // namespace fedcase::scheduling
