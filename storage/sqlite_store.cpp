// The SQLite backend (sql.h over the SQLite C API): one connection in WAL mode, every commit
// synced except those of relaxed transactions, the schema's version in PRAGMA user_version,
// and wake-ups between the stores of this process on the same file (local_bus.h).

#include <sqlite3.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <thread>

#include "storage/errors.h"
#include "storage/local_bus.h"
#include "storage/sql.h"

namespace fedcase::storage {
namespace {

using sql::Durability;
using sql::Params;
using sql::Rows;

// How long a statement waits for another connection's lock on the file.
constexpr int kBusyTimeoutMs = 5000;

// kConflict for a constraint; kUnavailable when another connection holds the file's lock past
// the busy timeout; kInternal otherwise. SQLite's message goes in the detail.
Status sqlite_error(sqlite3* db, int rc) {
  const std::string detail = std::string("sqlite: ") + sqlite3_errmsg(db);
  switch (rc & 0xff) {
    case SQLITE_CONSTRAINT:
      return {Code::kConflict, "the write conflicts with what the store holds", detail};
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return db_unavailable(detail);
    default:
      return db_failed(detail);
  }
}

// A statement being stepped: its first step ran when it was made (so a write has happened by
// then), and it is reset when the cursor goes, so that the cached statement can run again.
class SqliteCursor : public sql::Cursor {
 public:
  SqliteCursor(sqlite3* db, sqlite3_stmt* stmt, int first_step)
      : db_(db), stmt_(stmt), rc_(first_step) {
    if (rc_ == SQLITE_DONE) changes_ = sqlite3_changes(db_);
    if (rc_ != SQLITE_ROW && rc_ != SQLITE_DONE) status_ = sqlite_error(db_, rc_);
  }
  ~SqliteCursor() override {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  bool next() override {
    if (pending_row_) {
      pending_row_ = false;
      return rc_ == SQLITE_ROW;
    }
    if (rc_ != SQLITE_ROW) return false;
    rc_ = sqlite3_step(stmt_);
    if (rc_ != SQLITE_ROW && rc_ != SQLITE_DONE) status_ = sqlite_error(db_, rc_);
    return rc_ == SQLITE_ROW;
  }
  int64_t int64(int col) override { return sqlite3_column_int64(stmt_, col); }
  double real(int col) override { return sqlite3_column_double(stmt_, col); }
  std::string bytes(int col) override {
    const void* p = sqlite3_column_blob(stmt_, col);
    const int n = sqlite3_column_bytes(stmt_, col);
    return p ? std::string(static_cast<const char*>(p), n) : std::string();
  }
  uint64_t changes() override { return changes_; }
  Status status() override { return status_; }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_;
  int rc_;
  bool pending_row_ = true;  // the first step's row has not been handed out yet
  uint64_t changes_ = 0;
  Status status_;
};

class SqliteConnection : public sql::Connection {
 public:
  SqliteConnection(sqlite3* db, std::shared_ptr<LocalBus> bus) : db_(db), bus_(std::move(bus)) {}
  ~SqliteConnection() override {
    for (auto& [text, stmt] : statements_) sqlite3_finalize(stmt);
    sqlite3_close(db_);
  }

  Status init() {
    sqlite3_busy_timeout(db_, kBusyTimeoutMs);  // first: several openers may set up one file
    // A file that another opener is switching to WAL at the same moment refuses the switch at
    // once (SQLITE_BUSY without asking the busy handler): tried again until the busy timeout.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
    for (;;) {
      Rows mode = query("PRAGMA journal_mode=WAL", Params());
      if (mode.next()) wal_ = mode.bytes(0) == "wal";
      const Status s = mode.status();
      if (s.code() != Code::kUnavailable || std::chrono::steady_clock::now() > deadline) {
        FEDCASE_RETURN_IF_ERROR(s);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    FEDCASE_RETURN_IF_ERROR(script("PRAGMA synchronous=FULL"));
    return script("PRAGMA foreign_keys=ON");
  }

  Rows query(const std::string& text, const Params& params) override {
    auto it = statements_.find(text);
    if (it == statements_.end()) {
      sqlite3_stmt* stmt = nullptr;
      if (sqlite3_prepare_v2(db_, text.c_str(), -1, &stmt, nullptr) != SQLITE_OK) {
        return Rows(db_failed(std::string("sqlite prepare: ") + sqlite3_errmsg(db_)));
      }
      it = statements_.emplace(text, stmt).first;
    }
    sqlite3_stmt* stmt = it->second;
    // Copied (SQLITE_TRANSIENT): the rows are stepped after the caller's Params are gone.
    const auto& values = params.values();
    for (int i = 1; i <= sqlite3_bind_parameter_count(stmt); ++i) {
      // "$3" is the third value, wherever it stands.
      const char* name = sqlite3_bind_parameter_name(stmt, i);
      const size_t n = name ? std::strtoul(name + 1, nullptr, 10) : 0;
      if (n < 1 || n > values.size()) {
        sqlite3_clear_bindings(stmt);
        return Rows(db_failed("statement parameter " + std::to_string(i) + " has no value"));
      }
      const Params::Value& v = values[n - 1];
      int rc = SQLITE_OK;
      switch (v.type) {
        case Params::Type::kInt:
          rc = sqlite3_bind_int64(stmt, i, v.integer);
          break;
        case Params::Type::kReal:
          rc = sqlite3_bind_double(stmt, i, v.real);
          break;
        case Params::Type::kText:
          rc = sqlite3_bind_text64(stmt, i, v.bytes.data(), v.bytes.size(), SQLITE_TRANSIENT,
                                   SQLITE_UTF8);
          break;
        case Params::Type::kBytes:
          rc = sqlite3_bind_blob64(stmt, i, v.bytes.data(), v.bytes.size(), SQLITE_TRANSIENT);
          break;
      }
      if (rc != SQLITE_OK) {
        Status s = sqlite_error(db_, rc);
        sqlite3_clear_bindings(stmt);
        return Rows(s);
      }
    }
    return Rows(std::make_unique<SqliteCursor>(db_, stmt, sqlite3_step(stmt)));
  }

  Status check() override { return ok_status(); }

  Status script(const std::string& text) override {
    char* err = nullptr;
    if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      return db_failed("sqlite: " + msg);
    }
    return ok_status();
  }

  // BEGIN IMMEDIATE: the transaction holds the write lock from its start, so that what it
  // reads stays as it read it until the commit. A relaxed transaction commits with
  // PRAGMA synchronous=NORMAL, which in WAL mode leaves its sync to the next synced commit
  // (a file system without a WAL gets every sync).
  Status begin(Durability durability) override {
    const bool full = durability == Durability::kSynced || !wal_;
    if (full != full_sync_) {
      FEDCASE_RETURN_IF_ERROR(
          query(full ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=NORMAL", Params()).status());
      full_sync_ = full;
    }
    return script("BEGIN IMMEDIATE");
  }

  Status commit(const std::vector<Notification>& wakeups) override {
    FEDCASE_RETURN_IF_ERROR(script("COMMIT"));
    bus_->publish(wakeups);
    return ok_status();
  }

  void rollback() override {
    if (!sqlite3_get_autocommit(db_)) (void)script("ROLLBACK");
  }

  bool lost() const override { return false; }

 private:
  sqlite3* const db_;
  const std::shared_ptr<LocalBus> bus_;
  std::map<std::string, sqlite3_stmt*> statements_;  // prepared, by their text
  bool wal_ = false;       // the log is a WAL (a file system without one gets every sync)
  bool full_sync_ = true;  // PRAGMA synchronous is FULL
};

class SqliteDriver : public sql::Driver {
 public:
  explicit SqliteDriver(std::string path)
      : path_(std::move(path)), bus_(LocalBus::of(bus_key(path_))) {}

  const sql::Dialect& dialect() const override {
    static const sql::Dialect kDialect{"((julianday('now') - 2440587.5) * 86400.0)",
                                       "",
                                       "",
                                       "MAX",
                                       "INTEGER PRIMARY KEY AUTOINCREMENT",
                                       "INTEGER",
                                       "REAL",
                                       "BLOB",
                                       /*writable_cte=*/false};
    return kDialect;
  }

  Result<std::unique_ptr<sql::Connection>> connect() override {
    sqlite3* db = nullptr;
    const int rc =
        sqlite3_open_v2(path_.c_str(), &db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    if (rc != SQLITE_OK) {
      std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
      sqlite3_close(db);
      return db_failed("cannot open database " + path_ + ": " + msg);
    }
    auto connection = std::make_unique<SqliteConnection>(db, bus_);
    Status s = connection->init();
    if (!s.ok())
      return Status(s.code(), s.message(), "cannot open database " + path_ + ": " + s.detail());
    return std::unique_ptr<sql::Connection>(std::move(connection));
  }

  // The migration's BEGIN IMMEDIATE already keeps every other writer out.
  Result<int> lock_schema(sql::Connection& c) override {
    Rows version = c.query("PRAGMA user_version", Params());
    const int found = version.next() ? static_cast<int>(version.int64(0)) : 0;
    FEDCASE_RETURN_IF_ERROR(version.status());
    return found;
  }

  Status record_schema(sql::Connection& c, int version) override {
    return c.script("PRAGMA user_version=" + std::to_string(version));
  }

  // One writer at a time already: a write transaction holds the database's write lock.
  Status order_client_changes(sql::Connection&) override { return ok_status(); }

  Result<std::unique_ptr<Listener>> listen() override { return bus_->listen(); }

 private:
  // The file, however it was named, so that every store on it shares one bus.
  static std::string bus_key(const std::string& path) {
    std::error_code ec;
    const auto canonical = std::filesystem::weakly_canonical(path, ec);
    return ec ? path : canonical.string();
  }

  const std::string path_;
  const std::shared_ptr<LocalBus> bus_;
};

}  // namespace

Result<std::unique_ptr<Store>> open_sqlite_store(const std::string& path) {
  return sql::open_sql_store(std::make_unique<SqliteDriver>(path), 1);
}

}  // namespace fedcase::storage
