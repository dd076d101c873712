#include <doctest/doctest.h>

#include <atomic>
#include <vector>

#include "aggregation/worker_pool.h"

using namespace fedcase::aggregation;

TEST_CASE("for_ranges covers every index exactly once with aligned inner boundaries") {
  for (size_t threads : {1, 2, 3, 5}) {
    WorkerPool pool(threads);
    CHECK(pool.threads() == threads);
    for (size_t n : {0, 1, 15, 16, 1000, 65537, 100003}) {
      CAPTURE(threads);
      CAPTURE(n);
      std::vector<std::atomic<int>> hits(n);
      std::atomic<size_t> calls{0};
      pool.for_ranges(n, 1024, [&](size_t part, size_t begin, size_t end) {
        CHECK(part < threads);
        if (end != n) CHECK(end % 16 == 0);
        for (size_t i = begin; i < end; ++i) ++hits[i];
        ++calls;
      });
      for (size_t i = 0; i < n; ++i) REQUIRE(hits[i] == 1);
      CHECK(calls <= std::max<size_t>(1, n / 1024));
    }
  }
}

TEST_CASE("a pool runs many loops in a row") {
  WorkerPool pool(3);
  std::atomic<long> total{0};
  for (int round = 0; round < 2000; ++round) {
    pool.for_ranges(3 * 64, 16, [&](size_t, size_t begin, size_t end) {
      total += static_cast<long>(end - begin);
    });
  }
  CHECK(total == 2000L * 3 * 64);
  CHECK(WorkerPool(0).threads() == 1);
}
