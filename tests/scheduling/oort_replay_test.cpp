// Drives Oort through a seven-client, three-round trace (tests/fixtures/scheduling/
// oort_trace.csv) the way the coordinator does, K = 2 of 3 invitations, and checks each rule
// against values worked out by hand (docs/scheduling.md, "oort").
//
// Trace columns: round, client, available, dataset_size, expected_s (the coordinator's
// estimate of its task), duration_s (how long its task really takes), loss_rms (root mean
// squared loss of its update). Every task trains 100 samples.

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "scheduling/oort.h"
#include "tests/scheduling/coordinator.h"

using namespace fedcase;
using namespace fedcase::scheduling;

namespace {

constexpr size_t kClients = 7;
constexpr RoundIndex kRounds = 3;
constexpr uint64_t kBudget = 100;

struct Row {
  bool available = false;
  uint64_t dataset_size = 0;
  double expected_s = 0, duration_s = 0, loss_rms = 0;
};

std::map<RoundIndex, std::vector<Row>> load_trace() {
  std::ifstream in(FEDCASE_SOURCE_DIR "/tests/fixtures/scheduling/oort_trace.csv");
  REQUIRE(in.good());
  std::string line;
  std::getline(in, line);
  REQUIRE(line == "round,client,available,dataset_size,expected_s,duration_s,loss_rms");
  std::map<RoundIndex, std::vector<Row>> trace;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string f[7];
    for (auto& field : f) std::getline(fields, field, ',');
    std::vector<Row>& rows = trace[std::stoul(f[0])];
    rows.resize(kClients);
    Row& row = rows.at(std::stoul(f[1]) - 1);
    row.available = f[2] == "1";
    row.dataset_size = std::stoull(f[3]);
    row.expected_s = std::stod(f[4]);
    row.duration_s = std::stod(f[5]);
    row.loss_rms = std::stod(f[6]);
  }
  REQUIRE(trace.size() == kRounds);
  return trace;
}

RoundReport report_of(const Row& row) {
  RoundReport r;
  r.samples = kBudget;
  r.loss_sum = row.loss_rms * kBudget;
  r.loss_sq_sum = row.loss_rms * row.loss_rms * kBudget;
  r.compute_s = row.duration_s;
  return r;
}

// The selection feedback of an invitee the round closed without.
void check_not_kept(const ClientProfile& p, RoundIndex round, double mean_utility, double floor) {
  CAPTURE(p.id);
  CHECK(p.feedback_round == round);
  CHECK(p.feedback_utility == doctest::Approx(mean_utility));
  CHECK(p.duration_floor_s == floor);
}

double bonus(RoundIndex round, RoundIndex feedback_round) {
  return std::sqrt(0.1 * std::log(double(round)) / double(feedback_round));
}

}  // namespace

TEST_CASE("Oort replays a small trace rule by rule") {
  const auto trace = load_trace();
  auto made = make_selection_policy({{"policy", "oort"},
                                     {"overcommit", 1.5},
                                     {"exploration_start", 0.7},
                                     {"exploration_decay", 0.9},
                                     {"exploration_min", 0.3},
                                     {"explore_window", 1},
                                     {"pacer_window", 1}},
                                    11);
  REQUIRE(made.ok());
  auto& oort = dynamic_cast<OortPolicy&>(**made);
  std::vector<ClientProfile> profiles(kClients);
  for (size_t i = 0; i < kClients; ++i) {
    profiles[i].id = i + 1;
    profiles[i].dataset_size = trace.at(1)[i].dataset_size;
  }
  auto candidates_of = [&](RoundIndex round) {
    std::vector<Candidate> out;
    for (size_t i = 0; i < kClients; ++i) {
      const Row& row = trace.at(round)[i];
      out.push_back({i + 1, row.available, &profiles[i], row.expected_s,
                     unique_samples(kBudget, row.dataset_size)});
    }
    return out;
  };
  auto play = [&](RoundIndex round, const std::vector<Candidate>& candidates) {
    const std::vector<ClientId> picked = oort.select({round, 2, 1.5}, candidates);
    std::vector<testing::Arrival> arrivals;
    for (ClientId id : picked) {
      observe_selected(profiles[id - 1], round);
      const Row& row = trace.at(round)[id - 1];
      arrivals.push_back({row.duration_s, id, report_of(row)});
    }
    const RoundOutcome outcome =
        testing::conclude_replayed_round(profiles, round, picked, arrivals, 2, 1000, {});
    oort.on_round_end(outcome);
    return std::make_pair(std::set<ClientId>(picked.begin(), picked.end()), outcome);
  };
  const ClientProfile &c1 = profiles[0], &c3 = profiles[2], &c4 = profiles[3], &c5 = profiles[4];

  // Round 1: the first selection is a uniform draw (here of the only three available) and
  // leaves epsilon alone. The round closes at the second arrival (client 5, 20 s); client 3
  // (50 s) is not kept.
  {
    auto [picked, outcome] = play(1, candidates_of(1));
    CHECK(picked == std::set<ClientId>{1, 3, 5});
    CHECK(oort.save_state()["exploration"].get<double>() == doctest::Approx(0.7));
    CHECK(outcome.duration_s == 20);
    // |B| is the distinct samples: client 1 trains 100 samples of its 60, rms loss 2.
    CHECK(c1.utility == doctest::Approx(60 * 2.0));
    CHECK(c5.utility == doctest::Approx(50 * 3.0));
    // Client 3 is explored with the mean utility of the kept clients and a 20 s bound.
    check_not_kept(c3, 1, 135, 20);
    CHECK(c3.utility_round == 0);
    CHECK(oort.save_state()["window_utility"] == nlohmann::json::array({0.0}));  // nobody exploited
  }

  // Round 2: clients 1 and 3 are explored and available, 4 and 6 unexplored.
  {
    const std::vector<Candidate> candidates = candidates_of(2);
    // T: the 30th percentile of all seven known durations, available or not, client 3's
    // raised to its 20 s bound: 4 6 [10] 12 12 20 40.
    // Rewards of the eligible clients: 120 (1), 135 (3), and the unexplored clients' 100
    // distinct samples: min 100 -> 99.9, max 135, clip (95th) 135.
    const std::vector<double> s = oort.scores({2, 2, 1.5}, candidates);
    CHECK(s[0] == doctest::Approx((120 - 99.9) / 35.1 + bonus(2, 1)));             // 10 s <= T
    CHECK(s[2] == doctest::Approx((1.0 + bonus(2, 1)) * std::pow(10.0 / 20, 2)));  // bound 20 s
    CHECK(s[3] == 0);
    // Epsilon decays before use: 0.63 -> floor(3 x 0.63) = 1 explores, 2 exploit (1 and 3).
    // Exploration weighs distinct samples x (T/t)^2: client 4 100 x (10/12)^2, client 6
    // 100 x (10/40)^2; the window of 1 x 1 holds client 4 only.
    auto [picked, outcome] = play(2, candidates);
    CHECK(oort.save_state()["exploration"].get<double>() == doctest::Approx(0.63));
    CHECK(picked == std::set<ClientId>{1, 3, 4});
    // Kept: 1 (10 s, 60 x 1.5 = 90) and 4 (15 s, 100 x 1.2 = 120); client 3 again not kept.
    CHECK(outcome.duration_s == 15);
    CHECK(c4.utility == doctest::Approx(120));
    check_not_kept(c3, 2, 105, 15);
    // The pacer's entry is the mean utility of the exploited clients, client 3 counting with
    // the round's mean: (90 + 105) / (2 + 1e-4). Against the empty first round that is a jump
    // over 5x: the percentile tightens from 30 to 25.
    const nlohmann::json state = oort.save_state();
    CHECK(state["window_utility"][1].get<double>() == doctest::Approx(195 / 2.0001));
    CHECK(state["pacer_percentile"] == 25);
  }

  // Round 3: clients 1, 4 and 5 are available, all explored: exploitation fills the
  // invitation exploration cannot.
  {
    const std::vector<Candidate> candidates = candidates_of(3);
    // T at the 25th percentile: 4 [6] 10 12 15 15 40 (client 3's 8 s raised to 15).
    // Rewards 90 (1), 120 (4), 150 (5): min 89.91, max 150, clip 150. Client 5's staleness
    // counts from its last feedback, round 1.
    const std::vector<double> s = oort.scores({3, 2, 1.5}, candidates);
    const double range = 150 - 89.91;
    CHECK(s[0] == doctest::Approx(((90 - 89.91) / range + bonus(3, 2)) * std::pow(6.0 / 10, 2)));
    CHECK(s[3] == doctest::Approx(((120 - 89.91) / range + bonus(3, 2)) * std::pow(6.0 / 15, 2)));
    CHECK(s[4] == doctest::Approx((1.0 + bonus(3, 1)) * std::pow(6.0 / 12, 2)));
    auto [picked, outcome] = play(3, candidates);
    CHECK(oort.save_state()["exploration"].get<double>() == doctest::Approx(0.567));
    CHECK(picked == std::set<ClientId>{1, 4, 5});
    // Client 5 (30 s) is not kept: its own report stays, its feedback is the mean of 90 and
    // 110.
    CHECK(c5.utility == doctest::Approx(150));
    CHECK(c5.utility_round == 1);
    check_not_kept(c5, 3, 100, 15);
    // (90 + 110 + 100) / 3.0001 is within 10% of the last window: T relaxes back to 30.
    const nlohmann::json state = oort.save_state();
    CHECK(state["window_utility"][1].get<double>() == doctest::Approx(300 / 3.0001));
    CHECK(state["pacer_percentile"] == 30);
  }
}
