#include "scheduling/fair_share.h"

#include <doctest/doctest.h>

using namespace fedcase::scheduling;

TEST_CASE("counters grow in weighted tasks; weight 2 is charged half") {
  ServiceCounters c;
  c.set_weight(1, 1);
  c.set_weight(2, 2);
  c.charge(1, 100, 10);  // 10 tasks of 10 s
  c.charge(2, 100, 10);
  CHECK(c.counter(1) == doctest::Approx(10));
  CHECK(c.counter(2) == doctest::Approx(5));
  // A class 10x as costly is charged per task, not per second.
  c.charge(2, 1000, 100);
  CHECK(c.counter(2) == doctest::Approx(10));
  c.charge(1, -1000, 10);  // a correction never drives a counter below 0
  CHECK(c.counter(1) == 0);
  c.charge(1, 50, 0);  // no cost: nothing is charged
  CHECK(c.counter(1) == 0);
}

TEST_CASE("a tenant that becomes active again starts at the least-served active counter") {
  ServiceCounters c;
  c.set_active(1, true);
  c.set_active(2, true);
  c.charge(1, 300, 1);
  c.charge(2, 500, 1);
  c.set_active(3, true);  // new: lifted from 0 to min(300, 500)
  CHECK(c.counter(3) == doctest::Approx(300));
  c.set_active(3, false);
  c.charge(1, 400, 1);    // 700
  c.charge(2, 300, 1);    // 800
  c.set_active(3, true);  // idle time banked nothing: lifted to 700
  CHECK(c.counter(3) == doctest::Approx(700));
  // Ahead of the others already: kept, not lowered.
  c.charge(3, 1000, 1);
  c.set_active(3, false);
  c.set_active(3, true);
  CHECK(c.counter(3) == doctest::Approx(1700));
  // Nobody else active: the counter stays as it was.
  ServiceCounters alone;
  alone.charge(5, 42, 1);
  alone.set_active(5, true);
  CHECK(alone.counter(5) == doctest::Approx(42));
}

TEST_CASE("the least-served consumer's job opens first, ties by job id") {
  ServiceCounters c;
  c.charge(1, 10, 1);
  c.charge(2, 5, 1);
  std::vector<WaitingJob> waiting = {{7, 1}, {3, 1}, {9, 2}, {4, 2}};
  CHECK(waiting[next_to_open(waiting, c)].job == 4);  // tenant 2 is behind; its lower job id
  c.charge(2, 20, 1);                                 // tenant 2 got a round: now 25
  CHECK(waiting[next_to_open(waiting, c)].job == 3);
}

TEST_CASE("ten jobs of one tenant interleave with another tenant's one job") {
  // Tenant 1 has jobs 1..10, tenant 2 has job 11; each round opened is charged 1 task.
  ServiceCounters c;
  std::vector<WaitingJob> waiting;
  for (uint64_t j = 1; j <= 10; ++j) waiting.push_back({j, 1});
  waiting.push_back({11, 2});
  size_t opened_by_2 = 0;
  for (int round = 0; round < 6; ++round) {
    const size_t i = next_to_open(waiting, c);
    opened_by_2 += waiting[i].consumer == 2;
    c.charge(waiting[i].consumer, 1, 1);
  }
  CHECK(opened_by_2 == 3);  // every other opening, not one in eleven
}

TEST_CASE("a sliding window allows max events per window and says when to retry") {
  SlidingWindowLimit limit(2, 10);
  double retry = -1;
  CHECK(limit.allow(0, retry));
  CHECK(limit.allow(1, retry));
  CHECK_FALSE(limit.would_allow(5));
  CHECK_FALSE(limit.allow(5, retry));
  CHECK(retry == doctest::Approx(5));  // the event at 0 leaves at 10
  CHECK(limit.allow(10, retry));
  CHECK_FALSE(limit.allow(10.5, retry));
  CHECK(retry == doctest::Approx(0.5));
  CHECK(limit.allow(11, retry));
}

TEST_CASE("overload and Jain's index") {
  CHECK_FALSE(overloaded(100, 100));
  CHECK(overloaded(101, 100));
  CHECK(jain_index({1, 1, 1}) == doctest::Approx(1));
  CHECK(jain_index({1, 0, 0}) == doctest::Approx(1.0 / 3));
  CHECK(jain_index({}) == 1);
}

TEST_CASE("FairShare: nobody is throttled without overload") {
  FairShare share;
  TenantLimits tight;
  tight.max_running_jobs = 1;
  tight.max_submissions = 1;
  tight.max_round_starts = 1;
  share.set_tenant(1, 1, tight);
  double retry = 0;
  for (int i = 0; i < 5; ++i) CHECK(share.admit_job(1, size_t(i), /*overload=*/false, i, retry));
  std::vector<WaitingJob> waiting = {{1, 1}};
  for (int i = 0; i < 5; ++i) {
    REQUIRE(share.next_round(waiting, false, i).has_value());
    share.round_opened(1, 1, i, 10, 1);
  }
  CHECK(share.throttle_events(1) == 0);
}

TEST_CASE("FairShare: under overload, submissions and round starts beyond the limits wait") {
  FairShare share;
  TenantLimits limits;
  limits.max_running_jobs = 3;
  limits.max_submissions = 2;
  limits.submission_window_s = 60;
  limits.max_round_starts = 2;
  limits.round_window_s = 30;
  share.set_tenant(1, 1, limits);
  share.set_tenant(2, 1, TenantLimits{});
  double retry = 0;
  CHECK(share.admit_job(1, 0, true, 0, retry));
  CHECK(share.admit_job(1, 1, true, 1, retry));
  CHECK_FALSE(share.admit_job(1, 2, true, 2, retry));  // third submission within 60 s
  CHECK(retry == doctest::Approx(58));
  CHECK_FALSE(share.admit_job(1, 3, true, 100, retry));  // three running: the cap
  CHECK(share.admit_job(2, 50, true, 2, retry));         // another tenant without limits
  CHECK(share.throttle_events(1) == 2);

  std::vector<WaitingJob> waiting = {{1, 1}, {2, 2}};
  share.round_opened(1, 1, 0, 10, 10);
  share.round_opened(1, 1, 1, 10, 10);
  // Tenant 1 is over its round starts: tenant 2's job opens although its counter is higher.
  share.round_opened(2, 2, 1, 100, 10);
  auto next = share.next_round(waiting, true, 5);
  REQUIRE(next.has_value());
  CHECK(waiting[*next].job == 2);
  CHECK_FALSE(share.next_round({{1, 1}}, true, 6).has_value());
  CHECK(share.throttle_events(1) == 3);  // one held-back wait, however often it is looked at
  CHECK(share.next_round({{1, 1}}, true, 31).has_value());  // the window moved on
}

TEST_CASE("FairShare: submissions admitted without overload count in the window") {
  FairShare share;
  TenantLimits limits;
  limits.max_submissions = 2;
  limits.submission_window_s = 60;
  share.set_tenant(1, 1, limits);
  double retry = 0;
  CHECK(share.admit_job(1, 0, /*overload=*/false, 0, retry));
  CHECK(share.admit_job(1, 1, /*overload=*/false, 1, retry));
  CHECK(share.admit_job(1, 2, /*overload=*/false, 2, retry));  // window full, but no overload
  CHECK(retry == 0);
  // The overload begins: the two submissions at 0 and 1 fill the window until 60.
  CHECK_FALSE(share.admit_job(1, 3, /*overload=*/true, 3, retry));
  CHECK(retry == doctest::Approx(57));
  CHECK(share.admit_job(1, 3, /*overload=*/true, 60, retry));
  CHECK(share.throttle_events(1) == 1);
}

TEST_CASE("FairShare: charges are corrected at the conclusion; shares of client-seconds") {
  FairShare share;
  share.set_tenant(1, 1, {});
  share.set_tenant(2, 2, {});
  share.set_tenant_active(1, true);
  share.set_tenant_active(2, true);
  share.round_opened(1, 10, 0, 100, 10);  // expected 10 tasks
  share.round_opened(2, 20, 0, 100, 10);  // weight 2: 5
  share.round_concluded(1, 10, 100, 60, 10);
  share.round_concluded(2, 20, 100, 240, 10);
  const auto j = share.to_json()["tenants"];
  CHECK(j["1"]["counter"].get<double>() == doctest::Approx(6));
  CHECK(j["2"]["counter"].get<double>() == doctest::Approx(12));
  CHECK(j["1"]["share"].get<double>() == doctest::Approx(0.2));
  CHECK(j["2"]["share"].get<double>() == doctest::Approx(0.8));
  CHECK(j["2"]["client_seconds"].get<double>() == doctest::Approx(240));
}

TEST_CASE("FairShare modes: first come is by job id, per job ignores tenants") {
  std::vector<WaitingJob> waiting = {{5, 1}, {3, 1}, {9, 2}};
  FairShare first(FairShare::Mode::kFirstCome);
  first.round_opened(1, 3, 0, 1000, 1);
  CHECK(waiting[*first.next_round(waiting, true, 0)].job == 3);
  FairShare per_job(FairShare::Mode::kPerJob);
  per_job.round_opened(1, 3, 0, 10, 1);
  per_job.round_opened(2, 9, 0, 5, 1);
  CHECK(waiting[*per_job.next_round(waiting, true, 0)].job == 5);  // job 5 has no service yet
}

TEST_CASE("FairShare: under overload the least-served tenant's job holds the others back") {
  FairShare share;
  share.set_tenant(1, 1, {});
  share.set_tenant(2, 1, {});
  share.round_opened(1, 10, 0, 100, 1);  // tenant 1 has had service, tenant 2 none
  // Tenant 2's job can open (K free) but its whole invitation is not free yet.
  std::vector<WaitingJob> waiting = {{10, 1, true, true}, {20, 2, true, false}};
  CHECK_FALSE(share.next_round(waiting, /*overload=*/true, 1).has_value());
  waiting[1].fits = true;  // clients freed up and gathered for it
  CHECK(waiting[*share.next_round(waiting, true, 2)].job == 20);
  // Without overload nobody holds: whoever can open, least served first.
  waiting[1] = {20, 2, false, false};
  CHECK(waiting[*share.next_round(waiting, false, 3)].job == 10);
  // The other modes never hold either.
  FairShare per_job(FairShare::Mode::kPerJob);
  per_job.round_opened(1, 10, 0, 100, 1);
  CHECK(waiting[*per_job.next_round(waiting, true, 3)].job == 10);
  CHECK_FALSE(per_job.next_round({{20, 2, false, false}}, true, 3).has_value());
}
