#pragma once
// HAProxy (Debian's `haproxy`, /usr/sbin/haproxy) as a child process in front of coordinator
// replicas on 127.0.0.1, configured as child_process.h's haproxy_config says (the template
// configs/haproxy.cfg, which scripts/lib/cluster.sh uses too). For tests and benchmarks that
// put a real load balancer in front of a cluster.

#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/coordinator_harness.h"

namespace fedcase::testing {

class HaproxyProcess {
 public:
  // Writes `dir`/haproxy.cfg for the replicas on `replica_ports` from configs/haproxy.cfg,
  // starts HAProxy on a free port with its output in `dir`/haproxy.log, and returns once it
  // forwards GET /healthz.
  HaproxyProcess(const std::string& dir, const std::vector<uint16_t>& replica_ports,
                 const HaproxySettings& settings = {})
      : port_(free_local_port()) {
    const std::string config = dir + "/haproxy.cfg";
    std::ofstream(config) << haproxy_config(port_, replica_ports, settings);
    const std::string log = dir + "/haproxy.log";
    pid_ = start_process({kHaproxyBin, "-db", "-f", config}, log);
    Caller probe(port_, "");
    REQUIRE_MESSAGE(wait_until([&] { return probe.get("/healthz").status == 200; }, 20),
                    "HAProxy does not forward /healthz; see " << log);
  }
  ~HaproxyProcess() { kill_process(pid_); }
  HaproxyProcess(const HaproxyProcess&) = delete;
  HaproxyProcess& operator=(const HaproxyProcess&) = delete;

  uint16_t port() const { return port_; }

 private:
  uint16_t port_;
  pid_t pid_ = -1;
};

}  // namespace fedcase::testing
