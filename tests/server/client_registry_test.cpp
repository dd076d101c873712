// Replicas sharing one database learn of each other's clients from what changed: two
// registries over two stores on one SQLite file, as two replicas over one database.

#include "server/core/base/client_registry.h"

#include <doctest/doctest.h>

#include <map>

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

// Two replicas' registries, over two stores on one SQLite file.
struct TwoReplicas {
  testing::TempDir dir;
  std::unique_ptr<storage::Store> store_a = open(dir);
  std::unique_ptr<storage::Store> store_b = open(dir);
  ClientRegistry a{*store_a, {}};
  ClientRegistry b{*store_b, {}};
};

}  // namespace

TEST_CASE_FIXTURE(TwoReplicas, "a replica reads registrations and contact batches since its last reading, not the fleet") {
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

  // Contacts the other replica saved, however many: one batch row, its contacts taken as
  // heartbeats.
  constexpr size_t kContacts = 1000;
  for (ClientId id = 1; id < kContacts; ++id) REQUIRE(a.touch(id, 500.0).ok());
  REQUIRE(a.touch(added->id, 500.0).ok());
  a.flush();
  REQUIRE(b.refresh().ok());
  CHECK(b.rows_read() == kFleet + 2);
  CHECK(b.census(500.0).available == kContacts);
  REQUIRE(b.refresh().ok());
  CHECK(b.rows_read() == kFleet + 2);
  // A client the other replica told to sleep sleeps here too, from the next batch.
  REQUIRE(a.steer(5, 510.0, 700.0).ok());
  a.flush();
  REQUIRE(b.refresh().ok());
  CHECK(b.rows_read() == kFleet + 3);
  CHECK(b.census(510.0).available == kContacts - 1);
}

TEST_CASE_FIXTURE(TwoReplicas, "a save of many contacts goes a page of clients at a time, one batch each") {
  constexpr size_t kFleet = 2 * ClientRegistry::kSavePage + 500;
  for (size_t i = 0; i < kFleet; ++i) REQUIRE(a.register_client(device(100), 1.0).ok());
  REQUIRE(b.load().ok());
  for (ClientId id = 1; id <= kFleet; ++id) REQUIRE(a.touch(id, 500.0).ok());
  a.flush();
  CHECK_FALSE(a.has_unsaved());
  auto batches = store_a->contacts_after(0, 10);
  REQUIRE(batches.ok());
  REQUIRE(batches->size() == 3);
  size_t saved = 0;
  for (const storage::ContactBatch& batch : *batches) {
    CHECK(batch.contacts.size() <= ClientRegistry::kSavePage);
    saved += batch.contacts.size();
  }
  CHECK(saved == kFleet);
  REQUIRE(b.refresh().ok());
  CHECK(b.census(500.0).available == kFleet);
}

TEST_CASE_FIXTURE(TwoReplicas, "a replica that missed dropped contact batches takes the contacts from the rows") {
  for (int i = 0; i < 3; ++i) REQUIRE(a.register_client(device(100), 1.0).ok());
  REQUIRE(b.load().ok());
  REQUIRE(a.touch(1, 500.0).ok());
  a.flush();
  REQUIRE(b.refresh().ok());
  // Two saves later, the second past the time batches are kept: client 2's batch is dropped
  // before b reads it.
  REQUIRE(a.touch(2, 600.0).ok());
  a.flush();
  REQUIRE(a.touch(3, 601.0 + storage::Store::kContactBatchesKeptS).ok());
  a.flush();
  REQUIRE(b.refresh().ok());
  std::map<ClientId, double> last_seen;
  for (const ClientSnapshot& c : b.snapshot(2000.0)) last_seen[c.record.id] = c.record.last_seen;
  CHECK(last_seen.at(1) == 500.0);
  CHECK(last_seen.at(2) == 600.0);
  CHECK(last_seen.at(3) == 601.0 + storage::Store::kContactBatchesKeptS);
}

TEST_CASE("available: heard from within the offline gap and not told to sleep") {
  testing::TempDir dir;
  auto store = open(dir);
  scheduling::ProfileParams params;
  params.offline_gap_s = 90;
  ClientRegistry clients(*store, params);
  std::vector<ClientId> ids;
  for (size_t i = 0; i < 5; ++i) {
    protocol::Registration r = device(100 + i);
    if (i == 2) r.labels = {{"region", "eu"}};
    auto added = clients.register_client(r, 10.0);
    REQUIRE(added.ok());
    ids.push_back(added->id);
  }
  // available_count() agrees with the census wherever it is asked.
  auto available = [&](double now) {
    const size_t count = clients.census(now).available;
    CHECK(clients.available_count(now) == count);
    return count;
  };
  CHECK(available(10.0) == 5);
  CHECK(available(100.0) == 5);  // the gap's last instant
  CHECK(available(100.5) == 0);

  // Heard from again; one of them is told to sleep until 300, another checks in later.
  REQUIRE(clients.touch(ids[0], 150.0).ok());
  REQUIRE(clients.touch(ids[1], 150.0).ok());
  REQUIRE(clients.steer(ids[1], 150.0, 300.0).ok());
  REQUIRE(clients.touch(ids[2], 200.0).ok());
  // Told to sleep until a time already past: that changes nothing, it stays available.
  REQUIRE(clients.touch(ids[3], 200.0).ok());
  REQUIRE(clients.steer(ids[3], 200.0, 150.0).ok());
  CHECK(available(200.0) == 3);
  const ClientRegistry::Eligible free = clients.eligible(200.0, {}, {ids[0]});
  CHECK(free.available == 3);
  CHECK(free.free == 2);
  const ClientRegistry::Eligible eu = clients.eligible(200.0, {{"region", "eu"}}, {});
  CHECK(eu.available == 1);
  CHECK(eu.free == 1);
  CHECK(clients.eligible(200.0, {{"region", "us"}}, {}).available == 0);
  CHECK(available(260.0) == 2);  // ids[0]'s gap lapsed

  // The sleeper checks in: available again, until its own gap lapses; a contact older than the
  // last one changes nothing.
  REQUIRE(clients.touch(ids[1], 280.0).ok());
  REQUIRE(clients.touch(ids[2], 100.0).ok());
  CHECK(available(285.0) == 3);
  CHECK(available(295.0) == 1);
  CHECK(available(400.0) == 0);
  // Contacts long after every other lapsed leave the census right.
  REQUIRE(clients.touch(ids[3], 1000.0).ok());
  REQUIRE(clients.touch(ids[4], 1001.0).ok());
  CHECK(available(1001.0) == 2);
  CHECK(clients.census(1001.0).registered == 5);
}

TEST_CASE("a client's utility rank follows its completions, one at a time or many at once") {
  testing::TempDir dir;
  auto store = open(dir);
  ClientRegistry clients(*store, scheduling::ProfileParams{});
  std::vector<ClientId> ids;
  for (size_t i = 0; i < 4; ++i) {
    auto added = clients.register_client(device(1000), 10.0);
    REQUIRE(added.ok());
    ids.push_back(added->id);
  }
  // A completion whose losses give utility samples * |loss|: client i reports loss i + 1.
  auto completed = [&](ClientId id, RoundIndex round, double loss) {
    rounds::ProfileChange change;
    change.kind = rounds::ProfileChange::Kind::kCompleted;
    change.client = id;
    change.round = round;
    change.report.round = round;
    change.report.samples = 100;
    change.report.loss_sum = 100 * loss;
    change.report.loss_sq_sum = 100 * loss * loss;
    change.report.compute_s = 1;
    return change;
  };
  CHECK(clients.utility_rank(ids[0]) == 0.5);  // none reported yet
  clients.apply({completed(ids[0], 1, 1), completed(ids[1], 1, 2), completed(ids[2], 1, 3)});
  CHECK(clients.utility_rank(ids[0]) == doctest::Approx(0.5 / 3));
  CHECK(clients.utility_rank(ids[2]) == doctest::Approx(2.5 / 3));
  CHECK(clients.utility_rank(ids[3]) == 0.5);
  // Client 0 becomes the most useful, then 3 joins below everyone: each value moves alone.
  clients.apply({completed(ids[0], 2, 4)});
  CHECK(clients.utility_rank(ids[0]) == doctest::Approx(2.5 / 3));
  CHECK(clients.utility_rank(ids[1]) == doctest::Approx(0.5 / 3));
  clients.apply({completed(ids[3], 2, 0.5)});
  CHECK(clients.utility_rank(ids[3]) == doctest::Approx(0.5 / 4));
  CHECK(clients.utility_rank(ids[0]) == doctest::Approx(3.5 / 4));
  // A client's second completion in one batch replaces its first.
  clients.apply({completed(ids[1], 3, 5), completed(ids[1], 3, 0.1)});
  CHECK(clients.utility_rank(ids[1]) == doctest::Approx(0.5 / 4));
  CHECK(clients.utility_rank(ids[3]) == doctest::Approx(1.5 / 4));
}
