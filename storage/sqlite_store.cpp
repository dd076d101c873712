#include <sqlite3.h>

#include <functional>
#include <map>

#include "common/mutex.h"
#include "storage/store.h"

namespace fedcase::storage {
namespace {

using nlohmann::json;

// Schema migrations, applied in order; PRAGMA user_version records how many have run.
const char* const kMigrations[] = {
    R"sql(
    CREATE TABLE clients (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      token_hash TEXT NOT NULL UNIQUE,
      info TEXT NOT NULL,
      profile TEXT NOT NULL,
      registered_at REAL NOT NULL,
      last_seen REAL NOT NULL);
    CREATE TABLE jobs (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      name TEXT NOT NULL,
      config TEXT NOT NULL,
      state TEXT NOT NULL,
      policy_state TEXT NOT NULL,
      created_at REAL NOT NULL);
    CREATE TABLE rounds (
      job_id INTEGER NOT NULL REFERENCES jobs(id),
      idx INTEGER NOT NULL,
      state TEXT NOT NULL,
      base_version INTEGER NOT NULL,
      selected TEXT NOT NULL,
      opened_at REAL NOT NULL,
      deadline REAL NOT NULL,
      closed_at REAL NOT NULL,
      metrics TEXT NOT NULL,
      PRIMARY KEY (job_id, idx));
    CREATE TABLE updates (
      job_id INTEGER NOT NULL,
      round_idx INTEGER NOT NULL,
      client_id INTEGER NOT NULL REFERENCES clients(id),
      meta TEXT NOT NULL,
      received_at REAL NOT NULL,
      PRIMARY KEY (job_id, round_idx, client_id),
      FOREIGN KEY (job_id, round_idx) REFERENCES rounds(job_id, idx));
    CREATE TABLE models (
      job_id INTEGER NOT NULL REFERENCES jobs(id),
      version INTEGER NOT NULL,
      blob BLOB NOT NULL,
      checksum TEXT NOT NULL,
      optimizer_state BLOB NOT NULL,
      created_at REAL NOT NULL,
      PRIMARY KEY (job_id, version));
    )sql",
    R"sql(
    CREATE TABLE tenants (
      id INTEGER PRIMARY KEY AUTOINCREMENT,
      name TEXT NOT NULL UNIQUE,
      token_hash TEXT NOT NULL UNIQUE,
      weight REAL NOT NULL,
      limits TEXT NOT NULL,
      created_at REAL NOT NULL);
    ALTER TABLE jobs ADD COLUMN tenant_id INTEGER NOT NULL DEFAULT 0;
    )sql",
    R"sql(
    CREATE TABLE job_modules (
      job_id INTEGER PRIMARY KEY REFERENCES jobs(id),
      module BLOB NOT NULL);
    )sql",
};
constexpr int kSchemaVersion = sizeof(kMigrations) / sizeof(kMigrations[0]);

// A prepared statement in use: binds parameters by position, steps, reads columns, and resets
// itself when it goes out of scope so the cached statement can be reused.
class Query {
 public:
  Query(sqlite3* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  Query(Query&& other) noexcept
      : db_(other.db_), stmt_(other.stmt_), arg_(other.arg_), status_(other.status_) {
    other.stmt_ = nullptr;
  }
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  ~Query() {
    if (!stmt_) return;
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  Query& bind(int64_t v) { return check(sqlite3_bind_int64(stmt_, ++arg_, v)); }
  Query& bind(uint64_t v) { return bind(static_cast<int64_t>(v)); }
  Query& bind(double v) { return check(sqlite3_bind_double(stmt_, ++arg_, v)); }
  Query& bind(const std::string& v) {
    return check(
        sqlite3_bind_text(stmt_, ++arg_, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT));
  }
  Query& bind_blob(const std::string& v) {
    return check(sqlite3_bind_blob64(stmt_, ++arg_, v.data(), v.size(), SQLITE_TRANSIENT));
  }
  Query& bind(const json& v) { return bind(v.dump()); }

  // SQLITE_ROW -> true, SQLITE_DONE -> false; any other result is recorded in status().
  bool step() {
    if (!status_.ok()) return false;
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) fail(rc);
    return false;
  }
  Status run() {
    step();
    return status_;
  }
  const Status& status() const { return status_; }

  int64_t int64(int col) { return sqlite3_column_int64(stmt_, col); }
  double real(int col) { return sqlite3_column_double(stmt_, col); }
  std::string text(int col) {
    const void* p = sqlite3_column_blob(stmt_, col);
    int n = sqlite3_column_bytes(stmt_, col);
    return p ? std::string(static_cast<const char*>(p), n) : std::string();
  }
  // A JSON column; a corrupt one records kInternal in status() and reads as null.
  json json_col(int col) {
    json j = json::parse(text(col), nullptr, false);
    if (!j.is_discarded()) return j;
    corrupt("a JSON column does not parse");
    return json();
  }
  template <class State, class Parse>
  State state_col(int col, Parse parse) {
    auto state = parse(text(col));
    if (state) return *state;
    corrupt("unknown state '" + text(col) + "'");
    return State{};
  }

 private:
  Query& check(int rc) {
    if (rc != SQLITE_OK) fail(rc);
    return *this;
  }
  void corrupt(const std::string& what) {
    if (status_.ok()) status_ = internal_error("corrupt row: " + what);
  }
  void fail(int rc) {
    if (!status_.ok()) return;
    if (rc == SQLITE_CONSTRAINT) {
      status_ = conflict(std::string("constraint violated: ") + sqlite3_errmsg(db_));
    } else {
      status_ = internal_error(std::string("sqlite: ") + sqlite3_errmsg(db_));
    }
  }
  sqlite3* db_;
  sqlite3_stmt* stmt_;
  int arg_ = 0;
  Status status_;
};

class SqliteStore : public Store {
 public:
  explicit SqliteStore(sqlite3* db) : db_(db) {}
  ~SqliteStore() override {
    for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
    sqlite3_close(db_);
  }

  Status init() {
    MutexLock lock(mu_);
    {
      auto mode = prepared("PRAGMA journal_mode=WAL");
      if (!mode.ok()) return mode.status();
      if (mode->step()) wal_ = mode->text(0) == "wal";
      FEDCASE_RETURN_IF_ERROR(mode->status());
    }
    FEDCASE_RETURN_IF_ERROR(exec("PRAGMA synchronous=FULL"));
    FEDCASE_RETURN_IF_ERROR(exec("PRAGMA foreign_keys=ON"));
    sqlite3_busy_timeout(db_, 5000);
    int version = 0;
    {
      auto q = query("PRAGMA user_version");
      if (!q.ok()) return q.status();
      if (q->step()) version = static_cast<int>(q->int64(0));
      FEDCASE_RETURN_IF_ERROR(q->status());
    }
    if (version > kSchemaVersion) {
      return invalid_argument("database schema version " + std::to_string(version) +
                              " is newer than this coordinator's (" +
                              std::to_string(kSchemaVersion) + ")");
    }
    for (int v = version; v < kSchemaVersion; ++v) {
      FEDCASE_RETURN_IF_ERROR(transaction([&]() FEDCASE_REQUIRES(mu_) -> Status {
        FEDCASE_RETURN_IF_ERROR(exec(kMigrations[v]));
        return exec("PRAGMA user_version=" + std::to_string(v + 1));
      }));
    }
    return ok_status();
  }

  Result<ClientId> add_client(const ClientRecord& c) override {
    MutexLock lock(mu_);
    auto q = query(
        "INSERT INTO clients(token_hash, info, profile, registered_at, last_seen) "
        "VALUES(?,?,?,?,?)");
    if (!q.ok()) return q.status();
    FEDCASE_RETURN_IF_ERROR(q->bind(c.token_hash)
                                .bind(c.info)
                                .bind(c.profile)
                                .bind(c.registered_at)
                                .bind(c.last_seen)
                                .run());
    return static_cast<ClientId>(sqlite3_last_insert_rowid(db_));
  }

  Result<ClientRecord> get_client(ClientId id) override {
    MutexLock lock(mu_);
    auto rows = clients_where("WHERE id=?", static_cast<int64_t>(id));
    if (!rows.ok()) return rows.status();
    if (rows->empty()) return not_found("client " + std::to_string(id) + " not found");
    return rows->front();
  }

  Result<std::vector<ClientRecord>> list_clients() override {
    MutexLock lock(mu_);
    return clients_where("", std::nullopt);
  }

  Status update_clients(const std::vector<ClientRecord>& clients) override {
    MutexLock lock(mu_);
    return transaction([&]() FEDCASE_REQUIRES(mu_) -> Status {
      for (const auto& c : clients) {
        auto q = query("UPDATE clients SET profile=?, last_seen=? WHERE id=?");
        if (!q.ok()) return q.status();
        FEDCASE_RETURN_IF_ERROR(q->bind(c.profile).bind(c.last_seen).bind(c.id).run());
        if (sqlite3_changes(db_) == 0) {
          return not_found("client " + std::to_string(c.id) + " not found");
        }
      }
      return ok_status();
    });
  }

  Result<JobId> create_job(const JobRecord& job, const ModelRecord& model,
                           const std::string& module) override {
    MutexLock lock(mu_);
    JobId id = 0;
    Status s = transaction([&]() FEDCASE_REQUIRES(mu_) -> Status {
      auto q = query(
          "INSERT INTO jobs(name, config, state, policy_state, created_at, tenant_id) "
          "VALUES(?,?,?,?,?,?)");
      if (!q.ok()) return q.status();
      FEDCASE_RETURN_IF_ERROR(q->bind(job.name)
                                  .bind(job.config)
                                  .bind(std::string(state_name(job.state)))
                                  .bind(job.policy_state)
                                  .bind(job.created_at)
                                  .bind(job.tenant)
                                  .run());
      id = static_cast<JobId>(sqlite3_last_insert_rowid(db_));
      ModelRecord m = model;
      m.job = id;
      FEDCASE_RETURN_IF_ERROR(insert_model(m));
      if (module.empty()) return ok_status();
      auto insert = query("INSERT INTO job_modules(job_id, module) VALUES(?,?)");
      if (!insert.ok()) return insert.status();
      return insert->bind(id).bind_blob(module).run();
    });
    if (!s.ok()) return s;
    return id;
  }

  Result<std::string> get_job_module(JobId id) override {
    MutexLock lock(mu_);
    auto q = query("SELECT module FROM job_modules WHERE job_id=?");
    if (!q.ok()) return q.status();
    q->bind(id);
    if (!q->step()) {
      if (!q->status().ok()) return q->status();
      return not_found("job " + std::to_string(id) + " has no module");
    }
    return q->text(0);
  }

  Result<TenantId> add_tenant(const TenantRecord& t) override {
    MutexLock lock(mu_);
    auto q = query(
        "INSERT INTO tenants(name, token_hash, weight, limits, created_at) VALUES(?,?,?,?,?)");
    if (!q.ok()) return q.status();
    FEDCASE_RETURN_IF_ERROR(
        q->bind(t.name).bind(t.token_hash).bind(t.weight).bind(t.limits).bind(t.created_at).run());
    return static_cast<TenantId>(sqlite3_last_insert_rowid(db_));
  }

  Result<std::vector<TenantRecord>> list_tenants() override {
    MutexLock lock(mu_);
    auto q =
        query("SELECT id, name, token_hash, weight, limits, created_at FROM tenants ORDER BY id");
    if (!q.ok()) return q.status();
    std::vector<TenantRecord> out;
    while (q->step()) {
      out.push_back({static_cast<TenantId>(q->int64(0)), q->text(1), q->text(2), q->real(3),
                     q->json_col(4), q->real(5)});
    }
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<JobRecord> get_job(JobId id) override {
    MutexLock lock(mu_);
    auto rows = jobs_where("WHERE id=?", static_cast<int64_t>(id));
    if (!rows.ok()) return rows.status();
    if (rows->empty()) return not_found("job " + std::to_string(id) + " not found");
    return rows->front();
  }

  Result<std::vector<JobRecord>> list_jobs() override {
    MutexLock lock(mu_);
    return jobs_where("", std::nullopt);
  }

  Status set_job_state(JobId id, JobState state) override {
    MutexLock lock(mu_);
    auto q = query("UPDATE jobs SET state=? WHERE id=?");
    if (!q.ok()) return q.status();
    FEDCASE_RETURN_IF_ERROR(q->bind(std::string(state_name(state))).bind(id).run());
    if (sqlite3_changes(db_) == 0) return not_found("job " + std::to_string(id) + " not found");
    return ok_status();
  }

  Status open_round(const RoundRecord& r) override {
    MutexLock lock(mu_);
    auto q = query(
        "INSERT INTO rounds(job_id, idx, state, base_version, selected, opened_at, deadline, "
        "closed_at, metrics) VALUES(?,?,?,?,?,?,?,?,?)");
    if (!q.ok()) return q.status();
    return q->bind(r.job)
        .bind(r.index)
        .bind(std::string(state_name(RoundState::kOpen)))
        .bind(r.base_version)
        .bind(json(r.selected))
        .bind(r.opened_at)
        .bind(r.deadline)
        .bind(r.closed_at)
        .bind(r.metrics)
        .run();
  }

  // Without a sync of its own (see Store::record_update) when the log is a WAL: commit_round
  // and fail_round sync it, and with it every write before them.
  Status record_update(const UpdateRecord& u) override {
    MutexLock lock(mu_);
    FEDCASE_RETURN_IF_ERROR(set_full_sync(!wal_));
    auto q = prepared(
        "INSERT INTO updates(job_id, round_idx, client_id, meta, received_at) VALUES(?,?,?,?,?)");
    const Status inserted =
        q.ok() ? q->bind(u.job).bind(u.round).bind(u.client).bind(u.meta).bind(u.received_at).run()
               : q.status();
    (void)set_full_sync(true);  // if it fails, the next statement tries again before it runs
    return inserted;
  }

  Status commit_round(const RoundRecord& r, const ModelRecord& model,
                      const json& policy_state) override {
    MutexLock lock(mu_);
    return transaction([&]() FEDCASE_REQUIRES(mu_) -> Status {
      FEDCASE_RETURN_IF_ERROR(close_round(r, RoundState::kCommitted));
      FEDCASE_RETURN_IF_ERROR(insert_model(model));
      auto q = query("UPDATE jobs SET policy_state=? WHERE id=?");
      if (!q.ok()) return q.status();
      return q->bind(policy_state).bind(r.job).run();
    });
  }

  Status fail_round(const RoundRecord& r) override {
    MutexLock lock(mu_);
    return close_round(r, RoundState::kFailed);
  }

  Status add_round_metrics(JobId job, RoundIndex round, const json& metrics) override {
    MutexLock lock(mu_);
    return transaction([&]() FEDCASE_REQUIRES(mu_) -> Status {
      auto read = query("SELECT metrics FROM rounds WHERE job_id=? AND idx=? AND state!='open'");
      if (!read.ok()) return read.status();
      read->bind(job).bind(round);
      if (!read->step()) {
        if (!read->status().ok()) return read->status();
        return not_found("closed round " + std::to_string(round) + " of job " +
                         std::to_string(job) + " not found");
      }
      json merged = read->json_col(0);
      merged.update(metrics);
      auto write = query("UPDATE rounds SET metrics=? WHERE job_id=? AND idx=?");
      if (!write.ok()) return write.status();
      return write->bind(merged).bind(job).bind(round).run();
    });
  }

  Result<std::vector<RoundRecord>> list_rounds(JobId job) override {
    MutexLock lock(mu_);
    auto q = query(
        "SELECT job_id, idx, state, base_version, selected, opened_at, deadline, closed_at, "
        "metrics FROM rounds WHERE job_id=? ORDER BY idx");
    if (!q.ok()) return q.status();
    q->bind(job);
    std::vector<RoundRecord> out;
    while (q->step()) {
      RoundRecord r;
      r.job = q->int64(0);
      r.index = q->int64(1);
      r.state = q->state_col<RoundState>(2, parse_round_state);
      r.base_version = q->int64(3);
      for (const json& id : q->json_col(4)) {
        if (id.is_number_unsigned()) r.selected.push_back(id.get<ClientId>());
      }
      r.opened_at = q->real(5);
      r.deadline = q->real(6);
      r.closed_at = q->real(7);
      r.metrics = q->json_col(8);
      out.push_back(std::move(r));
    }
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<std::vector<UpdateRecord>> list_updates(JobId job, RoundIndex round) override {
    MutexLock lock(mu_);
    auto q = query(
        "SELECT client_id, meta, received_at FROM updates WHERE job_id=? AND round_idx=? "
        "ORDER BY received_at");
    if (!q.ok()) return q.status();
    q->bind(job).bind(round);
    std::vector<UpdateRecord> out;
    while (q->step())
      out.push_back({job, round, static_cast<ClientId>(q->int64(0)), q->json_col(1), q->real(2)});
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<ModelRecord> get_model(JobId job, uint64_t version) override {
    MutexLock lock(mu_);
    return model_where("WHERE job_id=? AND version=?", job, version);
  }

  Result<ModelRecord> latest_model(JobId job) override {
    MutexLock lock(mu_);
    return model_where("WHERE job_id=? ORDER BY version DESC LIMIT 1", job, std::nullopt);
  }

 private:
  Status exec(const std::string& sql) FEDCASE_REQUIRES(mu_) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      return internal_error("sqlite: " + msg);
    }
    return ok_status();
  }

  // Runs `body` inside BEGIN IMMEDIATE .. COMMIT, rolling back if it fails.
  Status transaction(const std::function<Status()>& body) FEDCASE_REQUIRES(mu_) {
    FEDCASE_RETURN_IF_ERROR(set_full_sync(true));
    FEDCASE_RETURN_IF_ERROR(exec("BEGIN IMMEDIATE"));
    Status s = body();
    if (s.ok()) s = exec("COMMIT");
    if (s.ok()) return s;
    Status rolled_back = exec("ROLLBACK");
    if (!rolled_back.ok()) return internal_error(s.message() + "; " + rolled_back.message());
    return s;
  }

  // Every statement but record_update's runs with every commit synced.
  Result<Query> query(const std::string& sql) FEDCASE_REQUIRES(mu_) {
    FEDCASE_RETURN_IF_ERROR(set_full_sync(true));
    return prepared(sql);
  }

  // PRAGMA synchronous FULL or NORMAL, through cached statements (record_update sets it twice
  // per accepted update).
  Status set_full_sync(bool full) FEDCASE_REQUIRES(mu_) {
    if (full_sync_ == full) return ok_status();
    auto q = prepared(full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL");
    if (!q.ok()) return q.status();
    FEDCASE_RETURN_IF_ERROR(q->run());
    full_sync_ = full;
    return ok_status();
  }

  // The cached statement for `sql`.
  Result<Query> prepared(const std::string& sql) FEDCASE_REQUIRES(mu_) {
    auto it = statements_.find(sql);
    if (it == statements_.end()) {
      sqlite3_stmt* stmt = nullptr;
      if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
        return internal_error(std::string("sqlite prepare: ") + sqlite3_errmsg(db_));
      }
      it = statements_.emplace(sql, stmt).first;
    }
    return Query(db_, it->second);
  }

  Status close_round(const RoundRecord& r, RoundState state) FEDCASE_REQUIRES(mu_) {
    auto q = query(
        "UPDATE rounds SET state=?, closed_at=?, metrics=? WHERE job_id=? AND idx=? AND "
        "state='open'");
    if (!q.ok()) return q.status();
    FEDCASE_RETURN_IF_ERROR(q->bind(std::string(state_name(state)))
                                .bind(r.closed_at)
                                .bind(r.metrics)
                                .bind(r.job)
                                .bind(r.index)
                                .run());
    if (sqlite3_changes(db_) == 0) {
      return conflict("round " + std::to_string(r.index) + " of job " + std::to_string(r.job) +
                      " is not open");
    }
    return ok_status();
  }

  Status insert_model(const ModelRecord& m) FEDCASE_REQUIRES(mu_) {
    auto q = query(
        "INSERT INTO models(job_id, version, blob, checksum, optimizer_state, created_at) "
        "VALUES(?,?,?,?,?,?)");
    if (!q.ok()) return q.status();
    return q->bind(m.job)
        .bind(m.version)
        .bind_blob(m.blob)
        .bind(m.checksum)
        .bind_blob(m.optimizer_state)
        .bind(m.created_at)
        .run();
  }

  Result<std::vector<ClientRecord>> clients_where(const std::string& where,
                                                  std::optional<int64_t> id) FEDCASE_REQUIRES(mu_) {
    auto q = query("SELECT id, token_hash, info, profile, registered_at, last_seen FROM clients " +
                   where + " ORDER BY id");
    if (!q.ok()) return q.status();
    if (id) q->bind(*id);
    std::vector<ClientRecord> out;
    while (q->step()) {
      out.push_back({static_cast<ClientId>(q->int64(0)), q->text(1), q->json_col(2), q->json_col(3),
                     q->real(4), q->real(5)});
    }
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<std::vector<JobRecord>> jobs_where(const std::string& where, std::optional<int64_t> id)
      FEDCASE_REQUIRES(mu_) {
    auto q =
        query("SELECT id, name, config, state, policy_state, created_at, tenant_id FROM jobs " +
              where + " ORDER BY id");
    if (!q.ok()) return q.status();
    if (id) q->bind(*id);
    std::vector<JobRecord> out;
    while (q->step()) {
      out.push_back({static_cast<JobId>(q->int64(0)), q->text(1), q->json_col(2),
                     q->state_col<JobState>(3, parse_job_state), q->json_col(4), q->real(5),
                     static_cast<TenantId>(q->int64(6))});
    }
    if (!q->status().ok()) return q->status();
    return out;
  }

  Result<ModelRecord> model_where(const std::string& where, JobId job,
                                  std::optional<uint64_t> version) FEDCASE_REQUIRES(mu_) {
    auto q =
        query("SELECT version, blob, checksum, optimizer_state, created_at FROM models " + where);
    if (!q.ok()) return q.status();
    q->bind(job);
    if (version) q->bind(*version);
    if (!q->step()) {
      if (!q->status().ok()) return q->status();
      return not_found("model " + (version ? std::to_string(*version) + " " : std::string()) +
                       "of job " + std::to_string(job) + " not found");
    }
    return ModelRecord{
        job, static_cast<uint64_t>(q->int64(0)), q->text(1), q->text(2), q->text(3), q->real(4)};
  }

  // Serialises every use of the connection, its statements and its sync mode.
  Mutex mu_;
  sqlite3* const db_;
  std::map<std::string, sqlite3_stmt*> statements_ FEDCASE_GUARDED_BY(mu_);
  // The log is a WAL (a file system without one gets every sync).
  bool wal_ FEDCASE_GUARDED_BY(mu_) = false;
  bool full_sync_ FEDCASE_GUARDED_BY(mu_) = true;  // PRAGMA synchronous is FULL
};

}  // namespace

Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return internal_error("cannot open database " + path + ": " + msg);
  }
  auto store = std::make_unique<SqliteStore>(db);
  Status s = store->init();
  if (!s.ok()) return s;
  return std::unique_ptr<Store>(std::move(store));
}

}  // namespace fedcase::storage
