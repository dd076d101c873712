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
  CHECK(c.order({1, 2, 3}) == std::vector<uint64_t>{3, 1, 2});
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
