// The PostgreSQL store: the Store contract (tests/storage/store_contract.h) on a database of
// its own per case, on one private server for the whole binary (tests/support/
// postgres_server.h), and what only a server has: crashes and restarts under a store, stores
// of several replicas at once, an unreachable server.

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <libpq-fe.h>

#include <chrono>
#include <thread>

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
constexpr int kSchemaVersion = 11;

// A database of its own on the shared server.
class PostgresBackend : public contract::Backend {
 public:
  PostgresBackend() : server_(PostgresServer::shared()), database_(server_.create_database()) {}
  // Not dropped: DROP DATABASE checkpoints, which costs more than the whole case; the
  // server and every database on it go at the end of the binary.

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
    if (version < 11) server_.query(database_, "DROP TABLE contact_batches");
    if (version < 10) server_.query(database_, "DROP TABLE used_keys");
    if (version < 9) {
      server_.query(database_,
                    "DROP INDEX clients_by_change; ALTER TABLE clients DROP COLUMN change_seq");
    }
    if (version < 8) {
      // The contract's models are one piece each: back into models.blob.
      server_.query(database_,
          "UPDATE models SET blob=(SELECT c.data FROM model_pieces p JOIN model_chunks c ON "
          "c.sha256=p.chunk WHERE p.job_id=models.job_id AND p.version=models.version AND "
          "p.idx=0); DROP TABLE model_pieces; DROP TABLE model_chunks; DROP TABLE uploads; "
          "DROP TABLE upload_chunks");
    }
    if (version < 7) {
      server_.query(database_,
                    "ALTER TABLE rounds DROP COLUMN admitted;"
                    "ALTER TABLE updates ADD COLUMN state TEXT NOT NULL DEFAULT 'accepted', "
                    "ADD COLUMN expires_at DOUBLE PRECISION NOT NULL DEFAULT 0");
    }
    if (version < 6) server_.query(database_, "DROP TABLE stage_messages");
    if (version < 5) server_.query(database_, "ALTER TABLE rounds DROP COLUMN plan");
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

namespace {

std::unique_ptr<Store> open(PostgresBackend& backend) {
  auto store = backend.open();
  REQUIRE_MESSAGE(store.ok(), store.status().to_string());
  return std::move(store).value();
}

ModelRecord model(JobId job, uint64_t version, std::string blob) {
  return {job, version, std::move(blob), "sum", "opt", 1.0 + version};
}

JobRecord job_record(const std::string& name) {
  return {0, name, json::object(), JobState::kRunning, json::object(), 1, 0};
}

ClientRecord client(const std::string& token_hash) {
  return {0, token_hash, json::object(), json::object(), 1, 1};
}

// A million floats' worth of bytes, every byte value among them.
std::string big_blob() {
  std::string blob(4'000'000, '\0');
  for (size_t i = 0; i < blob.size(); ++i) blob[i] = static_cast<char>((i * 131) ^ (i >> 9));
  return blob;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// A TCP port on 127.0.0.1 that accepts connections into its backlog and never answers.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(listen(fd_, 16) == 0);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace

TEST_CASE("a crash of the server loses no commit, and the store reconnects on its next call") {
  PostgresBackend backend;
  auto store = open(backend);
  const ClientId a = *store->add_client(client("hash-a"));
  const JobId job = *store->create_job(job_record("j"), model(0, 0, "m0"), "");
  const std::string blob = big_blob();
  REQUIRE(store->open_round({job, 1, RoundState::kOpen, 0, {a}, 10, 20, 0, json::object()}).ok());
  REQUIRE(store->admit_update({job, 1, a, {{"samples", 3}}, 12}).ok());
  REQUIRE(store
              ->commit_round({job, 1, RoundState::kCommitted, 0, {a}, 10, 20, 15, {{"updates", 1}}},
                             model(job, 1, blob), {{"rho", 0.5}})
              .ok());
  auto listener = store->listen();
  REQUIRE(listener.ok());

  PostgresServer::shared().restart(/*immediate=*/true);

  // The pooled connection is gone: a write finds it lost at its BEGIN, before anything of it
  // reached the server, and runs again on a new connection.
  auto b = store->add_client(client("hash-b"));
  REQUIRE_MESSAGE(b.ok(), b.status().to_string());
  CHECK(*b > a);
  auto latest = store->latest_model(job);
  REQUIRE_MESSAGE(latest.ok(), latest.status().to_string());
  CHECK(latest->version == 1);
  CHECK(latest->blob == blob);
  CHECK(store->list_rounds(job)->at(0).state == RoundState::kCommitted);
  CHECK(store->list_updates(job, 1)->size() == 1);
  CHECK(store->get_job(job)->policy_state == json{{"rho", 0.5}});
  CHECK(store->list_clients()->size() == 2);

  // The listener was cut off: it says so once, then listens again.
  auto lost = (*listener)->next(5);
  CHECK(lost.status().code() == Code::kUnavailable);
  auto quiet = (*listener)->next(0.1);  // reconnects
  REQUIRE_MESSAGE(quiet.ok(), quiet.status().to_string());
  REQUIRE(store->notify(Channel::kClient, *b).ok());
  auto heard = (*listener)->next(5);
  REQUIRE_MESSAGE(heard.ok(), heard.status().to_string());
  REQUIRE(heard->has_value());
  CHECK((*heard)->channel == Channel::kClient);
  CHECK((*heard)->id == *b);
}

TEST_CASE("while the server is down calls fail with kUnavailable; once it is back they work") {
  PostgresBackend backend;
  auto store = open(backend);
  const JobId job = *store->create_job(job_record("j"), model(0, 0, "m0"), "");
  auto listener = store->listen();
  REQUIRE(listener.ok());
  PostgresServer::shared().stop(/*immediate=*/false);
  const auto start = std::chrono::steady_clock::now();
  auto jobs = store->list_jobs();
  CHECK(jobs.status().code() == Code::kUnavailable);
  CHECK(jobs.status().message() == "the database is unavailable");  // what a caller may read
  CHECK(jobs.status().detail().find("cannot connect") != std::string::npos);
  CHECK(store->set_job_state(job, JobState::kPaused, kUnleased).code() == Code::kUnavailable);
  CHECK(store->add_client(client("hash-a")).status().code() == Code::kUnavailable);
  CHECK(store->ping().code() == Code::kUnavailable);
  CHECK(seconds_since(start) < 10);
  // The listener says it lost its connection, then, while it cannot listen again, waits out
  // each call's timeout before saying so again.
  CHECK((*listener)->next(5).status().code() == Code::kUnavailable);
  const auto retried = std::chrono::steady_clock::now();
  CHECK((*listener)->next(0.3).status().code() == Code::kUnavailable);
  CHECK(seconds_since(retried) >= 0.25);
  PostgresServer::shared().start();
  CHECK(store->ping().ok());
  REQUIRE(store->set_job_state(job, JobState::kPaused, kUnleased).ok());
  CHECK(store->get_job(job)->state == JobState::kPaused);
  CHECK(store->add_client(client("hash-a")).ok());
  auto heard = (*listener)->next(0.1);  // listening again
  CHECK(heard.ok());
}

TEST_CASE("an admission after a crash finds its idle connection closed and runs on a new one") {
  PostgresBackend backend;
  auto store = open(backend);
  const ClientId a = *store->add_client(client("hash-a"));
  const JobId job = *store->create_job(job_record("j"), model(0, 0, "m0"), "");
  RoundRecord round{job, 1, RoundState::kOpen, 0, {a}, 10, 20, 0, json::object()};
  round.target = 1;
  REQUIRE(store->open_round(round).ok());
  PostgresServer::shared().restart(/*immediate=*/true);
  // One statement that commits on its own: it may not be sent twice, so the closed connection
  // must be found before it is sent, not by its failure.
  auto admitted = store->admit_update({job, 1, a, {{"samples", 3}}, 12, "r"});
  REQUIRE_MESSAGE(admitted.ok(), admitted.status().to_string());
  CHECK(*admitted);
  CHECK(store->round_admission(job, 1)->admitted() == 1);
}

TEST_CASE("an unreachable server is a clear kUnavailable within the connect timeout") {
  SilentListener silent;
  const auto start = std::chrono::steady_clock::now();
  auto timed_out =
      open_store("postgresql://fedcase:hunter2@127.0.0.1:" + std::to_string(silent.port()) +
                 "/db?connect_timeout=2");
  const double waited = seconds_since(start);
  CHECK(timed_out.status().code() == Code::kUnavailable);
  CHECK(timed_out.status().message() == "the database is unavailable");
  CHECK(timed_out.status().detail().find("timeout") != std::string::npos);
  CHECK(timed_out.status().detail().find("127.0.0.1") != std::string::npos);
  CHECK(timed_out.status().to_string().find("hunter2") == std::string::npos);  // no password
  CHECK(waited >= 1.5);
  CHECK(waited < 15);

  // Nothing listening (the port of a listener that closed): refused at once.
  const int closed_port = SilentListener().port();
  auto refused =
      open_store("postgresql://127.0.0.1:" + std::to_string(closed_port) + "/db?connect_timeout=2");
  CHECK(refused.status().code() == Code::kUnavailable);
  CHECK(refused.status().detail().find("cannot connect") != std::string::npos);
}

TEST_CASE("a password in a URL's user info or query, or in a connection string, is hidden") {
  // Nothing listens on port 1 of 127.0.0.1: refused at once.
  for (const std::string url :
       {"postgresql://fedcase@127.0.0.1:1/db?password=hunter2&connect_timeout=2",
        "postgresql://fedcase@127.0.0.1:1/db?connect_timeout=2&password=hunter2",
        "postgresql://fedcase:hunter2@127.0.0.1:1/db?connect_timeout=2",
        "postgresql://127.0.0.1:1/db?password=hunter2%zz",  // malformed: libpq quotes it whole
        "host=127.0.0.1 port=1 dbname=db password=hunter2 connect_timeout=2",
        "host=127.0.0.1 port=1 password = 'hunter2 \\' x' dbname=db"}) {
    CAPTURE(url);
    auto refused = open_postgres_store(url);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.status().code() == Code::kUnavailable);
    CHECK(refused.status().message() == "the database is unavailable");
    CHECK(refused.status().detail().find("***") != std::string::npos);
    CHECK(refused.status().to_string().find("hunter2") == std::string::npos);
  }
  auto refused =
      open_store("postgresql://fedcase@127.0.0.1:1/db?password=hunter2&connect_timeout=2");
  CHECK(refused.status().code() == Code::kUnavailable);
  CHECK(refused.status().to_string().find("hunter2") == std::string::npos);
  auto unknown = open_store("postgresq1://fedcase:hunter2@db/x");  // a misspelt scheme
  CHECK(unknown.status().code() == Code::kInvalidArgument);
  CHECK(unknown.status().to_string().find("hunter2") == std::string::npos);
}


// A session of its own on the database: a test holds row locks with it.
class Session {
 public:
  explicit Session(const std::string& url) : conn_(PQconnectdb(url.c_str())) {
    REQUIRE(PQstatus(conn_) == CONNECTION_OK);
  }
  ~Session() { PQfinish(conn_); }
  void run(const std::string& sql) {
    PGresult* r = PQexec(conn_, sql.c_str());
    const ExecStatusType s = PQresultStatus(r);
    PQclear(r);
    REQUIRE_MESSAGE((s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK), PQerrorMessage(conn_));
  }

 private:
  PGconn* conn_;
};

// Admission is one statement whose check PostgreSQL re-evaluates on the round's row as it is
// once a lock on it is let go: admissions that waited behind the lock take the K places in
// turn, and the rest are refused.
TEST_CASE("an admission stalled behind a lock never overruns the round's K") {
  PostgresBackend backend;
  auto a = open(backend), b = open(backend);
  const JobId job = *a->create_job(job_record("j"), model(0, 0, "m0"), "");
  const ClientId c1 = *a->add_client(client("hash-1")), c2 = *a->add_client(client("hash-2"));
  RoundRecord round{job, 1, RoundState::kOpen, 0, {c1, c2}, 1, 1000, 0, json::object()};
  round.target = 1;
  REQUIRE(a->open_round(round).ok());
  // Another session holds the round's row: both replicas' admissions wait behind it.
  Session locker(backend.url());
  locker.run("BEGIN");
  locker.run("SELECT 1 FROM rounds WHERE job_id=" + std::to_string(job) + " AND idx=1 FOR UPDATE");
  Result<bool> first = internal_error("not run"), second = internal_error("not run");
  std::thread by_a([&] { first = a->admit_update({job, 1, c1, json::object(), 5, "a"}); });
  std::thread by_b([&] { second = b->admit_update({job, 1, c2, json::object(), 6, "b"}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  CHECK(PostgresServer::shared().query(backend.database(), "SELECT COUNT(*) FROM updates") == "0");
  locker.run("COMMIT");
  by_a.join();
  by_b.join();
  // Exactly one of them took the round's single place, and filled it.
  CHECK(first.ok() != second.ok());
  const Result<bool>& admitted = first.ok() ? first : second;
  const Result<bool>& refused = first.ok() ? second : first;
  REQUIRE_MESSAGE(admitted.ok(), admitted.status().to_string());
  CHECK(*admitted);
  CHECK(refused.status().code() == Code::kConflict);
  CHECK(refused.status().message() ==
        "round 1 of job " + std::to_string(job) + " is full (1 updates)");
  auto admission = a->round_admission(job, 1);
  REQUIRE(admission.ok());
  CHECK(admission->admitted() == 1);
  CHECK(b->list_rounds(job)->at(0).admitted == 1);
  CHECK(a->list_updates(job, 1)->size() == 1);
}

TEST_CASE("replicas over TCP and over the socket share one database and its leases") {
  PostgresBackend backend;
  auto over_socket = open(backend);
  auto tcp = open_store(PostgresServer::shared().tcp_url(backend.database()));
  REQUIRE_MESSAGE(tcp.ok(), tcp.status().to_string());
  auto& over_tcp = *tcp;
  const JobId job = *over_socket->create_job(job_record("j"), model(0, 0, "m0"), "");
  auto owner = over_tcp->acquire_lease(job, "tcp-replica", 30);
  REQUIRE_MESSAGE(owner.ok(), owner.status().to_string());
  CHECK(over_socket->acquire_lease(job, "socket-replica", 30).status().code() == Code::kConflict);
  REQUIRE(
      over_tcp
          ->open_round({job, 1, RoundState::kOpen, 0, {}, 1, 2, 0, json::object(), 0, owner->epoch})
          .ok());
  CHECK(over_socket->list_rounds(job)->at(0).epoch == owner->epoch);
  REQUIRE(over_tcp->release_lease(job, "tcp-replica", owner->epoch).ok());
  auto next = over_socket->acquire_lease(job, "socket-replica", 30);
  REQUIRE(next.ok());
  CHECK(next->epoch == owner->epoch + 1);
  CHECK(over_tcp
            ->fail_round(
                {job, 1, RoundState::kFailed, 0, {}, 1, 2, 3, json::object(), 0, owner->epoch})
            .code() == Code::kConflict);
}

TEST_CASE("a model is stored as bytea of its own size: binary parameters, no text round trip") {
  PostgresBackend backend;
  auto store = open(backend);
  const std::string blob = big_blob();
  const JobId job = *store->create_job(job_record("j"), model(0, 0, blob), blob);
  CHECK(store->get_model(job, 0)->blob == blob);
  CHECK(*store->get_job_module(job) == blob);
  auto& server = PostgresServer::shared();
  CHECK(server.query(backend.database(),
                     "SELECT SUM(octet_length(c.data)) FROM model_pieces p JOIN model_chunks c ON "
                     "c.sha256=p.chunk") == std::to_string(blob.size()));
  CHECK(server.query(backend.database(), "SELECT pg_typeof(data)::text FROM model_chunks LIMIT 1") ==
        "bytea");
}

// Last: crash recovery in the cases above replays the WAL of every database made before.
TEST_CASE("the PostgreSQL store meets the Store contract") {
  contract::check_store_contract([] { return std::make_unique<PostgresBackend>(); });
}
