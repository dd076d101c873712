#pragma once
// A private PostgreSQL 15 server for tests and benchmarks, made with the Debian package's
// initdb and pg_ctl (/usr/lib/postgresql/15/bin): its data in a temp dir owned by the
// `postgres` user, which it runs as (tests run as root, which PostgreSQL refuses to run as:
// the commands go through `runuser -u postgres --`); it listens on a Unix socket in that dir
// and on 127.0.0.1 at a free port only, trusts local connections as the superuser `postgres`,
// and keeps fsync and synchronous commits as PostgreSQL ships them. Startup costs about a
// second, so a test binary starts one (shared()) and makes a database per test case
// (create_database()).
//
// A watchdog process stops the server and removes its directory when the server object goes,
// or when the process that started it dies first (a crashed test); start it from the main
// thread, whose exit the watchdog takes for the process's.
//
// Errors: every method but the destructor throws std::runtime_error, with the command and its
// output, when a command or a connection fails (test set-up: never from library code).
// Thread safety: url(), create_database(), drop_database() and query() may be called from any
// thread; restart(), stop() and start() only while no other thread uses the server.

#include <atomic>
#include <string>

namespace fedcase::testing {

class PostgresServer {
 public:
  // initdb, then starts the server (pg_ctl start -w).
  PostgresServer();
  // pg_ctl stop -m immediate (its data is thrown away); the watchdog then removes the
  // directory in the background. Errors are ignored.
  ~PostgresServer();
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  // The server of this process, started on first use, stopped at exit.
  static PostgresServer& shared();

  // The URL of `database` through the Unix socket, as the superuser.
  std::string url(const std::string& database) const;
  // The same over TCP to 127.0.0.1.
  std::string tcp_url(const std::string& database) const;
  int port() const { return port_; }

  // Creates an empty database with a name no other call returned, and returns the name.
  std::string create_database();
  // Drops it, ending the connections still open to it.
  void drop_database(const std::string& database);
  // Runs `sql` (one or more statements) in `database` as the superuser; the first column of
  // the last statement's first row, "" for none.
  std::string query(const std::string& database, const std::string& sql) const;

  // pg_ctl restart: -m immediate is a crash (no checkpoint; the server replays its WAL when it
  // starts again), -m fast a clean stop. Waits until the server accepts connections again.
  void restart(bool immediate);
  // pg_ctl stop (-m immediate or -m fast), and start again.
  void stop(bool immediate);
  void start();
  // Freezes the server (SIGSTOP to the postmaster and every process it started): connections
  // stay open and every statement waits, as on a database that hangs. thaw() lets it go on.
  void freeze();
  void thaw();

 private:
  // Runs `command` (argv words, joined for the shell) as the postgres user; throws on failure.
  void as_postgres(const std::string& command) const;
  void pg_ctl(const std::string& action) const;
  // Sends `signal` to the postmaster and its children.
  void signal_all(int signal) const;

  std::string dir_;  // owned by postgres: data/, the socket, the log
  int port_ = 0;
  int watchdog_ = 0;  // its pid
  std::atomic<unsigned> databases_{0};
};

}  // namespace fedcase::testing
