#include "scheduling/profile.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>

using namespace fedcase;
using namespace fedcase::scheduling;

namespace {

RoundReport full_report() {
  RoundReport r;
  r.round = 3;
  r.samples = 100;
  r.loss_sum = 150;
  r.loss_sq_sum = 400;  // mean loss^2 = 4
  r.compute_s = 0.5;
  r.io_s = 0.07;
  r.cache_hits = 30;
  r.cache_misses = 70;
  r.sample_bytes = 1000;
  r.download_bytes = 1000000;
  r.download_s = 2;
  r.upload_bytes = 1000000;
  r.upload_s = 4;
  return r;
}

}  // namespace

TEST_CASE("smoothed estimates take the first observation as is, then blend by alpha") {
  Smoothed s;
  CHECK_FALSE(s.known());
  s.fold(10, 0.3);
  CHECK(s.mean == 10);
  s.fold(20, 0.3);
  CHECK(s.mean == doctest::Approx(13));
  CHECK(s.count == 2);
}

TEST_CASE("statistical utility is |B| * sqrt(mean squared loss)") {
  CHECK(statistical_utility(4, 4, 36) == doctest::Approx(12));
  CHECK(statistical_utility(0, 0, 10) == 0);
  // |B| counts distinct samples; the mean runs over every trained sample.
  CHECK(statistical_utility(3, 6, 24) == doctest::Approx(6));
  CHECK(unique_samples(500, 60) == 60);
  CHECK(unique_samples(500, 0) == 500);  // dataset size unknown
}

TEST_CASE("a completion's utility counts the distinct samples: min(samples, dataset size)") {
  ClientProfile p;
  p.id = 7;
  p.dataset_size = 60;
  RoundReport r = full_report();
  r.samples = 100;  // repetitions over a 60-sample dataset
  r.loss_sq_sum = 400;
  REQUIRE(observe_completion(p, r).ok());
  CHECK(p.utility == doctest::Approx(60 * 2));
  CHECK(p.feedback_round == r.round);
  CHECK(p.feedback_utility == p.utility);
}

TEST_CASE("an invitee not kept is explored with the round's mean utility and a duration bound") {
  ClientProfile p;
  p.id = 7;
  REQUIRE(observe_not_kept(p, {4, 135, 20}).ok());
  CHECK(p.feedback_round == 4);
  CHECK(p.feedback_utility == 135);
  CHECK(p.duration_floor_s == 20);
  CHECK(p.utility_round == 0);  // it reported nothing itself
  CHECK(p.utility == 0);
  CHECK(p.completions == 0);
  CHECK_FALSE(observe_not_kept(p, {5, -1, 20}).ok());
  CHECK_FALSE(observe_not_kept(p, {5, 1, std::nan("")}).ok());
  CHECK(p.feedback_round == 4);

  // Its next completion replaces the feedback and drops the bound.
  RoundReport r = full_report();
  r.round = 6;
  REQUIRE(observe_completion(p, r).ok());
  CHECK(p.feedback_round == 6);
  CHECK(p.feedback_utility == p.utility);
  CHECK(p.duration_floor_s == 0);

  // The stored form keeps the feedback; a profile stored before it existed takes its last
  // completion as its last feedback.
  auto back = profile_from_json(profile_to_json(p));
  REQUIRE(back.ok());
  CHECK(back->feedback_round == 6);
  nlohmann::json old = profile_to_json(p);
  old.erase("feedback_round");
  old.erase("feedback_utility");
  old.erase("duration_floor_s");
  old["utility_round"] = 3;
  auto legacy = profile_from_json(old);
  REQUIRE(legacy.ok());
  CHECK(legacy->feedback_round == 3);
  CHECK(legacy->feedback_utility == p.utility);
}

TEST_CASE("a completion folds in speeds, cache behaviour and utility") {
  ClientProfile p;
  p.id = 7;
  REQUIRE(observe_completion(p, full_report()).ok());
  CHECK(p.compute_ms_per_sample.mean == doctest::Approx(5));
  CHECK(p.download_bytes_per_s.mean == doctest::Approx(5e5));
  CHECK(p.upload_bytes_per_s.mean == doctest::Approx(2.5e5));
  CHECK(p.cache_hit_ratio.mean == doctest::Approx(0.3));
  CHECK(p.sample_bytes.mean == doctest::Approx(1000));
  CHECK(p.storage_read_bytes_per_s.mean == doctest::Approx(70 * 1000 / 0.07));
  CHECK(p.utility == doctest::Approx(200));
  CHECK(p.utility_round == 3);
  CHECK(p.completions == 1);

  RoundReport slower = full_report();
  slower.round = 4;
  slower.compute_s = 1.0;  // 10 ms per sample
  slower.loss_sq_sum = 100;
  REQUIRE(observe_completion(p, slower, ProfileParams{0.5, 90}).ok());
  CHECK(p.compute_ms_per_sample.mean == doctest::Approx(7.5));
  CHECK(p.utility == doctest::Approx(100));  // the latest utility, not smoothed
  CHECK(p.completions == 2);
}

TEST_CASE("without cache counts every sample is read from storage") {
  ClientProfile p;
  RoundReport r = full_report();
  r.cache_hits = 0;
  r.cache_misses = 0;
  r.io_s = 0.1;
  REQUIRE(observe_completion(p, r).ok());
  CHECK_FALSE(p.cache_hit_ratio.known());
  CHECK(p.storage_read_bytes_per_s.mean == doctest::Approx(100 * 1000 / 0.1));
}

TEST_CASE("a bad report is rejected and leaves the profile unchanged") {
  ClientProfile p;
  REQUIRE(observe_completion(p, full_report()).ok());
  const nlohmann::json before = profile_to_json(p);
  RoundReport r = full_report();
  r.samples = 0;
  CHECK(observe_completion(p, r).code() == Code::kInvalidArgument);
  r = full_report();
  r.compute_s = -1;
  CHECK_FALSE(observe_completion(p, r).ok());
  r = full_report();
  r.loss_sq_sum = std::numeric_limits<double>::quiet_NaN();
  CHECK_FALSE(observe_completion(p, r).ok());
  r = full_report();
  r.loss_sum = std::numeric_limits<double>::infinity();
  CHECK_FALSE(observe_completion(p, r).ok());
  CHECK(profile_to_json(p) == before);
}

TEST_CASE("registration records the device facts and probe measurements") {
  ClientProfile p;
  DeviceReport d;
  d.dataset_size = 600;
  d.cache_capacity_bytes = 1 << 20;
  d.sample_bytes = 784;
  d.compute_ms_per_sample = 3;
  REQUIRE(observe_registration(p, d).ok());
  CHECK(p.dataset_size == 600);
  CHECK(p.cache_capacity_bytes == (1 << 20));
  CHECK(p.compute_ms_per_sample.mean == 3);
  CHECK_FALSE(p.storage_read_bytes_per_s.known());
  d.compute_ms_per_sample = -2;
  CHECK_FALSE(observe_registration(p, d).ok());
  CHECK(p.compute_ms_per_sample.mean == 3);
}

TEST_CASE("heartbeats track online spells and silences") {
  ClientProfile p;
  const ProfileParams params{0.3, 90};
  CHECK_FALSE(is_online(p, 100, params));
  observe_heartbeat(p, 100, params);
  observe_heartbeat(p, 130, params);
  observe_heartbeat(p, 160, params);
  CHECK(is_online(p, 200, params));
  CHECK_FALSE(p.availability.session_s.known());
  CHECK(survival_probability(p, 1e6) == 1);

  observe_heartbeat(p, 400, params);  // silent for 240 s: the spell 100..160 ended
  CHECK(p.availability.session_s.mean == 60);
  CHECK(p.availability.offline_s.mean == 240);
  CHECK(p.availability.online_since_s == 400);
  CHECK(is_online(p, 450, params));
  CHECK_FALSE(is_online(p, 500, params));
  CHECK(survival_probability(p, 60) == doctest::Approx(std::exp(-1.0)));
  CHECK(survival_probability(p, 0) == 1);

  observe_heartbeat(p, 300, params);  // out of order: ignored
  CHECK(p.availability.last_seen_s == 400);
}

TEST_CASE("a device sleeping as steered is not available, and its sleep is not a silence") {
  ClientProfile p;
  const ProfileParams params{0.3, 90};
  observe_heartbeat(p, 100, params);
  observe_steered(p, 130, 730, params);  // sleep, back by 730
  CHECK_FALSE(is_online(p, 131, params));
  CHECK(p.availability.last_seen_s == 130);
  observe_heartbeat(p, 700, params);  // back within its window: the spell goes on
  CHECK(is_online(p, 701, params));
  CHECK_FALSE(p.availability.session_s.known());
  CHECK(p.availability.online_since_s == 100);
  CHECK(p.availability.steered_back_by_s == 0);
  observe_steered(p, 710, 800, params);
  observe_heartbeat(p, 1000, params);  // 110 s past its window: a real silence
  CHECK(p.availability.session_s.mean == 610);
  CHECK(p.availability.offline_s.mean == 290);
  CHECK(is_online(p, 1001, params));
  // Stored and read back, a sleeping device still sleeps.
  observe_steered(p, 1010, 1500, params);
  Result<ClientProfile> back = profile_from_json(profile_to_json(p));
  REQUIRE(back.ok());
  CHECK(back->availability.steered_back_by_s == 1500);
  CHECK_FALSE(is_online(*back, 1011, params));
  // Told to check in again at once (the jobs want every device): it does not sleep.
  observe_heartbeat(p, 1400, params);
  observe_steered(p, 1402, 1402, params);
  CHECK(p.availability.steered_back_by_s == 0);
  CHECK(is_online(p, 1402.5, params));
}

TEST_CASE("participation counters") {
  ClientProfile p;
  observe_selected(p, 4);
  observe_selected(p, 9);
  observe_missed_deadline(p);
  CHECK(p.last_selected_round == 9);
  CHECK(p.times_selected == 2);
  CHECK(p.missed_deadlines == 1);
}

TEST_CASE("profiles round-trip through JSON text") {
  ClientProfile p;
  p.id = 42;
  p.dataset_size = 1234;
  p.cache_capacity_bytes = 5000000;
  REQUIRE(observe_completion(p, full_report()).ok());
  observe_heartbeat(p, 1.7e9);
  observe_heartbeat(p, 1.7e9 + 1000.25);
  observe_selected(p, 3);
  observe_missed_deadline(p);
  const nlohmann::json stored = nlohmann::json::parse(profile_to_json(p).dump());
  Result<ClientProfile> back = profile_from_json(stored);
  REQUIRE(back.ok());
  CHECK(profile_to_json(*back) == profile_to_json(p));
  CHECK(back->availability.last_seen_s == p.availability.last_seen_s);
  CHECK(back->compute_ms_per_sample.mean == p.compute_ms_per_sample.mean);
}

TEST_CASE("profile_from_json validates") {
  CHECK(profile_from_json(nlohmann::json::object()).status().code() == Code::kInvalidArgument);
  CHECK_FALSE(profile_from_json(nlohmann::json::array()).ok());
  CHECK_FALSE(profile_from_json({{"id", -1}}).ok());
  CHECK_FALSE(profile_from_json({{"id", 1}, {"utility", "high"}}).ok());
  CHECK_FALSE(profile_from_json({{"id", 1}, {"times_selected", 1.5}}).ok());
  CHECK_FALSE(
      profile_from_json({{"id", 1}, {"cache_hit_ratio", {{"mean", 1.5}, {"count", 1}}}}).ok());
  CHECK_FALSE(profile_from_json({{"id", 1}, {"availability", {{"session_s", 3}}}}).ok());
  Result<ClientProfile> minimal = profile_from_json({{"id", 5}, {"added_later", true}});
  REQUIRE(minimal.ok());
  CHECK(minimal->id == 5);
  CHECK(minimal->completions == 0);
  Result<ClientProfile> bad =
      profile_from_json({{"id", 1}, {"compute_ms_per_sample", {{"mean", -3}}}});
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("profile.compute_ms_per_sample.mean") != std::string::npos);
}
