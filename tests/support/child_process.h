#pragma once
// Child processes on 127.0.0.1 for tests and benchmarks: the coordinator binary, HAProxy in
// front of coordinator replicas. No doctest (benchmarks use it too); the doctest wrappers are
// coordinator_process.h and haproxy_process.h.
//
// Errors: std::runtime_error naming what failed (set-up, never library code).
// Thread safety: free functions with no shared state.

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fedcase::testing {

inline constexpr const char* kHaproxyBin = "/usr/sbin/haproxy";

// A 127.0.0.1 port free at the time of the call (the kernel's pick for port 0).
uint16_t free_local_port();

// Starts the program at argv[0] with `argv`, its standard output and error appended to
// `log_path` and no other descriptor of this process, and returns its pid; the caller reaps it.
// With `max_open_files` > 0 the process may open at most that many files (soft and hard limit).
// `env` ("NAME=value") is set in its environment over this process's.
pid_t start_process(const std::vector<std::string>& argv, const std::string& log_path,
                    rlim_t max_open_files = 0, const std::vector<std::string>& env = {});

// SIGKILL, then waits for it. Nothing for pid <= 0.
void kill_process(pid_t pid);

// The values configs/haproxy.cfg leaves open (HAProxy's time format: "500ms", "10s").
struct HaproxySettings {
  std::string check_interval = "500ms";
  std::string http_request_timeout = "10s";
  int max_connections_per_client = 1000;
  int max_connections = 8000;         // HAProxy's at once, from every client
  int replica_max_connections = 900;  // to one replica at once (more requests queue)
};

// HAProxy's configuration from the template scripts/lib/cluster.sh uses too
// (configs/haproxy.cfg), listening on 127.0.0.1:`port` in front of the replicas on
// 127.0.0.1:`replica_ports`: round robin over those whose GET /healthz answers 200 (out after 2
// failed checks, back after 1 success), timeouts above the coordinators' long polls, a time
// limit on a request's header and a limit on one address's connections, as `settings` say
// (checks faster than the scripts' by default).
std::string haproxy_config(uint16_t port, const std::vector<uint16_t>& replica_ports,
                           const HaproxySettings& settings = {});

}  // namespace fedcase::testing
