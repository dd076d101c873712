#pragma once
// HAProxy (Debian's `haproxy`, /usr/sbin/haproxy) as a child process in front of coordinator
// replicas on 127.0.0.1: round robin over the replicas whose GET /healthz answers 200 (checked
// every 500 ms, out after 2 failures, back after 1 success), with timeouts above the
// coordinators' long polls; the configuration scripts/lib/cluster.sh writes, with faster checks.
// For tests and benchmarks that put a real load balancer in front of a cluster.

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
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

class HaproxyProcess {
 public:
  // Writes `dir`/haproxy.cfg for the replicas on `replica_ports`, starts HAProxy on a free port
  // with its output in `dir`/haproxy.log, and returns once it forwards GET /healthz.
  HaproxyProcess(const std::string& dir, const std::vector<uint16_t>& replica_ports)
      : port_(free_local_port()) {
    const std::string config = dir + "/haproxy.cfg";
    {
      std::ofstream out(config);
      out << "global\n  maxconn 4000\n"
          << "defaults\n  mode http\n  timeout connect 2s\n  timeout client 120s\n"
          << "  timeout server 120s\n  timeout http-keep-alive 60s\n"
          << "frontend fedcase\n  bind 127.0.0.1:" << port_ << "\n  default_backend replicas\n"
          << "backend replicas\n  balance roundrobin\n  option httpchk GET /healthz\n"
          << "  http-check expect status 200\n  default-server inter 500ms fall 2 rise 1\n";
      for (size_t i = 0; i < replica_ports.size(); ++i) {
        out << "  server replica-" << i << " 127.0.0.1:" << replica_ports[i] << " check\n";
      }
    }
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
