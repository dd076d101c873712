#pragma once
// HAProxy (Debian's `haproxy`, /usr/sbin/haproxy) as a child process in front of coordinator
// replicas on 127.0.0.1, configured from the template scripts/lib/cluster.sh uses
// (configs/haproxy.cfg): round robin over the replicas whose GET /healthz answers 200 (out
// after 2 failed checks, back after 1 success), timeouts above the coordinators' long polls, a
// time limit on a request's header and a limit on one address's connections; checks are faster
// than the scripts'. For tests and benchmarks that put a real load balancer in front of a
// cluster.

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/coordinator_harness.h"

namespace fedcase::testing {

// A 127.0.0.1 port free at the time of the call (the kernel's pick for port 0).
inline uint16_t free_local_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  REQUIRE(bound);
  return ntohs(address.sin_port);
}

// The values configs/haproxy.cfg leaves open (HAProxy's time format: "500ms", "10s").
struct HaproxySettings {
  std::string check_interval = "500ms";
  std::string http_request_timeout = "10s";
  int max_connections_per_client = 1000;
};

class HaproxyProcess {
 public:
  // Writes `dir`/haproxy.cfg for the replicas on `replica_ports` from configs/haproxy.cfg,
  // starts HAProxy on a free port with its output in `dir`/haproxy.log, and returns once it
  // forwards GET /healthz.
  HaproxyProcess(const std::string& dir, const std::vector<uint16_t>& replica_ports,
                 const HaproxySettings& settings = {})
      : port_(free_local_port()) {
    std::ifstream in(std::string(FEDCASE_SOURCE_DIR) + "/configs/haproxy.cfg");
    REQUIRE(in);
    std::stringstream text;
    text << in.rdbuf();
    std::string cfg = text.str();
    for (const auto& [name, value] :
         {std::pair<std::string, std::string>{"@PORT@", std::to_string(port_)},
          {"@CHECK_INTERVAL@", settings.check_interval},
          {"@HTTP_REQUEST_TIMEOUT@", settings.http_request_timeout},
          {"@MAXCONN_PER_CLIENT@", std::to_string(settings.max_connections_per_client)}}) {
      const size_t at = cfg.find(name);
      REQUIRE_MESSAGE(at != std::string::npos, name);
      cfg.replace(at, name.size(), value);
    }
    for (size_t i = 0; i < replica_ports.size(); ++i) {
      cfg += "  server replica-" + std::to_string(i) +
             " 127.0.0.1:" + std::to_string(replica_ports[i]) + " check\n";
    }
    const std::string config = dir + "/haproxy.cfg";
    std::ofstream(config) << cfg;
    const std::string log = dir + "/haproxy.log";
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      FILE* out = std::fopen(log.c_str(), "a");
      if (out) {
        dup2(fileno(out), STDOUT_FILENO);
        dup2(fileno(out), STDERR_FILENO);
      }
      execl("/usr/sbin/haproxy", "haproxy", "-db", "-f", config.c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
    Caller probe(port_, "");
    REQUIRE_MESSAGE(wait_until([&] { return probe.get("/healthz").status == 200; }, 20),
                    "HAProxy does not forward /healthz; see " << log);
  }
  ~HaproxyProcess() {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  HaproxyProcess(const HaproxyProcess&) = delete;
  HaproxyProcess& operator=(const HaproxyProcess&) = delete;

  uint16_t port() const { return port_; }

 private:
  uint16_t port_;
  pid_t pid_ = -1;
};

}  // namespace fedcase::testing
