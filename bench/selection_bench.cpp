// Selection latency: each policy choosing K of N known clients with realistic profiles, as the
// coordinator does when a round opens.
//
//   selection_bench [--reps R]
//
// Fleets: K = 100 of N = 10,000 and K = 1,000 of N = 100,000 (over-commit 1.3), R rounds each
// (default 50). Between timed selections the policy learns from a synthetic round outcome and
// the chosen profiles are marked selected, so state evolves as in a real job; only select()
// is timed. Profiles: log-normal compute, network and storage speeds and utilities, 70% of
// clients available, 70% explored. As machine facts the run also times building the
// candidates (expected duration of every client's task) and std::sort of N doubles, the cost
// of one full ordering of the fleet. Targets: under 5 ms at 10,000 and 50 ms at 100,000.
// The last line of output is one JSON object with every figure, in microseconds.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "scheduling/rng.h"
#include "scheduling/round_plan.h"
#include "scheduling/selection.h"

namespace {

using fedcase::ClientId;
using fedcase::RoundIndex;
using namespace fedcase::scheduling;
using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

constexpr double kOvercommit = 1.3;
constexpr uint64_t kModelBytes = 1'000'000;
constexpr RoundIndex kHistoryRounds = 200;  // rounds the fleet has already seen
constexpr double kPi = 3.14159265358979323846;

struct FleetSpec {
  size_t clients;
  size_t target;
  double target_us;
};

double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

double lognormal(Rng& rng, double median, double sigma) {
  const double u1 = 1.0 - rng.unit(), u2 = rng.unit();
  const double normal = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
  return median * std::exp(sigma * normal);
}

std::vector<ClientProfile> make_fleet(size_t n, Rng& rng) {
  std::vector<ClientProfile> fleet(n);
  for (size_t i = 0; i < n; ++i) {
    ClientProfile& p = fleet[i];
    p.id = i + 1;
    p.dataset_size = static_cast<uint64_t>(std::min(5000.0, lognormal(rng, 300, 0.8)));
    p.cache_capacity_bytes = 8u << 20;
    p.compute_ms_per_sample.fold(lognormal(rng, 20, 0.6), 0.3);
    p.storage_read_bytes_per_s.fold(lognormal(rng, 10e6, 0.7), 0.3);
    p.sample_bytes.fold(784, 0.3);
    p.availability.session_s.fold(lognormal(rng, 3600, 1.0), 0.3);
    if (rng.unit() < 0.7) {  // explored: measured network, cache and utility
      p.download_bytes_per_s.fold(lognormal(rng, 1.25e6, 0.8), 0.3);
      p.upload_bytes_per_s.fold(lognormal(rng, 0.625e6, 0.8), 0.3);
      p.cache_hit_ratio.fold(rng.unit() * 0.6, 0.3);
      p.utility = lognormal(rng, 100, 0.5);
      p.last_selected_round = 1 + rng.below(kHistoryRounds);
      p.utility_round = p.last_selected_round;
      p.feedback_round = p.utility_round;
      p.feedback_utility = p.utility;
      p.times_selected = 1 + rng.below(20);
      p.completions = p.times_selected;
    }
  }
  return fleet;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Json run_fleet(const FleetSpec& spec, size_t reps, bool& met) {
  Rng rng(spec.clients);
  std::vector<ClientProfile> fleet = make_fleet(spec.clients, rng);
  TrainingParams params;

  std::vector<double> candidate_us, sort_us;
  std::vector<Candidate> candidates;
  for (size_t r = 0; r < reps; ++r) {
    const auto start = Clock::now();
    candidates.clear();
    candidates.reserve(fleet.size());
    for (const ClientProfile& p : fleet) {
      candidates.push_back(make_candidate(p, rng.unit() < 0.7, params, kModelBytes));
    }
    candidate_us.push_back(micros_since(start));

    std::vector<double> keys(spec.clients);
    for (double& k : keys) k = rng.unit();
    const auto sort_start = Clock::now();
    std::sort(keys.begin(), keys.end());
    sort_us.push_back(micros_since(sort_start));
  }

  Json policies = Json::object();
  std::printf("N = %zu clients, K = %zu (invite %zu): candidates %.0f us, sort %.0f us\n",
              spec.clients, spec.target, invited_count(spec.target, kOvercommit),
              median(candidate_us), median(sort_us));
  for (const char* name : {"random", "oort", "fedcase"}) {
    auto made = make_selection_policy({{"policy", name}}, 1);
    if (!made.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, made.status().to_string().c_str());
      std::exit(1);
    }
    std::unique_ptr<SelectionPolicy> policy = std::move(made.value());
    std::vector<ClientProfile> profiles = fleet;  // each policy starts from the same fleet
    for (size_t i = 0; i < candidates.size(); ++i) candidates[i].profile = &profiles[i];
    std::vector<double> select_us;
    double loss = 2.0;
    for (size_t r = 0; r < reps; ++r) {
      const RoundIndex round = kHistoryRounds + 1 + r;
      const auto start = Clock::now();
      std::vector<ClientId> picked = policy->select({round, spec.target, kOvercommit}, candidates);
      select_us.push_back(micros_since(start));

      RoundOutcome outcome;
      outcome.round = round;
      loss *= 0.97;
      outcome.loss = loss;
      for (ClientId id : picked) {
        ClientProfile& p = profiles[id - 1];
        observe_selected(p, round);
        outcome.clients.push_back({id, true, candidates[id - 1].expected_duration_s, p.utility});
        outcome.duration_s = std::max(outcome.duration_s, candidates[id - 1].expected_duration_s);
      }
      policy->on_round_end(outcome);
    }
    const double med = median(select_us);
    const double worst = *std::max_element(select_us.begin(), select_us.end());
    met = met && med < spec.target_us;
    std::printf("  %-8s median %8.0f us  max %8.0f us  (%.2fx sort)  target %.0f us: %s\n", name,
                med, worst, med / median(sort_us), spec.target_us,
                med < spec.target_us ? "met" : "MISSED");
    policies[name] = {{"median_us", med}, {"max_us", worst}};
  }
  return {{"clients", spec.clients},
          {"target", spec.target},
          {"candidates_us", median(candidate_us)},
          {"sort_us", median(sort_us)},
          {"select", policies}};
}

}  // namespace

int main(int argc, char** argv) {
  size_t reps = 50;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    char* end = nullptr;
    if (flag == "--reps" && i + 1 < argc) reps = std::strtoull(argv[++i], &end, 10);
    if (flag != "--reps" || end == nullptr || *end != '\0' || reps == 0) {
      std::fprintf(stderr, "usage: selection_bench [--reps R]\n");
      return 2;
    }
  }
  bool met = true;
  Json fleets = Json::array();
  for (const FleetSpec& spec : {FleetSpec{10'000, 100, 5'000}, FleetSpec{100'000, 1'000, 50'000}}) {
    fleets.push_back(run_fleet(spec, reps, met));
  }
  std::printf("targets %s\n", met ? "met" : "MISSED");
  std::cout << Json{{"bench", "selection"},
                    {"reps", reps},
                    {"fleets", fleets},
                    {"targets_met", met}}
                   .dump()
            << std::endl;
  return 0;
}
