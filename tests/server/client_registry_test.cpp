// Replicas sharing one database learn of each other's clients from what changed: two
// registries over two stores on one SQLite file, as two replicas over one database.

#include "server/core/base/client_registry.h"

#include <doctest/doctest.h>

#include "common/crypto.h"
#include "storage/store.h"
#include "tests/support/temp_dir.h"

using namespace fedcase;
using namespace fedcase::server;

namespace {

std::unique_ptr<storage::Store> open(const testing::TempDir& dir) {
  auto store = storage::open_store(dir.file("fedcase.db"));
  REQUIRE_MESSAGE(store.ok(), store.status().to_string());
  return std::move(store).value();
}

protocol::Registration device(uint64_t samples) {
  protocol::Registration r;
  r.sdk_version = "fedcase-sdk/1";
  r.dataset_size = samples;
  return r;
}

}  // namespace

TEST_CASE("a replica reads the clients that changed since its last reading, not the fleet") {
  testing::TempDir dir;
  auto store_a = open(dir);
  auto store_b = open(dir);
  ClientRegistry a(*store_a, {});
  ClientRegistry b(*store_b, {});
  constexpr size_t kFleet = 2000;
  for (size_t i = 0; i < kFleet; ++i) REQUIRE(a.register_client(device(100 + i), 1.0).ok());
  REQUIRE(b.load().ok());
  CHECK(b.rows_read() == kFleet);
  CHECK(b.census(1.0).registered == kFleet);

  // Nothing changed: nothing is read, however large the fleet.
  REQUIRE(b.refresh().ok());
  REQUIRE(b.refresh().ok());
  CHECK(b.rows_read() == kFleet);

  // One client registered through the other replica: one row read, and it is known.
  auto added = a.register_client(device(7), 2.0);
  REQUIRE(added.ok());
  REQUIRE(b.refresh().ok());
  CHECK(b.rows_read() == kFleet + 1);
  CHECK(b.census(2.0).registered == kFleet + 1);
  CHECK(b.identify(sha256_hex(added->token)) == added->id);

  // Contacts the other replica saved: the rows of those clients, taken as heartbeats.
  for (ClientId id : {ClientId(3), ClientId(5), added->id}) REQUIRE(a.touch(id, 500.0).ok());
  a.flush();
  REQUIRE(b.refresh().ok());
  CHECK(b.rows_read() == kFleet + 4);
  CHECK(b.census(500.0).available == 3);
  REQUIRE(b.refresh().ok());
  CHECK(b.rows_read() == kFleet + 4);
}
