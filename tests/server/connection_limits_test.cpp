// The front end's admission limits as pure logic: connections per address and body slots.

#include "server/transport/connection_limits.h"

#include <doctest/doctest.h>

#include <vector>

namespace fedcase::server {
namespace {

TEST_CASE("an address gets at most its limit of leases, and a closed one frees a place") {
  AddressConnections connections(2);
  auto a = connections.open("10.0.0.1");
  auto b = connections.open("10.0.0.1");
  REQUIRE(a);
  REQUIRE(b);
  CHECK_FALSE(connections.open("10.0.0.1"));
  CHECK(connections.open("10.0.0.2"));  // another address is counted apart
  b.reset();
  CHECK(connections.open("10.0.0.1"));
}

TEST_CASE("body slots go to waiters in arrival order, skipping those that gave up") {
  BodySlots slots(1, 0);
  std::vector<int> granted;
  CHECK(slots.acquire([] { return true; }));  // free: taken at once
  bool second_gave_up = true;
  CHECK_FALSE(slots.acquire([&] {
    granted.push_back(2);
    return !second_gave_up;
  }));
  CHECK_FALSE(slots.acquire([&] {
    granted.push_back(3);
    return true;
  }));
  slots.release();  // the second declines, so the third gets it
  CHECK(granted == std::vector<int>{2, 3});
  slots.release();  // nobody waits: the slot is free again
  CHECK(slots.acquire([] { return true; }));
  CHECK_FALSE(slots.acquire([] { return true; }));
}

TEST_CASE("body slots keep at most one buffer per slot, with its last body, none too large") {
  BodySlots slots(2, size_t(2) << 20);
  CHECK(slots.take_buffer().capacity() < 1000);  // none kept yet: a new, empty one
  std::vector<std::string> bodies;
  for (int i = 0; i < 3; ++i) bodies.emplace_back(size_t(1) << 20, char('a' + i));
  for (auto& b : bodies) slots.keep_buffer(std::move(b));  // the third is freed
  std::string kept;
  for (int i = 0; i < 2; ++i) {
    std::string b = slots.take_buffer();
    CHECK(b.size() == size_t(1) << 20);
    kept += b[0];
  }
  CHECK(kept == "ba");
  CHECK(slots.take_buffer().capacity() < 1000);
  // A body larger than any upload's (a job's model file) is freed, not kept resident.
  slots.keep_buffer(std::string(size_t(3) << 20, 'm'));
  CHECK(slots.take_buffer().capacity() < 1000);
}

}  // namespace
}  // namespace fedcase::server
