#pragma once
// The contract every storage::Store backend must meet, written once and run against each
// backend: every method of storage/store.h with its documented errors, the atomicity of
// create_job and commit_round, durability across reopening, schema migrations (an older
// database migrates, a newer one is refused, several openers migrate an empty one once),
// readers and writers at the same time, and what replicas share (cluster_contract.cpp):
// leases and fenced writes, admission, partial aggregates, tenants' service, wake-ups.
//
// A backend's test gives a factory of fresh, empty databases and calls check_store_contract
// from one doctest test case:
//
//   TEST_CASE("the SQLite store meets the Store contract") {
//     storage::contract::check_store_contract([] { return std::make_unique<SqliteBackend>(); });
//   }
//
// Each case runs as a doctest subcase of that test case, on a database of its own. Failures
// are doctest assertions; the hooks below may use doctest's REQUIRE too.

#include <functional>
#include <memory>
#include <optional>

#include "common/ids.h"
#include "common/status.h"
#include "storage/store.h"

namespace fedcase::storage::contract {

// One empty database of the backend under test, made for one case and dropped (with what it
// holds) when the case ends. Used from the case's thread, but open() also from several threads
// at once (replicas starting together); the stores it opens are used from several threads.
class Backend {
 public:
  virtual ~Backend() = default;

  // A new store on this database, which the caller owns. Stores opened before may still be
  // open: the new one is another connection, as a second process or replica would have.
  virtual Result<std::unique_ptr<Store>> open() = 0;

  // The schema version this build's store migrates a database to (at least 1); 0 for a
  // backend that keeps no schema (in memory), whose cases of migrations are then skipped and
  // which need not implement set_schema_version and rewind_schema.
  virtual int current_schema_version() const = 0;
  // The schema version the database records (0 without a schema). No store need be open.
  virtual int schema_version() = 0;
  // Records `version` as the database's schema version and changes nothing else, as a
  // coordinator of that version would have left it. Called with no store open.
  virtual void set_schema_version(int version) = 0;
  // Turns the database into what a coordinator of schema `version` (1 <= version <
  // current_schema_version()) would have left with the same records: what later versions
  // added (tables, columns) is dropped with what it held, and `version` is recorded. Called
  // with no store open.
  virtual void rewind_schema(int version) = 0;

  // Puts a stale module where the next job's module would go, so that the next create_job
  // with a module fails after its job and model rows are written; returns the id that job
  // would have had. nullopt when the backend has no way to (the case is then skipped).
  virtual std::optional<JobId> block_next_job_module() { return std::nullopt; }
};

// Makes a Backend over a fresh, empty database; called once or more per case.
using BackendFactory = std::function<std::unique_ptr<Backend>()>;

// Runs every case of the contract against databases from `factory`, each as a subcase of the
// calling doctest test case, named after what it checks.
void check_store_contract(const BackendFactory& factory);

}  // namespace fedcase::storage::contract
