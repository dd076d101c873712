#pragma once
// What a Store needs from an SQL database, so that the Store's logic (sql_store.cpp) is written
// once over every backend: a connection that runs parametrised statements and transactions,
// the rows they return, and the few SQL fragments that differ between dialects. Each backend
// implements these over its client library (sqlite_store.cpp, postgres_store.cpp). Internal
// to storage/.
//
// Statements use PostgreSQL's placeholders, $1, $2, ..., which SQLite reads as named
// parameters; a placeholder may appear more than once.

#include <cstdint>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/status.h"
#include "storage/store.h"

namespace fedcase::storage::sql {

// A statement's parameters, $1, $2, ... in the order they are added. Bytes added by reference
// (text(), bytes()) must outlive the statement's execution; JSON is serialised into the Params.
class Params {
 public:
  enum class Type { kInt, kReal, kText, kBytes };
  struct Value {
    Type type = Type::kInt;
    int64_t integer = 0;
    double real = 0;
    std::string_view bytes;  // kText, kBytes
  };

  template <class T, class = std::enable_if_t<std::is_integral_v<T>>>
  Params& add(T v) {
    values_.push_back({Type::kInt, static_cast<int64_t>(v), 0, {}});
    return *this;
  }
  Params& add(double v) {
    values_.push_back({Type::kReal, 0, v, {}});
    return *this;
  }
  Params& text(std::string_view v) {
    values_.push_back({Type::kText, 0, 0, v});
    return *this;
  }
  Params& bytes(std::string_view v) {
    values_.push_back({Type::kBytes, 0, 0, v});
    return *this;
  }
  // Serialised as text (invalid UTF-8 in its strings replaced, never thrown on).
  Params& json(const nlohmann::json& v);
  // A copy kept in the Params (a state's name, a number's text).
  Params& owned_text(std::string v);

  const std::vector<Value>& values() const { return values_; }

 private:
  std::vector<Value> values_;
  std::deque<std::string> owned_;  // stable addresses for the views above
};

// What a backend's statement returns, row by row. Implemented by each backend.
class Cursor {
 public:
  virtual ~Cursor() = default;
  // Moves to the next row: false past the last one or on an error, which status() then holds.
  virtual bool next() = 0;
  virtual int64_t int64(int col) = 0;
  virtual double real(int col) = 0;
  virtual std::string bytes(int col) = 0;  // a text or bytes column, byte for byte
  // The rows an INSERT, UPDATE or DELETE changed.
  virtual uint64_t changes() = 0;
  virtual Status status() = 0;
};

// A statement's result: its rows, or the error that stopped it, and the columns read as the
// Store's values. A column that does not read as what it should records kInternal ("corrupt
// row") in status(). Used by one thread.
class Rows {
 public:
  explicit Rows(Status error) : status_(std::move(error)) {}
  explicit Rows(std::unique_ptr<Cursor> cursor) : cursor_(std::move(cursor)) {}

  bool next();
  int64_t int64(int col) { return cursor_->int64(col); }
  uint64_t uint64(int col) { return static_cast<uint64_t>(cursor_->int64(col)); }
  double real(int col) { return cursor_->real(col); }
  std::string bytes(int col) { return cursor_->bytes(col); }
  nlohmann::json json(int col);
  JobState job_state(int col);
  RoundState round_state(int col);
  uint64_t changes() { return cursor_ ? cursor_->changes() : 0; }
  // The statement's error, a row's, or a corrupt column's; OK otherwise.
  Status status() const;

  // Records a corrupt column (kInternal) unless an error came first.
  void corrupt(const std::string& what);

 private:
  std::unique_ptr<Cursor> cursor_;
  Status status_;
};

enum class Durability {
  kSynced,   // the commit returns once it is durable
  kRelaxed,  // the commit may return before it is durable; a later synced commit makes it so
};

// One session on the database, used by one call at a time (the pool hands it out).
class Connection {
 public:
  virtual ~Connection() = default;
  // Runs one statement with `params` (prepared once per connection and kept); outside a
  // transaction it commits on its own, relaxed (Durability). Errors in the Rows: kConflict for
  // a constraint the statement violates, kUnavailable when the connection is lost or the
  // server cannot serve now, kInternal otherwise; the database's own text in their detail.
  virtual Rows query(const std::string& sql, const Params& params) = 0;
  // Whether the connection is still open as far as can be told without a round trip (the
  // server may have closed it while it was idle): OK, or kUnavailable, and it is lost().
  virtual Status check() = 0;
  // Runs statements without parameters or results (the schema's migrations).
  virtual Status script(const std::string& sql) = 0;
  virtual Status begin(Durability durability) = 0;
  // Commits the transaction, and publishes `wakeups` with it (once it is committed).
  virtual Status commit(const std::vector<Notification>& wakeups) = 0;
  // Rolls the transaction back, if one is open; errors are ignored (a lost connection has
  // none left).
  virtual void rollback() = 0;
  // Whether the connection is lost: it must not be used again.
  virtual bool lost() const = 0;
};

// The SQL that differs between dialects, which statements name as {now}, {lock_shared}, ...
struct Dialect {
  std::string now;          // an expression: the database's clock, unix seconds (a double)
  std::string lock_shared;  // ends a SELECT of rows that must not change until the commit
  std::string lock_update;  // ends a SELECT of rows only this transaction may change
  std::string greatest;     // the function of the larger of its arguments
  // Column types: an id the database assigns (from 1, never reused; with its PRIMARY KEY), a
  // 64-bit integer, a double, bytes kept as they are.
  std::string id, integer, real, bytes;
  // Whether a WITH may hold an UPDATE whose returned rows an INSERT reads, all one statement
  // (PostgreSQL); otherwise a write of two statements is a transaction of its own (SQLite,
  // whose statements cost no round trip).
  bool writable_cte = false;
};

// `sql` with the dialect's fragments in place of {now}, {lock_shared}, {lock_update},
// {greatest}, {id}, {int}, {real} and {bytes}.
std::string render(std::string sql, const Dialect& dialect);

// A schema migration: the statements (to render) that take a database from `version - 1` to
// `version`.
struct Migration {
  int version;
  const char* statements;
};
// The schema of every backend (schema.cpp): versions 1, 2, ... in order.
const std::vector<Migration>& migrations();

// A backend: how to reach its database, and its dialect and schema.
class Driver {
 public:
  virtual ~Driver() = default;
  virtual const Dialect& dialect() const = 0;
  // Opens a new connection. kUnavailable when the database cannot be reached.
  virtual Result<std::unique_ptr<Connection>> connect() = 0;
  // Inside the migration's transaction: keeps every other opener out of the schema until the
  // commit, and returns the schema version the database records (0 for an empty database).
  virtual Result<int> lock_schema(Connection& connection) = 0;
  // Records `version` as the database's schema version (in the migration's transaction).
  virtual Status record_schema(Connection& connection, int version) = 0;
  // Inside a transaction that changes clients, before it numbers its changes: keeps every
  // other such transaction out until the commit, so that changes commit in the order of their
  // numbers (Store::clients_changed_after).
  virtual Status order_client_changes(Connection& connection) = 0;
  virtual Result<std::unique_ptr<Listener>> listen() = 0;
};

// A Store over `driver`, whose schema it first migrates to the current version on one
// connection; then it opens up to `max_connections` (>= 1) connections, each on first need.
// kInvalidArgument for a database of a newer schema, else the driver's errors.
Result<std::unique_ptr<Store>> open_sql_store(std::unique_ptr<Driver> driver,
                                              size_t max_connections);

// The channel's name as a wake-up's payload spells it, and back; nullopt for another name.
std::optional<Channel> parse_channel(std::string_view name);

}  // namespace fedcase::storage::sql
