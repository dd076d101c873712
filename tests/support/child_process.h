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
pid_t start_process(const std::vector<std::string>& argv, const std::string& log_path,
                    rlim_t max_open_files = 0);

// SIGKILL, then waits for it. Nothing for pid <= 0.
void kill_process(pid_t pid);

// HAProxy's configuration listening on 127.0.0.1:`port` in front of the replicas on
// 127.0.0.1:`replica_ports`: round robin over those whose GET /healthz answers 200 (checked
// every 500 ms, out after 2 failures, back after 1 success), with client and server timeouts
// of 120 s, above the coordinators' long polls (the configuration scripts/lib/cluster.sh
// writes, with faster checks).
std::string haproxy_config(uint16_t port, const std::vector<uint16_t>& replica_ports);

}  // namespace fedcase::testing
