#include <doctest/doctest.h>
#include <sqlite3.h>

#include "storage/store.h"
#include "tests/support/temp_dir.h"

using namespace fedcase;
using namespace fedcase::storage;
using nlohmann::json;

namespace {

std::unique_ptr<Store> open(const std::string& path) {
  auto s = open_sqlite_store(path);
  REQUIRE_MESSAGE(s.ok(), s.status().to_string());
  return std::move(s).value();
}

ModelRecord model(uint64_t version, const std::string& blob) {
  return {0, version, blob, "sum-" + blob, "opt-" + blob, 1.0 + version};
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

}  // namespace

TEST_CASE("clients, jobs, rounds and models persist across reopening") {
  testing::TempDir dir;
  std::string path = dir.file("fedcase.db");
  JobId job = 0;
  ClientId client = 0;
  {
    auto store = open(path);
    auto c = store->add_client({0, "hash-a", {{"device", "phone"}}, json::object(), 10, 10});
    REQUIRE(c.ok());
    client = *c;
    CHECK(store->add_client({0, "hash-a", {}, {}, 0, 0}).status().code() == Code::kConflict);
    ClientRecord seen{client, "", {}, {{"speed", 3}}, 0, 20};
    REQUIRE(store->update_clients({seen}).ok());
    ClientRecord faster{client, "", {}, {{"speed", 5}}, 0, 30};
    ClientRecord unknown{999, "", {}, {{"speed", 4}}, 0, 30};
    CHECK(store->update_clients({faster, unknown}).code() == Code::kNotFound);  // all or nothing

    auto j = store->create_job({0, "demo", {{"rounds", 5}}, JobState::kRunning, json::object(), 5},
                               model(0, "m0"), "");
    REQUIRE(j.ok());
    job = *j;
    REQUIRE(store->open_round({job, 1, RoundState::kOpen, 0, {client}, 30, 90, 0, json::object()})
                .ok());
    CHECK(store->open_round({job, 1, RoundState::kOpen, 0, {}, 0, 0, 0, {}}).code() ==
          Code::kConflict);
    REQUIRE(store->record_update({job, 1, client, {{"samples", 12}}, 40}).ok());
    CHECK(store->record_update({job, 1, client, {}, 41}).code() == Code::kConflict);
    RoundRecord closed{job, 1,  RoundState::kOpen,       0, {client}, 30,
                       90,  50, {{"test_accuracy", 0.5}}};
    REQUIRE(store->commit_round(closed, {job, 1, "m1", "sum-m1", "opt", 50}, {{"rho", 0.2}}).ok());
  }
  auto store = open(path);
  auto c = store->get_client(client);
  REQUIRE(c.ok());
  CHECK(c->token_hash == "hash-a");
  CHECK(c->info["device"] == "phone");
  CHECK(c->profile["speed"] == 3);
  CHECK(c->last_seen == 20);
  auto j = store->get_job(job);
  REQUIRE(j.ok());
  CHECK(j->config["rounds"] == 5);
  CHECK(j->policy_state["rho"] == 0.2);
  auto rounds = store->list_rounds(job);
  REQUIRE(rounds.ok());
  REQUIRE(rounds->size() == 1);
  CHECK(rounds->at(0).state == RoundState::kCommitted);
  CHECK(rounds->at(0).selected == std::vector<ClientId>{client});
  CHECK(rounds->at(0).metrics["test_accuracy"] == 0.5);
  REQUIRE(store->add_round_metrics(job, 1, {{"test_loss", 0.7}, {"test_accuracy", 0.6}}).ok());
  CHECK(store->list_rounds(job)->at(0).metrics == json{{"test_accuracy", 0.6}, {"test_loss", 0.7}});
  CHECK(store->add_round_metrics(job, 2, {}).code() == Code::kNotFound);
  auto latest = store->latest_model(job);
  REQUIRE(latest.ok());
  CHECK(latest->version == 1);
  CHECK(latest->blob == "m1");
  CHECK(store->get_model(job, 0)->blob == "m0");
  CHECK(store->get_model(job, 7).status().code() == Code::kNotFound);
  auto updates = store->list_updates(job, 1);
  REQUIRE(updates.ok());
  CHECK(updates->size() == 1);
  CHECK(updates->at(0).meta["samples"] == 12);
  CHECK(store->get_job(99).status().code() == Code::kNotFound);
}

TEST_CASE("committing a round is all or nothing") {
  testing::TempDir dir;
  std::string path = dir.file("fedcase.db");
  auto store = open(path);
  auto job = store->create_job({0, "j", json::object(), JobState::kRunning, json::object(), 0},
                               model(0, "m0"), "");
  REQUIRE(job.ok());
  // Committing a round that was never opened must not leave its model behind.
  RoundRecord ghost{*job, 1, RoundState::kOpen, 0, {}, 0, 0, 1, json::object()};
  CHECK(store->commit_round(ghost, {*job, 1, "m1", "s", "", 1}, json::object()).code() ==
        Code::kConflict);
  CHECK(scalar(path, "SELECT COUNT(*) FROM models") == 1);
  // A model version that already exists makes the whole commit fail, round included.
  REQUIRE(store->open_round({*job, 1, RoundState::kOpen, 0, {}, 0, 10, 0, json::object()}).ok());
  CHECK_FALSE(store->commit_round(ghost, {*job, 0, "dup", "s", "", 1}, json::object()).ok());
  CHECK(store->list_rounds(*job)->at(0).state == RoundState::kOpen);
  REQUIRE(
      store->fail_round({*job, 1, RoundState::kFailed, 0, {}, 0, 10, 11, {{"reason", "deadline"}}})
          .ok());
  CHECK(store->list_rounds(*job)->at(0).state == RoundState::kFailed);
  CHECK(store->fail_round({*job, 1, RoundState::kFailed, 0, {}, 0, 10, 11, {}}).code() ==
        Code::kConflict);
  CHECK(std::filesystem::exists(path + "-wal"));
}

TEST_CASE("the schema is versioned and a newer database is refused") {
  testing::TempDir dir;
  std::string path = dir.file("fedcase.db");
  { open(path); }
  CHECK(scalar(path, "PRAGMA user_version") == 3);
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  auto s = open_sqlite_store(path);
  CHECK(s.status().code() == Code::kInvalidArgument);
  CHECK(s.status().message().find("newer") != std::string::npos);
}

TEST_CASE("tenants persist with unique names, and jobs remember their tenant") {
  testing::TempDir dir;
  const std::string path = dir.file("fedcase.db");
  {
    auto store = open(path);
    TenantRecord team{0, "team-a", "hash-a", 2.0, {{"max_running_jobs", 3}}, 5.0};
    auto a = store->add_tenant(team);
    REQUIRE(a.ok());
    CHECK(*a == 1);
    team.token_hash = "hash-b";
    CHECK(store->add_tenant(team).status().code() == Code::kConflict);  // same name
    team.name = "team-b";
    team.token_hash = "hash-a";
    CHECK(store->add_tenant(team).status().code() == Code::kConflict);  // same token
    JobRecord job{0, "owned", json::object(), JobState::kRunning, json::object(), 1.0, *a};
    REQUIRE(store->create_job(job, model(0, "m"), "").ok());
  }
  auto store = open(path);
  auto tenants = store->list_tenants();
  REQUIRE(tenants.ok());
  REQUIRE(tenants->size() == 1);
  CHECK(tenants->at(0).name == "team-a");
  CHECK(tenants->at(0).weight == 2.0);
  CHECK(tenants->at(0).limits["max_running_jobs"] == 3);
  CHECK(store->list_jobs()->at(0).tenant == 1);
}

TEST_CASE("a version-1 database gains tenants; its jobs belong to the operator") {
  testing::TempDir dir;
  const std::string path = dir.file("fedcase.db");
  {
    // The jobs table as schema version 1 had it, with one job.
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db,
                         "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT "
                         "NULL, config TEXT NOT NULL, state TEXT NOT NULL, policy_state TEXT NOT "
                         "NULL, created_at REAL NOT NULL);"
                         "INSERT INTO jobs(name, config, state, policy_state, created_at) "
                         "VALUES('old', '{}', 'running', '{}', 1.0);"
                         "PRAGMA user_version=1;",
                         nullptr, nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = open(path);
  CHECK(scalar(path, "PRAGMA user_version") == 3);
  auto jobs = store->list_jobs();
  REQUIRE(jobs.ok());
  REQUIRE(jobs->size() == 1);
  CHECK(jobs->at(0).name == "old");
  CHECK(jobs->at(0).tenant == 0);
  CHECK(store->list_tenants()->empty());
}

TEST_CASE("a job's module is stored with it, byte for byte, or not at all") {
  testing::TempDir dir;
  const std::string path = dir.file("fedcase.db");
  const std::string module("PK\x03\x04\0archive\xff bytes", 20);
  const JobRecord job{0, "scripted", json::object(), JobState::kRunning, json::object(), 1, 0};
  JobId with = 0, without = 0;
  {
    auto store = open(path);
    auto a = store->create_job(job, model(0, "m"), module);
    auto b = store->create_job(job, model(0, "m"), "");
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    with = *a;
    without = *b;
  }
  auto store = open(path);
  auto stored = store->get_job_module(with);
  REQUIRE(stored.ok());
  CHECK(*stored == module);
  CHECK(store->get_job_module(without).status().code() == Code::kNotFound);
  CHECK(store->get_job_module(99).status().code() == Code::kNotFound);
  // The job, its model and its module are one transaction: a module that cannot be stored
  // (here a stale row in the way of the next job's id) leaves no job behind.
  {
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "INSERT INTO job_modules(job_id, module) VALUES(3, 'stale')", nullptr,
                         nullptr, nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  CHECK(store->create_job(job, model(0, "m"), module).status().code() == Code::kConflict);
  CHECK(store->list_jobs()->size() == 2);
  CHECK(scalar(path, "SELECT COUNT(*) FROM models") == 2);
}

TEST_CASE("a version-2 database gains module storage; its jobs have no module") {
  testing::TempDir dir;
  const std::string path = dir.file("fedcase.db");
  JobId job = 0;
  {
    auto store = open(path);
    auto id = store->create_job(
        {0, "old", json::object(), JobState::kRunning, json::object(), 1, 0}, model(0, "m"), "");
    REQUIRE(id.ok());
    job = *id;
  }
  {
    // Back to schema version 2, as an older coordinator left it.
    sqlite3* db = nullptr;
    REQUIRE(sqlite3_open(path.c_str(), &db) == SQLITE_OK);
    REQUIRE(sqlite3_exec(db, "DROP TABLE job_modules; PRAGMA user_version=2;", nullptr, nullptr,
                         nullptr) == SQLITE_OK);
    sqlite3_close(db);
  }
  auto store = open(path);
  CHECK(scalar(path, "PRAGMA user_version") == 3);
  CHECK(store->list_jobs()->at(0).name == "old");
  CHECK(store->get_job_module(job).status().code() == Code::kNotFound);
  auto scripted = store->create_job(
      {0, "new", json::object(), JobState::kRunning, json::object(), 2, 0}, model(0, "m"), "ts");
  REQUIRE(scripted.ok());
  CHECK(*store->get_job_module(*scripted) == "ts");
}

TEST_CASE("an unusable path gives a clear error") {
  auto s = open_sqlite_store("/nonexistent-dir/x/fedcase.db");
  CHECK(s.status().code() == Code::kInternal);
  CHECK(s.status().message().find("cannot open database") != std::string::npos);
}
