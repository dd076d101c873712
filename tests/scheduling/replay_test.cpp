// Drives each selection policy through a recorded fleet (tests/fixtures/scheduling/
// fleet_trace.csv, columns documented in make_fleet_trace.py) the way the coordinator does:
// heartbeats, candidates, selection, round plan, reports, round outcome. Checks the
// invariants of every selection, and that a policy restored from its saved state mid-run
// chooses exactly as the original does.

#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "scheduling/round_plan.h"
#include "scheduling/selection.h"
#include "tests/scheduling/coordinator.h"

using namespace fedcase;
using namespace fedcase::scheduling;

namespace {

constexpr size_t kClients = 200;
constexpr size_t kRounds = 30;
constexpr size_t kTarget = 10;
constexpr double kOvercommit = 1.3;
constexpr uint64_t kSamples = 500;
constexpr uint64_t kModelBytes = 1000000;
constexpr double kStart = 1.7e9;
constexpr double kRoundInterval = 600;
constexpr RoundIndex kRestartAfter = 15;

struct TraceRow {
  bool available = false;
  double compute_s = 0, io_s = 0, download_s = 0, upload_s = 0;
  double cache_hit = 0;
  double utility = 0;
  bool finishes = false;
  double duration_s() const { return compute_s + io_s + download_s + upload_s; }
};

// trace[round - 1][client - 1]
using Trace = std::vector<std::vector<TraceRow>>;

Trace load_trace() {
  std::ifstream in(FEDCASE_SOURCE_DIR "/tests/fixtures/scheduling/fleet_trace.csv");
  REQUIRE(in.good());
  std::string line;
  std::getline(in, line);
  REQUIRE(line ==
          "round,client,available,compute_s,io_s,download_s,upload_s,cache_hit,utility,finishes");
  Trace trace(kRounds, std::vector<TraceRow>(kClients));
  size_t rows = 0;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string f[10];
    for (auto& field : f) std::getline(fields, field, ',');
    const size_t round = std::stoul(f[0]), client = std::stoul(f[1]);
    REQUIRE(round >= 1);
    REQUIRE(round <= kRounds);
    REQUIRE(client >= 1);
    REQUIRE(client <= kClients);
    TraceRow& row = trace[round - 1][client - 1];
    row.available = f[2] == "1";
    row.compute_s = std::stod(f[3]);
    row.io_s = std::stod(f[4]);
    row.download_s = std::stod(f[5]);
    row.upload_s = std::stod(f[6]);
    row.cache_hit = std::stod(f[7]);
    row.utility = std::stod(f[8]);
    row.finishes = f[9] == "1";
    ++rows;
  }
  REQUIRE(rows == kClients * kRounds);
  return trace;
}

RoundReport report_of(RoundIndex round, const TraceRow& row) {
  RoundReport r;
  r.round = round;
  r.samples = kSamples;
  // A mean loss of U / |B| with no spread gives back utility U.
  r.loss_sum = row.utility;
  r.loss_sq_sum = row.utility * row.utility / static_cast<double>(kSamples);
  r.compute_s = row.compute_s;
  r.io_s = row.io_s;
  r.cache_hits = static_cast<uint64_t>(row.cache_hit * kSamples + 0.5);
  r.cache_misses = kSamples - r.cache_hits;
  r.sample_bytes = 784;
  r.download_bytes = kModelBytes;
  r.download_s = row.download_s;
  r.upload_bytes = kModelBytes;
  r.upload_s = row.upload_s;
  return r;
}

struct ReplaySummary {
  double total_round_s = 0;
  size_t updates = 0;
  double utility = 0;  // statistical utility of the accepted updates
};

ReplaySummary replay(const nlohmann::json& config, const Trace& trace) {
  const ProfileParams profile_params{0.3, 1.5 * kRoundInterval};
  TrainingParams params;
  params.sample_budget = kSamples;
  params.priors.compute_ms_per_sample = 20;  // the fleet's median, as an operator would set it
  auto made = make_selection_policy(config, 42);
  REQUIRE(made.ok());
  std::unique_ptr<SelectionPolicy> policy = std::move(made.value());
  std::unique_ptr<SelectionPolicy> restored;

  std::vector<ClientProfile> profiles(kClients);
  for (size_t i = 0; i < kClients; ++i) {
    profiles[i].id = i + 1;
    DeviceReport device;
    device.dataset_size = kSamples;
    device.sample_bytes = 784;
    REQUIRE(observe_registration(profiles[i], device, profile_params).ok());
  }

  ReplaySummary summary;
  for (RoundIndex round = 1; round <= kRounds; ++round) {
    const std::vector<TraceRow>& rows = trace[round - 1];
    const double now = kStart + static_cast<double>(round) * kRoundInterval;
    std::vector<Candidate> candidates;
    size_t available = 0;
    for (size_t i = 0; i < kClients; ++i) {
      if (rows[i].available) {
        observe_heartbeat(profiles[i], now, profile_params);
        ++available;
      }
      candidates.push_back(make_candidate(profiles[i], rows[i].available, params, kModelBytes));
    }

    const SelectionRequest request{round, kTarget, kOvercommit};
    std::vector<ClientId> picked = policy->select(request, candidates);
    CAPTURE(round);
    CHECK(picked.size() == std::min(invited_count(kTarget, kOvercommit), available));
    CHECK(std::set<ClientId>(picked.begin(), picked.end()).size() == picked.size());
    for (ClientId id : picked) {
      REQUIRE(id >= 1);
      REQUIRE(id <= kClients);
      CHECK(rows[id - 1].available);
    }
    if (restored) CHECK(restored->select(request, candidates) == picked);

    std::vector<const ClientProfile*> selected;
    for (ClientId id : picked) {
      observe_selected(profiles[id - 1], round);
      selected.push_back(&profiles[id - 1]);
    }
    Result<RoundPlan> plan = plan_round(params, selected, kModelBytes);
    REQUIRE(plan.ok());

    // The round closes at the target's update or at the deadline; later updates are dropped.
    std::vector<testing::Arrival> arrivals;
    for (ClientId id : picked) {
      const TraceRow& row = rows[id - 1];
      if (row.finishes) arrivals.push_back({row.duration_s(), id, report_of(round, row)});
    }
    const RoundOutcome outcome = testing::conclude_replayed_round(
        profiles, round, picked, arrivals, kTarget, plan->deadline_s, profile_params);
    size_t kept = 0;
    for (const ClientOutcome& c : outcome.clients) {
      if (!c.finished) continue;
      summary.utility += c.utility;
      ++kept;
    }
    policy->on_round_end(outcome);
    if (restored) restored->on_round_end(outcome);
    summary.total_round_s += outcome.duration_s;
    summary.updates += kept;

    if (round == kRestartAfter) {
      auto twin = make_selection_policy(config, 7);
      REQUIRE(twin.ok());
      restored = std::move(twin.value());
      const nlohmann::json stored = nlohmann::json::parse(policy->save_state().dump());
      REQUIRE(restored->load_state(stored).ok());
    }
  }
  REQUIRE(restored);
  CHECK(restored->save_state() == policy->save_state());
  return summary;
}

}  // namespace

TEST_CASE("every policy replays the recorded fleet within its invariants") {
  const Trace trace = load_trace();
  const ReplaySummary random = replay({{"policy", "random"}}, trace);
  const ReplaySummary oort = replay({{"policy", "oort"}}, trace);
  const ReplaySummary fedcase =
      replay({{"policy", "fedcase"}, {"rho_controller", "perturb"}}, trace);
  MESSAGE("total round time over " << kRounds << " rounds: random " << random.total_round_s
                                   << " s, oort " << oort.total_round_s << " s, fedcase "
                                   << fedcase.total_round_s << " s");
  MESSAGE("accepted updates: random " << random.updates << ", oort " << oort.updates << ", fedcase "
                                      << fedcase.updates);
  MESSAGE("their utility: random " << random.utility << ", oort " << oort.utility << ", fedcase "
                                   << fedcase.utility);
  // Each learning policy beats a random draw at what it optimises: Oort the utility it
  // collects, FedCaSe utility and round time together.
  CHECK(oort.utility > random.utility);
  CHECK(fedcase.utility > random.utility);
  CHECK(fedcase.total_round_s < random.total_round_s);
}

TEST_CASE("FedCaSe with the learned rho controller (the default) replays the recorded fleet") {
  const Trace trace = load_trace();
  const ReplaySummary random = replay({{"policy", "random"}}, trace);
  const ReplaySummary learned = replay({{"policy", "fedcase"}}, trace);
  MESSAGE("learned rho: total round time " << learned.total_round_s << " s, " << learned.updates
                                           << " accepted updates, utility " << learned.utility);
  CHECK(learned.utility > random.utility);
  CHECK(learned.total_round_s < random.total_round_s);
}
