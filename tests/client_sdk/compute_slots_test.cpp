#include "client_sdk/compute_slots.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace fedcase::client {
namespace {

TEST_CASE("at most as many holders as slots run at once, and every one gets its turn") {
  for (size_t slots : {1, 2, 3}) {
    CAPTURE(slots);
    ComputeSlots gate(slots);
    std::atomic<int> running{0}, most{0}, done{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
      threads.emplace_back([&] {
        ComputeSlots::Hold hold(gate);
        const int now = ++running;
        int seen = most.load();
        while (now > seen && !most.compare_exchange_weak(seen, now)) {
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        --running;
        ++done;
      });
    }
    for (auto& t : threads) t.join();
    CHECK(done == 8);
    CHECK(most.load() <= int(slots));
    CHECK(most.load() >= 1);
  }
}

TEST_CASE("zero slots count as one") {
  ComputeSlots gate(0);
  ComputeSlots::Hold first(gate);  // does not wait forever
  CHECK(true);
}

}  // namespace
}  // namespace fedcase::client
