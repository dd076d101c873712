#include "tests/support/postgres_server.h"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace fedcase::testing {
namespace {

const char* const kBin = "/usr/lib/postgresql/15/bin";

// A port on 127.0.0.1 that nothing listens on right now.
int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    throw std::runtime_error("postgres_server: no free port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

// `text` quoted for the shell.
std::string shell_quoted(const std::string& text) {
  std::string out = "'";
  for (char c : text) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

PostgresServer::PostgresServer() {
  const bool root = geteuid() == 0;
  const passwd* postgres = getpwnam("postgres");
  if (root && !postgres) throw std::runtime_error("postgres_server: no postgres user");
  std::string pattern = (std::filesystem::temp_directory_path() / "fedcase-pg-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("postgres_server: mkdtemp failed");
  dir_ = pattern;
  if (root && chown(dir_.c_str(), postgres->pw_uid, postgres->pw_gid) != 0) {
    throw std::runtime_error("postgres_server: cannot give " + dir_ + " to postgres");
  }
  // The watchdog: a shell that, when this process dies (PR_SET_PDEATHSIG, kept across exec),
  // stops the server and removes its directory. A clean exit kills it first.
  const std::string cleanup = (root ? "runuser -u postgres -- " : "") + std::string(kBin) +
                              "/pg_ctl -D " + shell_quoted(dir_ + "/data") +
                              " stop -m immediate >/dev/null 2>&1; rm -rf " + shell_quoted(dir_);
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) kill(getpid(), SIGTERM);
    const std::string script =
        "trap " + shell_quoted(cleanup + "; exit 0") + " TERM; while :; do sleep 1; done";
    execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  watchdog_ = child;
  as_postgres(std::string(kBin) + "/initdb -D " + shell_quoted(dir_ + "/data") +
              " -U postgres -A trust -E UTF8 --locale=C --no-sync >" +
              shell_quoted(dir_ + "/initdb.log") + " 2>&1");
  port_ = free_port();
  start();
}

PostgresServer::~PostgresServer() {
  try {
    pg_ctl("stop -m immediate");  // no shutdown checkpoint: the data goes with the directory
  } catch (const std::exception&) {
  }
  // The watchdog removes the directory, after this process has gone on: deleting the files of
  // a few dozen databases takes seconds on some disks, which no test needs to wait for.
  if (watchdog_ > 0) kill(watchdog_, SIGTERM);
}

PostgresServer& PostgresServer::shared() {
  static PostgresServer server;
  return server;
}

std::string PostgresServer::url(const std::string& database) const {
  return "postgresql:///" + database + "?host=" + dir_ + "&port=" + std::to_string(port_) +
         "&user=postgres";
}

std::string PostgresServer::tcp_url(const std::string& database) const {
  return "postgresql://postgres@127.0.0.1:" + std::to_string(port_) + "/" + database;
}

std::string PostgresServer::create_database() {
  const std::string name =
      "t" + std::to_string(getpid()) + "_" + std::to_string(databases_.fetch_add(1) + 1);
  query("postgres", "CREATE DATABASE " + name);
  return name;
}

void PostgresServer::drop_database(const std::string& database) {
  query("postgres", "DROP DATABASE IF EXISTS " + database + " WITH (FORCE)");
}

std::string PostgresServer::query(const std::string& database, const std::string& sql) const {
  PGconn* conn = PQconnectdb(url(database).c_str());
  if (PQstatus(conn) != CONNECTION_OK) {
    const std::string message = PQerrorMessage(conn);
    PQfinish(conn);
    throw std::runtime_error("postgres_server: cannot connect to " + database + ": " + message);
  }
  PQsetNoticeProcessor(
      conn, [](void*, const char*) {}, nullptr);
  PGresult* res = PQexec(conn, sql.c_str());
  const ExecStatusType status = PQresultStatus(res);
  std::string out;
  if (status == PGRES_TUPLES_OK && PQntuples(res) > 0 && PQnfields(res) > 0) {
    out = PQgetvalue(res, 0, 0);
  }
  const std::string message = PQresultErrorMessage(res);
  PQclear(res);
  PQfinish(conn);
  if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
    throw std::runtime_error("postgres_server: " + sql + ": " + message);
  }
  return out;
}

void PostgresServer::restart(bool immediate) {
  pg_ctl(std::string("restart -m ") + (immediate ? "immediate" : "fast"));
}

void PostgresServer::stop(bool immediate) {
  pg_ctl(std::string("stop -m ") + (immediate ? "immediate" : "fast"));
}

void PostgresServer::start() { pg_ctl("start"); }

void PostgresServer::freeze() { signal_all(SIGSTOP); }

void PostgresServer::thaw() { signal_all(SIGCONT); }

void PostgresServer::signal_all(int signal) const {
  std::ifstream pid_file(dir_ + "/data/postmaster.pid");
  pid_t postmaster = 0;
  if (!(pid_file >> postmaster) || postmaster <= 0) {
    throw std::runtime_error("postgres_server: no postmaster.pid in " + dir_);
  }
  std::vector<pid_t> pids{postmaster};
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    std::ifstream status(entry.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("PPid:", 0) != 0) continue;
      if (std::stoi(line.substr(5)) == postmaster) {
        pids.push_back(std::stoi(entry.path().filename().string()));
      }
      break;
    }
  }
  // The children first when freezing, so that the postmaster cannot start one meanwhile.
  if (signal == SIGSTOP) std::reverse(pids.begin(), pids.end());
  for (pid_t pid : pids) kill(pid, signal);
}

void PostgresServer::pg_ctl(const std::string& action) const {
  // Only 127.0.0.1 and the socket in dir_; enough connections for several stores per test.
  const std::string options = "-c listen_addresses=127.0.0.1 -p " + std::to_string(port_) + " -k " +
                              dir_ + " -c max_connections=200";
  const std::string log = dir_ + "/server.log";
  as_postgres(std::string(kBin) + "/pg_ctl -D " + shell_quoted(dir_ + "/data") + " -l " +
              shell_quoted(log) + " -w -t 60 -o " + shell_quoted(options) + " " + action + " >" +
              shell_quoted(dir_ + "/pg_ctl.log") + " 2>&1");
}

void PostgresServer::as_postgres(const std::string& command) const {
  const std::string line =
      (geteuid() == 0 ? "runuser -u postgres -- sh -c " + shell_quoted(command) : command);
  const int rc = std::system(line.c_str());
  if (rc != 0) {
    throw std::runtime_error("postgres_server: `" + command + "` failed (" + std::to_string(rc) +
                             "): " + slurp(dir_ + "/pg_ctl.log") + slurp(dir_ + "/initdb.log") +
                             slurp(dir_ + "/server.log"));
  }
}

}  // namespace fedcase::testing
