#pragma once
// Selection policies choose the participants of a round among the available clients.
// Pure logic: no I/O, no clock of its own; every random draw comes from the policy's seeded
// generator, so a job's selections are reproducible, across a restart too (save_state).
// A policy is not thread-safe: the server calls one job's policy from one place at a time.
//
// Per round, the server:
//   1. builds one Candidate per known client (make_candidate in round_plan.h fills the
//      profile pointer and the expected duration of the task it would get);
//   2. calls select() and invites the returned clients (observe_selected on each profile);
//   3. when the round closes, calls on_round_end() with what happened, and stores
//      save_state() with the round's record.

#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/ids.h"
#include "common/status.h"
#include "scheduling/profile.h"

namespace fedcase::scheduling {

inline constexpr double kDefaultOvercommit = 1.3;

// What a policy may know of one candidate client.
struct Candidate {
  ClientId id = 0;
  bool available = false;  // seen recently and not busy with another job's task
  // Not owned; must stay valid during select(). Null: nothing is known of the client.
  const ClientProfile* profile = nullptr;
  // Expected duration of the task the client would get this round; <= 0 = unknown.
  double expected_duration_s = 0;
  // Distinct samples that task would train on (min(budget, dataset size)); 0 = unknown.
  uint64_t unique_samples = 0;
};

struct SelectionRequest {
  RoundIndex round = 0;                    // 1-based
  size_t target = 0;                       // K: updates the round needs
  double overcommit = kDefaultOvercommit;  // invite ceil(K * overcommit) clients
  // An asynchronous job's free slots (target of them, overcommit 1): select is called many
  // times with one round index (a buffer) as slots free, and what a policy does once a round
  // (decays, pacing) it does once per index (docs/scheduling.md, "Slot selection").
  bool slots = false;
};

// How one invited client's task ended.
struct ClientOutcome {
  ClientId id = 0;
  bool finished = false;  // its update was accepted (kept) before the round closed
  // Finished: task handout to accepted update. Otherwise: how long its task had run when the
  // round closed, a lower bound on its duration (0 = unknown).
  double duration_s = 0;
  double utility = 0;  // statistical utility of its report (finished only)
};

// What the server tells a policy when a round closes.
struct RoundOutcome {
  RoundIndex round = 0;
  double duration_s = 0;  // round open to close
  // The round's loss: the mean per-sample training loss over the finished clients
  // (sum of loss_sum / sum of samples), or the evaluation loss if the job evaluates every
  // round. NaN when unknown: policies then learn nothing about progress from this round.
  double loss = std::numeric_limits<double>::quiet_NaN();
  std::vector<ClientOutcome> clients;  // every invited client
};

class SelectionPolicy {
 public:
  virtual ~SelectionPolicy() = default;
  virtual std::string name() const = 0;
  // Returns distinct ids of available candidates: ceil(target * overcommit) of them, or all
  // available ones if there are fewer. Precondition: candidate ids are distinct.
  virtual std::vector<ClientId> select(const SelectionRequest& request,
                                       const std::vector<Candidate>& candidates) = 0;
  // Learns from a closed round (exploration decay, pacing, rho, running ranges).
  virtual void on_round_end(const RoundOutcome& outcome) = 0;
  // Everything the policy has learnt, including its generator: a policy built with the same
  // config and given load_state(save_state()) makes the same choices as this one.
  virtual nlohmann::json save_state() const = 0;
  // kInvalidArgument (state unchanged) for a state this policy did not save.
  virtual Status load_state(const nlohmann::json& state) = 0;
};

// The mean utility of the round's finished (kept) clients; 0 when none finished. What an
// invitee that was not kept is credited with (observe_not_kept).
double mean_kept_utility(const RoundOutcome& outcome);

// Number of clients to invite for `target` updates with `overcommit` (values < 1 count as 1).
size_t invited_count(size_t target, double overcommit);

// Builds the policy a job's `selection` config names ({"policy": "random" | "oort" |
// "fedcase", ...policy keys}), seeded by `seed`. kInvalidArgument for an unknown policy, an
// unknown key or a bad value. The config keys and their defaults are listed in
// docs/scheduling.md; `overcommit` is validated here and read by the server into each
// SelectionRequest (selection_overcommit).
Result<std::unique_ptr<SelectionPolicy>> make_selection_policy(const nlohmann::json& config,
                                                               uint64_t seed);

// The `overcommit` of a selection config (default kDefaultOvercommit). kInvalidArgument unless
// it is a number >= 1.
Result<double> selection_overcommit(const nlohmann::json& config);

}  // namespace fedcase::scheduling
