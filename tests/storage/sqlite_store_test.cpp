// The SQLite store: the Store contract (tests/storage/store_contract.h) over a file in a temp
// dir, and what only SQLite has: its WAL, its schema's history as files of older versions
// hold it, and file handling.

#include <doctest/doctest.h>
#include <sqlite3.h>

#include <filesystem>

#include "storage/store.h"
#include "tests/storage/store_contract.h"
#include "tests/support/temp_dir.h"

using namespace fedcase;
using namespace fedcase::storage;
using nlohmann::json;

namespace {

// The schema version of this build's SQLite store (kMigrations in storage/sqlite_store.cpp).
// A new migration raises it and teaches SqliteBackend::rewind_schema to undo it.
constexpr int kSchemaVersion = 11;

std::unique_ptr<Store> open(const std::string& path) {
  auto s = open_sqlite_store(path);
  REQUIRE_MESSAGE(s.ok(), s.status().to_string());
  return std::move(s).value();
}

ModelRecord model(uint64_t version, const std::string& blob) {
  return {0, version, blob, "sum-" + blob, "opt-" + blob, 1.0 + version};
}

// Runs `sql` directly on the database file, outside any store.
void exec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  const std::string message = err ? err : "";
  sqlite3_free(err);
  sqlite3_close(db);
  REQUIRE_MESSAGE(rc == SQLITE_OK, sql << ": " << message);
}

// Runs `sql` directly on the database file and returns the first column of the first row.
int64_t scalar(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
  int64_t v = sqlite3_column_int64(stmt, 0);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return v;
}

// As scalar, the first column as text.
std::string text(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  REQUIRE(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK);
  REQUIRE(sqlite3_step(stmt) == SQLITE_ROW);
  const unsigned char* v = sqlite3_column_text(stmt, 0);
  std::string out = v ? reinterpret_cast<const char*>(v) : "";
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

// A database file in a temp dir of its own, opened through its URL.
class SqliteBackend : public contract::Backend {
 public:
  Result<std::unique_ptr<Store>> open() override { return open_store("sqlite:" + path_); }
  int current_schema_version() const override { return kSchemaVersion; }
  int schema_version() override { return static_cast<int>(scalar(path_, "PRAGMA user_version")); }
  void set_schema_version(int version) override {
    exec(path_, "PRAGMA user_version=" + std::to_string(version));
  }
  void rewind_schema(int version) override {
    REQUIRE(version >= 1);
    REQUIRE(version < kSchemaVersion);
    if (version < 11) exec(path_, "DROP TABLE contact_batches");
    if (version < 10) exec(path_, "DROP TABLE used_keys");
    if (version < 9) {
      exec(path_, "DROP INDEX clients_by_change; ALTER TABLE clients DROP COLUMN change_seq");
    }
    if (version < 8) {
      // The contract's models are one piece each: back into models.blob.
      exec(path_,
          "UPDATE models SET blob=(SELECT c.data FROM model_pieces p JOIN model_chunks c ON "
          "c.sha256=p.chunk WHERE p.job_id=models.job_id AND p.version=models.version AND "
          "p.idx=0); DROP TABLE model_pieces; DROP TABLE model_chunks; DROP TABLE uploads; "
          "DROP TABLE upload_chunks");
    }
    if (version < 7) {
      exec(path_,
           "ALTER TABLE rounds DROP COLUMN admitted;"
           "ALTER TABLE updates ADD COLUMN state TEXT NOT NULL DEFAULT 'accepted';"
           "ALTER TABLE updates ADD COLUMN expires_at REAL NOT NULL DEFAULT 0");
    }
    if (version < 6) exec(path_, "DROP TABLE stage_messages");
    if (version < 5) exec(path_, "ALTER TABLE rounds DROP COLUMN plan");
    if (version < 4) {
      exec(path_,
           "DROP TABLE job_leases; DROP TABLE partials; DROP TABLE tenant_service;"
           "ALTER TABLE rounds DROP COLUMN target; ALTER TABLE rounds DROP COLUMN admitting;"
           "ALTER TABLE rounds DROP COLUMN epoch; ALTER TABLE updates DROP COLUMN state;"
           "ALTER TABLE updates DROP COLUMN replica; ALTER TABLE updates DROP COLUMN expires_at");
    }
    if (version < 3) exec(path_, "DROP TABLE job_modules");
    if (version < 2) exec(path_, "DROP TABLE tenants; ALTER TABLE jobs DROP COLUMN tenant_id");
    set_schema_version(version);
  }
  std::optional<JobId> block_next_job_module() override {
    const JobId next = static_cast<JobId>(scalar(
        path_, "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name='jobs'), 0) + 1"));
    exec(path_,
         "INSERT INTO job_modules(job_id, module) VALUES(" + std::to_string(next) + ", 'stale')");
    return next;
  }

 private:
  testing::TempDir dir_;
  const std::string path_ = dir_.file("fedcase.db");
};

}  // namespace

TEST_CASE("the SQLite store meets the Store contract") {
  contract::check_store_contract([] { return std::make_unique<SqliteBackend>(); });
}

TEST_CASE("writes go to the WAL, and a concluded round is in it") {
  testing::TempDir dir;
  const std::string path = dir.file("fedcase.db");
  auto store = open(path);
  auto job = store->create_job({0, "j", json::object(), JobState::kRunning, json::object(), 0},
                               model(0, "m0"), "");
  REQUIRE(job.ok());
  auto client = store->add_client({0, "hash", json::object(), json::object(), 0, 0});
  REQUIRE(client.ok());
  REQUIRE(store->open_round({*job, 1, RoundState::kOpen, 0, {*client}, 0, 10, 0, {}}).ok());
  REQUIRE(store->admit_update({*job, 1, *client, {{"samples", 1}}, 5}).ok());
  REQUIRE(store->fail_round({*job, 1, RoundState::kFailed, 0, {}, 0, 10, 11, {}}).ok());
  CHECK(text(path, "PRAGMA journal_mode") == "wal");  // kept in the file
  CHECK(std::filesystem::exists(path + "-wal"));
  CHECK(scalar(path, "SELECT COUNT(*) FROM updates") == 1);
  CHECK(scalar(path, "SELECT COUNT(*) FROM rounds WHERE state='failed'") == 1);
}

TEST_CASE("the schema version is PRAGMA user_version") {
  testing::TempDir dir;
  std::string path = dir.file("fedcase.db");
  { open(path); }
  CHECK(scalar(path, "PRAGMA user_version") == kSchemaVersion);
  exec(path, "PRAGMA user_version=99");
  auto s = open_sqlite_store(path);
  CHECK(s.status().code() == Code::kInvalidArgument);
  CHECK(s.status().message().find("newer") != std::string::npos);
}

TEST_CASE("a version-1 database, as version 1 wrote it, gains tenants, modules and leases") {
  testing::TempDir dir;
  const std::string path = dir.file("fedcase.db");
  // The tables as schema version 1 had them, with one job.
  exec(path,
       "CREATE TABLE clients (id INTEGER PRIMARY KEY AUTOINCREMENT, token_hash TEXT NOT NULL "
       "UNIQUE, info TEXT NOT NULL, profile TEXT NOT NULL, registered_at REAL NOT NULL, "
       "last_seen REAL NOT NULL);"
       "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT "
       "NULL, config TEXT NOT NULL, state TEXT NOT NULL, policy_state TEXT NOT "
       "NULL, created_at REAL NOT NULL);"
       "CREATE TABLE rounds (job_id INTEGER NOT NULL REFERENCES jobs(id), idx INTEGER NOT NULL, "
       "state TEXT NOT NULL, base_version INTEGER NOT NULL, selected TEXT NOT NULL, opened_at "
       "REAL NOT NULL, deadline REAL NOT NULL, closed_at REAL NOT NULL, metrics TEXT NOT NULL, "
       "PRIMARY KEY (job_id, idx));"
       "CREATE TABLE updates (job_id INTEGER NOT NULL, round_idx INTEGER NOT NULL, client_id "
       "INTEGER NOT NULL REFERENCES clients(id), meta TEXT NOT NULL, received_at REAL NOT NULL, "
       "PRIMARY KEY (job_id, round_idx, client_id), FOREIGN KEY (job_id, round_idx) REFERENCES "
       "rounds(job_id, idx));"
       "CREATE TABLE models (job_id INTEGER NOT NULL REFERENCES jobs(id), version INTEGER NOT "
       "NULL, blob BLOB NOT NULL, checksum TEXT NOT NULL, optimizer_state BLOB NOT NULL, "
       "created_at REAL NOT NULL, PRIMARY KEY (job_id, version));"
       "INSERT INTO jobs(name, config, state, policy_state, created_at) "
       "VALUES('old', '{}', 'running', '{}', 1.0);"
       "PRAGMA user_version=1;");
  auto store = open(path);
  CHECK(scalar(path, "PRAGMA user_version") == kSchemaVersion);
  auto jobs = store->list_jobs();
  REQUIRE(jobs.ok());
  REQUIRE(jobs->size() == 1);
  CHECK(jobs->at(0).name == "old");
  CHECK(jobs->at(0).tenant == 0);
  CHECK(store->list_tenants()->empty());
  CHECK(store->get_job_module(jobs->at(0).id).status().code() == Code::kNotFound);
  auto leases = store->list_leases();
  REQUIRE(leases.ok());
  REQUIRE(leases->size() == 1);
  CHECK(leases->at(0).job == jobs->at(0).id);
  CHECK(leases->at(0).epoch == kUnleased);
  CHECK(store->set_job_state(jobs->at(0).id, JobState::kPaused, kUnleased).ok());
}

TEST_CASE("a corrupt row is kInternal, never a crash") {
  testing::TempDir dir;
  const std::string path = dir.file("fedcase.db");
  auto store = open(path);
  auto job = store->create_job({0, "j", json::object(), JobState::kRunning, json::object(), 0},
                               model(0, "m0"), "");
  REQUIRE(job.ok());
  exec(path, "UPDATE jobs SET config='{not json'");
  CHECK(store->get_job(*job).status().code() == Code::kInternal);
  exec(path, "UPDATE jobs SET config='{}', state='sleeping'");
  CHECK(store->list_jobs().status().code() == Code::kInternal);
}

TEST_CASE("an unusable path gives a clear error, for the log only") {
  auto s = open_sqlite_store("/nonexistent-dir/x/fedcase.db");
  CHECK(s.status().code() == Code::kInternal);
  CHECK(s.status().message() == "the database failed");
  CHECK(s.status().detail().find("cannot open database /nonexistent-dir/x/fedcase.db") !=
        std::string::npos);
}

TEST_CASE("migration 7 drops reservations, keeps accepted updates and counts them") {
  testing::TempDir dir;
  const std::string path = dir.file("fedcase.db");
  JobId job = 0;
  ClientId a = 0, b = 0;
  {
    auto store = open(path);
    job = *store->create_job({0, "j", json::object(), JobState::kRunning, json::object(), 0},
                             model(0, "m0"), "");
    a = *store->add_client({0, "hash-a", json::object(), json::object(), 0, 0});
    b = *store->add_client({0, "hash-b", json::object(), json::object(), 0, 0});
    RoundRecord round{job, 1, RoundState::kOpen, 0, {a, b}, 0, 10, 0, json::object()};
    round.target = 2;
    REQUIRE(store->open_round(round).ok());
    REQUIRE(store->admit_update({job, 1, a, {{"samples", 1}}, 5, "r1"}).ok());
  }
  // As schema 6 left it: b's place reserved, a's update accepted, no counter.
  exec(path,
       "DROP TABLE contact_batches; DROP TABLE used_keys;"
       "DROP INDEX clients_by_change; ALTER TABLE clients DROP COLUMN change_seq;"
       "UPDATE models SET blob=(SELECT c.data FROM model_pieces p JOIN model_chunks c ON "
       "c.sha256=p.chunk WHERE p.job_id=models.job_id AND p.version=models.version);"
       "DROP TABLE model_pieces; DROP TABLE model_chunks; DROP TABLE uploads;"
       "DROP TABLE upload_chunks;"
       "ALTER TABLE rounds DROP COLUMN admitted;"
       "ALTER TABLE updates ADD COLUMN state TEXT NOT NULL DEFAULT 'accepted';"
       "ALTER TABLE updates ADD COLUMN expires_at REAL NOT NULL DEFAULT 0;"
       "INSERT INTO updates(job_id, round_idx, client_id, meta, received_at, replica, state, "
       "expires_at) VALUES(" +
           std::to_string(job) + ", 1, " + std::to_string(b) +
           ", '{}', 0, 'r2', 'reserved', 1e12);"
           "PRAGMA user_version=6;");
  auto store = open(path);
  auto updates = store->list_updates(job, 1);
  REQUIRE(updates.ok());
  REQUIRE(updates->size() == 1);
  CHECK(updates->at(0).client == a);
  CHECK(store->list_rounds(job)->at(0).admitted == 1);
  CHECK(*store->admit_update({job, 1, b, {}, 6, "r2"}));  // the second of 2 fills the round
}

TEST_CASE("a version stores only the pieces of its model that earlier versions did not") {
  testing::TempDir dir;
  const std::string path = dir.file("fedcase.db");
  auto store = open(path);
  // Four pieces of 1 MiB that differ; the next version changes a byte of the last one (a
  // model whose frozen tensors come first and whose trained head comes last).
  std::string blob(4u << 20, '\0');
  for (size_t i = 0; i < blob.size(); i += 1024) blob[i] = char(i >> 20);
  std::string next = blob;
  next[next.size() - 1] = 7;
  const JobId job = *store->create_job(
      {0, "j", json::object(), JobState::kRunning, json::object(), 0}, model(0, blob), "");
  REQUIRE(store->open_round({job, 1, RoundState::kOpen, 0, {}, 0, 10, 0, json::object()}).ok());
  ModelRecord v1 = model(1, next);
  v1.job = job;
  REQUIRE(store->commit_round({job, 1, RoundState::kOpen, 0, {}, 0, 10, 20, json::object()}, v1,
                              json::object())
              .ok());
  CHECK(scalar(path, "SELECT COUNT(*) FROM model_pieces") == 8);
  CHECK(scalar(path, "SELECT COUNT(*) FROM model_chunks") == 5);
  CHECK(scalar(path, "SELECT SUM(length(data)) FROM model_chunks") == int64_t(5) << 20);
  CHECK(store->get_model(job, 1)->blob == next);
  CHECK(store->get_model(job, 0)->blob == blob);
}
