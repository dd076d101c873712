// The PostgreSQL backend (sql.h over libpq's C API): a pool of connections, statements
// prepared once per connection with binary parameters and results (a model is sent and read as
// its bytes, never as hex text), sessions relaxed by default (synchronous_commit off, so that a
// statement outside a transaction costs one round trip and no flush) and synced transactions
// with SET LOCAL synchronous_commit TO on, wake-ups as NOTIFY in the committing round trip, and
// the schema's version in a table of its own, migrated under an advisory lock.

#include <endian.h>
#include <libpq-fe.h>
#include <poll.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>

#include "storage/errors.h"
#include "storage/sql.h"

namespace fedcase::storage {
namespace {

using sql::Durability;
using sql::Params;
using sql::Rows;

// The advisory lock that migrations take: "fedcase1" in ASCII.
constexpr int64_t kSchemaLock = 0x6665646361736531;
// Held by every transaction that changes clients, so that they commit in the order of the
// change numbers they take.
constexpr int64_t kClientChangesLock = 0x6665646361736532;
// The one channel wake-ups travel on; the payload is "<channel name> <id>".
constexpr const char* kNotifyChannel = "fedcase";

// Type OIDs (PostgreSQL's catalog/pg_type.h), fixed since forever.
constexpr Oid kBoolOid = 16, kByteaOid = 17, kInt8Oid = 20, kInt2Oid = 21, kInt4Oid = 23,
              kTextOid = 25, kFloat4Oid = 700, kFloat8Oid = 701;

std::string trimmed(const char* text) {
  std::string s = text ? text : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// What a failed command means.
struct Failure {
  Status status;
  bool lost = false;  // the connection can serve no more: it must be dropped
};

// kConflict for a constraint; kUnavailable, the connection lost, when libpq itself failed (no
// SQLSTATE: the connection broke, e.g. the server closed it) or the server ended the session
// (08..., 57P01 to 57P03: shutting down, crashed); kUnavailable too when the server cannot serve
// now (out of connections or resources, a serialisation failure or a deadlock worth retrying);
// kInvalidArgument for a value the server refuses; kInternal otherwise. The server's message
// and SQLSTATE go in the detail.
Failure pg_failure(PGconn* conn, const PGresult* res) {
  std::string message = trimmed(res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : nullptr);
  if (message.empty()) message = trimmed(PQerrorMessage(conn));
  const char* sqlstate = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : nullptr;
  const std::string code = sqlstate ? sqlstate : "";
  const std::string detail =
      "postgresql" + (code.empty() ? "" : " (" + code + ")") + ": " + message;
  auto in_class = [&](const char* prefix) { return code.rfind(prefix, 0) == 0; };
  if (PQstatus(conn) == CONNECTION_BAD || code.empty() || in_class("08") || in_class("57P")) {
    return {db_unavailable("the connection to the database was lost: " + detail), true};
  }
  if (in_class("23")) {
    return {Status(Code::kConflict, "the write conflicts with what the store holds", detail)};
  }
  if (in_class("53") || code == "40001" || code == "40P01") {
    return {db_unavailable("the database cannot serve now: " + detail)};
  }
  if (in_class("22")) {
    return {Status(Code::kInvalidArgument,
                   "the database refused a value (text must be UTF-8 without NUL)", detail)};
  }
  return {db_failed(detail)};
}

uint64_t big_endian(const char* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// A result in binary format, row by row.
class PgCursor : public sql::Cursor {
 public:
  explicit PgCursor(PGresult* res) : res_(res), rows_(PQntuples(res)) {}
  ~PgCursor() override { PQclear(res_); }
  PgCursor(const PgCursor&) = delete;
  PgCursor& operator=(const PgCursor&) = delete;

  bool next() override { return status_.ok() && ++row_ < rows_; }
  int64_t int64(int col) override {
    const char* v = value(col);
    if (!v) return 0;
    const int n = PQgetlength(res_, row_, col);
    const Oid type = PQftype(res_, col);
    if (type == kInt8Oid && n == 8) return static_cast<int64_t>(big_endian(v, 8));
    if (type == kInt4Oid && n == 4) return static_cast<int32_t>(big_endian(v, 4));
    if (type == kInt2Oid && n == 2) return static_cast<int16_t>(big_endian(v, 2));
    if (type == kBoolOid && n == 1) return v[0] != 0;
    return corrupt(col, "an integer");
  }
  double real(int col) override {
    const char* v = value(col);
    if (!v) return 0;
    const int n = PQgetlength(res_, row_, col);
    const Oid type = PQftype(res_, col);
    if (type == kFloat8Oid && n == 8) {
      const uint64_t bits = big_endian(v, 8);
      double d;
      std::memcpy(&d, &bits, sizeof d);
      return d;
    }
    if (type == kFloat4Oid && n == 4) {
      const uint32_t bits = static_cast<uint32_t>(big_endian(v, 4));
      float f;
      std::memcpy(&f, &bits, sizeof f);
      return f;
    }
    return static_cast<double>(int64(col));
  }
  std::string bytes(int col) override {
    const char* v = value(col);
    return v ? std::string(v, PQgetlength(res_, row_, col)) : std::string();
  }
  uint64_t changes() override { return std::strtoull(PQcmdTuples(res_), nullptr, 10); }
  Status status() override { return status_; }

 private:
  // The column's bytes in the current row; nullptr (and a corrupt row) for a NULL.
  const char* value(int col) {
    if (row_ < 0 || row_ >= rows_ || col >= PQnfields(res_)) {
      corrupt(col, "a column of a row");
      return nullptr;
    }
    if (PQgetisnull(res_, row_, col)) {
      corrupt(col, "a value");
      return nullptr;
    }
    return PQgetvalue(res_, row_, col);
  }
  int64_t corrupt(int col, const char* what) {
    if (status_.ok()) {
      status_ = db_failed("corrupt row: column " + std::to_string(col) + " is not " + what);
    }
    return 0;
  }

  PGresult* const res_;
  const int rows_;
  int row_ = -1;
  Status status_;
};

// The server settings of every session (libpq's "options"): transactions idle for 5 s end, and
// commits are relaxed unless a transaction says otherwise (PgConnection::begin).
constexpr const char* kSessionOptions =
    "-c idle_in_transaction_session_timeout=5000 -c synchronous_commit=off";

// How to reach the database: the URL and the options, applied to every new connection.
class Connector {
 public:
  Connector(std::string url, const PostgresOptions& options)
      : url_(std::move(url)),
        name_(redacted(url_)),
        timeout_(std::to_string(std::max(1, options.connect_timeout_s))) {
    for (const auto& [at, length] : password_spans(url_)) {
      if (length > 0) passwords_.push_back(url_.substr(at, length));
    }
  }

  // A new connection. kUnavailable with libpq's message (in the detail) when it cannot be made.
  Result<PGconn*> connect() const {
    // Entries before "dbname" (the URL, expanded in its place) are defaults the URL may
    // override. TCP keepalives notice a vanished server within about 25 s of silence, even
    // while a reply is awaited. A transaction left idle for 5 s (kSessionOptions: its process
    // frozen or cut off between two statements; a live one sends them back to back) is ended
    // by the server, so that a frozen replica cannot hold a job's lease row or a round's row
    // locked, and with it the replica taking the job over, for longer than that.
    const char* const keys[] = {"connect_timeout",  "application_name",
                                "client_encoding",  "keepalives",
                                "keepalives_idle",  "keepalives_interval",
                                "keepalives_count", "options",
                                "dbname",           nullptr};
    const char* const values[] = {timeout_.c_str(), "fedcase",    "UTF8", "1", "10", "5", "3",
                                  kSessionOptions,  url_.c_str(), nullptr};
    PGconn* conn = PQconnectdbParams(keys, values, 1);
    if (!conn) return db_unavailable("cannot connect to " + name_ + ": out of memory");
    if (PQstatus(conn) != CONNECTION_OK) {
      std::string message = hidden(trimmed(PQerrorMessage(conn)));
      PQfinish(conn);
      return db_unavailable("cannot connect to " + name_ + ": " + message);
    }
    PQsetNoticeProcessor(
        conn, [](void*, const char*) {}, nullptr);  // e.g. "already exists"
    return conn;
  }

 private:
  // `text` with the URL's passwords as "***": libpq quotes a malformed value whole.
  std::string hidden(std::string text) const {
    for (const std::string& password : passwords_) {
      for (size_t at = text.find(password); at != std::string::npos;
           at = text.find(password, at + 3)) {
        text.replace(at, password.size(), "***");
      }
    }
    return text;
  }

  const std::string url_;
  const std::string name_;  // for messages: the URL without its password
  const std::string timeout_;
  std::vector<std::string> passwords_;  // as the URL spells them
};

class PgConnection : public sql::Connection {
 public:
  // Reads of what arrived on an idle connection that check() makes at most.
  static constexpr int kMaxIdleReads = 8;

  explicit PgConnection(PGconn* conn) : conn_(conn) {}
  ~PgConnection() override { PQfinish(conn_); }
  PgConnection(const PgConnection&) = delete;
  PgConnection& operator=(const PgConnection&) = delete;

  Rows query(const std::string& text, const Params& params) override {
    const auto& values = params.values();
    const size_t n = values.size();
    std::vector<const char*> pointers(n);
    std::vector<int> lengths(n), formats(n, 1);  // every parameter in binary
    std::vector<Oid> types(n);
    std::vector<std::array<char, 8>> numbers(n);
    for (size_t i = 0; i < n; ++i) {
      const Params::Value& v = values[i];
      switch (v.type) {
        case Params::Type::kInt:
        case Params::Type::kReal: {
          uint64_t bits = static_cast<uint64_t>(v.integer);
          if (v.type == Params::Type::kReal) std::memcpy(&bits, &v.real, sizeof bits);
          bits = htobe64(bits);
          std::memcpy(numbers[i].data(), &bits, sizeof bits);
          pointers[i] = numbers[i].data();
          lengths[i] = 8;
          types[i] = v.type == Params::Type::kInt ? kInt8Oid : kFloat8Oid;
          break;
        }
        case Params::Type::kText:
        case Params::Type::kBytes:
          pointers[i] = v.bytes.empty() ? "" : v.bytes.data();  // never null: that is SQL NULL
          lengths[i] = static_cast<int>(v.bytes.size());
          types[i] = v.type == Params::Type::kText ? kTextOid : kByteaOid;
          break;
      }
    }
    auto name = prepared(text, types);
    if (!name.ok()) return Rows(name.status());
    PGresult* res = PQexecPrepared(conn_, name->c_str(), static_cast<int>(n), pointers.data(),
                                   lengths.data(), formats.data(), 1);
    const ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK) {
      return Rows(std::make_unique<PgCursor>(res));
    }
    Status error = fail(res);
    PQclear(res);
    return Rows(error);
  }

  // An idle connection the server closed has what it said last (e.g. a FATAL error) and its end
  // of file waiting: reading whatever arrived, as long as the socket has more and without
  // blocking, finds the end.
  Status check() override {
    for (int reads = 0; !lost() && reads < kMaxIdleReads; ++reads) {
      pollfd fd{PQsocket(conn_), POLLIN, 0};
      if (poll(&fd, 1, 0) <= 0) break;  // nothing arrived (or poll failed: the statement tells)
      if (!PQconsumeInput(conn_)) lost_ = true;
    }
    if (!lost()) return ok_status();
    lost_ = true;
    return db_unavailable("the connection to the database was lost: " +
                          trimmed(PQerrorMessage(conn_)));
  }

  Status script(const std::string& text) override { return command(text, nullptr); }

  // The session's commits are relaxed (kSessionOptions); a synced transaction says so.
  Status begin(Durability durability) override {
    return command(
        durability == Durability::kSynced ? "BEGIN; SET LOCAL synchronous_commit TO on" : "BEGIN",
        nullptr);
  }

  // The wake-ups' NOTIFYs go in the COMMIT's round trip; the server delivers them once the
  // transaction has committed.
  Status commit(const std::vector<Notification>& wakeups) override {
    std::string text;
    for (const Notification& n : wakeups) {
      text += std::string("NOTIFY ") + kNotifyChannel + ", '" + channel_name(n.channel) + " " +
              std::to_string(n.id) + "'; ";
    }
    text += "COMMIT";
    Status s = command(text, "COMMIT");
    if (!s.ok() && lost()) return commit_outcome_unknown(s);
    return s;
  }

  void rollback() override {
    if (lost() || PQtransactionStatus(conn_) == PQTRANS_IDLE) return;
    (void)command("ROLLBACK", nullptr);
  }

  bool lost() const override { return lost_ || PQstatus(conn_) == CONNECTION_BAD; }

 private:
  // Runs `text` (statements without parameters); the last one's tag must be `tag` if given.
  Status command(const std::string& text, const char* tag) {
    PGresult* res = PQexec(conn_, text.c_str());
    const ExecStatusType st = res ? PQresultStatus(res) : PGRES_FATAL_ERROR;
    Status s;
    if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
      s = fail(res);
    } else if (tag && std::strcmp(PQcmdStatus(res), tag) != 0) {
      s = db_failed(std::string("postgresql: ") + tag + " ended as " + PQcmdStatus(res));
    }
    PQclear(res);
    return s;
  }

  // The name of `text`'s prepared statement on this connection, preparing it the first time.
  Result<std::string> prepared(const std::string& text, const std::vector<Oid>& types) {
    auto it = statements_.find(text);
    if (it != statements_.end()) return it->second;
    const std::string name = "s" + std::to_string(statements_.size() + 1);
    PGresult* res =
        PQprepare(conn_, name.c_str(), text.c_str(), static_cast<int>(types.size()), types.data());
    const bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
    Status error = ok ? Status() : fail(res);
    PQclear(res);
    if (!ok) return error;
    statements_.emplace(text, name);
    return name;
  }

  // The Status of a failed command, noting whether it lost the connection.
  Status fail(const PGresult* res) {
    Failure f = pg_failure(conn_, res);
    lost_ = lost_ || f.lost;
    return f.status;
  }

  PGconn* const conn_;
  std::map<std::string, std::string> statements_;  // prepared: text -> name
  bool lost_ = false;
};

// LISTEN on a connection of its own, reconnecting after a loss.
class PgListener : public Listener {
 public:
  explicit PgListener(Connector connector) : connector_(std::move(connector)) {}
  ~PgListener() override { close(); }
  PgListener(const PgListener&) = delete;
  PgListener& operator=(const PgListener&) = delete;

  Status start() {
    auto conn = connector_.connect();
    if (!conn.ok()) return conn.status();
    conn_ = *conn;
    PGresult* res = PQexec(conn_, (std::string("LISTEN ") + kNotifyChannel).c_str());
    const bool ok = res && PQresultStatus(res) == PGRES_COMMAND_OK;
    Status s = ok ? Status() : pg_failure(conn_, res).status;
    PQclear(res);
    if (!ok) close();
    return s;
  }

  Result<std::optional<Notification>> next(double timeout_s) override {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(std::max(0.0, timeout_s)));
    if (!conn_) {  // lost before (and said so): listen again
      Status s = start();
      if (!s.ok()) {
        std::this_thread::sleep_until(deadline);
        return s;
      }
    }
    while (true) {
      while (PGnotify* n = PQnotifies(conn_)) {
        const std::optional<Notification> wakeup = parse(n->extra);
        PQfreemem(n);
        if (wakeup) return wakeup;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::optional<Notification>();
      pollfd fd{PQsocket(conn_), POLLIN, 0};
      const int ready = poll(&fd, 1, static_cast<int>(std::min<int64_t>(left.count(), 60000)));
      if (ready < 0 && errno != EINTR) return lose("poll failed");
      if (ready > 0 && !PQconsumeInput(conn_)) return lose(trimmed(PQerrorMessage(conn_)));
    }
  }

 private:
  static std::optional<Notification> parse(const char* payload) {
    const std::string text = payload ? payload : "";
    const size_t space = text.find(' ');
    if (space == std::string::npos) return std::nullopt;
    const auto channel = sql::parse_channel(std::string_view(text).substr(0, space));
    if (!channel) return std::nullopt;
    return Notification{*channel, std::strtoull(text.c_str() + space + 1, nullptr, 10)};
  }

  Status lose(const std::string& why) {
    close();
    return db_unavailable("the listener's connection to the database was lost (" + why +
                          "): wake-ups may have been missed");
  }

  void close() {
    if (conn_) PQfinish(conn_);
    conn_ = nullptr;
  }

  const Connector connector_;
  PGconn* conn_ = nullptr;
};

class PgDriver : public sql::Driver {
 public:
  PgDriver(std::string url, const PostgresOptions& options) : connector_(std::move(url), options) {}

  const sql::Dialect& dialect() const override {
    // The clock: each statement's own time (clock_timestamp()), never its transaction's start.
    static const sql::Dialect kDialect{"EXTRACT(EPOCH FROM clock_timestamp())::float8",
                                       "FOR SHARE",
                                       "FOR UPDATE",
                                       "GREATEST",
                                       "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY",
                                       "BIGINT",
                                       "DOUBLE PRECISION",
                                       "BYTEA",
                                       /*writable_cte=*/true};
    return kDialect;
  }

  Result<std::unique_ptr<sql::Connection>> connect() override {
    auto conn = connector_.connect();
    if (!conn.ok()) return conn.status();
    return std::unique_ptr<sql::Connection>(std::make_unique<PgConnection>(*conn));
  }

  Result<int> lock_schema(sql::Connection& c) override {
    FEDCASE_RETURN_IF_ERROR(
        c.query("SELECT pg_advisory_xact_lock($1)", Params().add(kSchemaLock)).status());
    FEDCASE_RETURN_IF_ERROR(
        c.script("CREATE TABLE IF NOT EXISTS schema_version (version BIGINT NOT NULL)"));
    Rows version = c.query("SELECT version FROM schema_version", Params());
    const int found = version.next() ? static_cast<int>(version.int64(0)) : 0;
    FEDCASE_RETURN_IF_ERROR(version.status());
    return found;
  }

  Status order_client_changes(sql::Connection& c) override {
    return c.query("SELECT pg_advisory_xact_lock($1)", Params().add(kClientChangesLock)).status();
  }

  Status record_schema(sql::Connection& c, int version) override {
    FEDCASE_RETURN_IF_ERROR(c.script("DELETE FROM schema_version"));
    return c.query("INSERT INTO schema_version(version) VALUES($1)", Params().add(version))
        .status();
  }

  Result<std::unique_ptr<Listener>> listen() override {
    auto listener = std::make_unique<PgListener>(connector_);
    FEDCASE_RETURN_IF_ERROR(listener->start());
    return std::unique_ptr<Listener>(std::move(listener));
  }

 private:
  const Connector connector_;
};

}  // namespace

Result<std::unique_ptr<Store>> open_postgres_store(const std::string& url,
                                                   const PostgresOptions& options) {
  return sql::open_sql_store(std::make_unique<PgDriver>(url, options), options.max_connections);
}

}  // namespace fedcase::storage
