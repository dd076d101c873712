// The PostgreSQL store: the Store contract (tests/storage/store_contract.h) on a database of
// its own per case, on one private server for the whole binary (tests/support/
// postgres_server.h), and what only a server has: crashes and restarts under a store, stores
// of several replicas at once, an unreachable server.

#include <doctest/doctest.h>

#include "storage/store.h"
#include "tests/storage/store_contract.h"
#include "tests/support/postgres_server.h"

using namespace fedcase;
using namespace fedcase::storage;
using nlohmann::json;
using testing::PostgresServer;

namespace {

// The schema version of this build's PostgreSQL store (kMigrations in
// storage/postgres_store.cpp), the same as SQLite's.
constexpr int kSchemaVersion = 4;

// A database of its own on the shared server, dropped at the end of the case.
class PostgresBackend : public contract::Backend {
 public:
  PostgresBackend() : server_(PostgresServer::shared()), database_(server_.create_database()) {}
  ~PostgresBackend() override { server_.drop_database(database_); }

  Result<std::unique_ptr<Store>> open() override { return open_store(url()); }
  int current_schema_version() const override { return kSchemaVersion; }
  int schema_version() override {
    return std::stoi(server_.query(database_, "SELECT version FROM schema_version"));
  }
  void set_schema_version(int version) override {
    server_.query(database_, "UPDATE schema_version SET version=" + std::to_string(version));
  }
  void rewind_schema(int version) override {
    REQUIRE(version >= 1);
    REQUIRE(version < kSchemaVersion);
    if (version < 4) {
      server_.query(database_,
                    "DROP TABLE job_leases, partials, tenant_service;"
                    "ALTER TABLE rounds DROP COLUMN target, DROP COLUMN admitting, "
                    "DROP COLUMN epoch;"
                    "ALTER TABLE updates DROP COLUMN state, DROP COLUMN replica, "
                    "DROP COLUMN expires_at");
    }
    if (version < 3) server_.query(database_, "DROP TABLE job_modules");
    if (version < 2) {
      server_.query(database_, "DROP TABLE tenants; ALTER TABLE jobs DROP COLUMN tenant_id");
    }
    set_schema_version(version);
  }
  std::optional<JobId> block_next_job_module() override {
    const JobId next = std::stoull(server_.query(
        database_,
        "SELECT COALESCE(pg_sequence_last_value(pg_get_serial_sequence('jobs', 'id')), 0) + 1"));
    // Without the foreign key's check (as a superuser may), a module of a job yet to come.
    server_.query(database_,
                  "SET session_replication_role = replica; "
                  "INSERT INTO job_modules(job_id, module) VALUES(" +
                      std::to_string(next) + ", 'stale')");
    return next;
  }

  std::string url() const { return server_.url(database_); }
  const std::string& database() const { return database_; }

 private:
  PostgresServer& server_;
  const std::string database_;
};

}  // namespace

TEST_CASE("the PostgreSQL store meets the Store contract") {
  contract::check_store_contract([] { return std::make_unique<PostgresBackend>(); });
}
