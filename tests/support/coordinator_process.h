#pragma once
// The coordinator binary (FEDCASE_COORDINATOR_BIN) as a child process, for tests that kill it
// or limit its resources.

#include <doctest/doctest.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include <deque>
#include <fstream>
#include <string>

#include "tests/support/child_process.h"
#include "tests/support/coordinator_harness.h"

namespace fedcase::testing {

class CoordinatorProcess {
 public:
  // Starts the binary with `config_path`, its output appended to `log_path`. With
  // `max_open_files` > 0 the process may open at most that many files (soft and hard limit);
  // `env` ("NAME=value", e.g. FEDCASE_CRASH_AT: common/crash_point.h) is set in its
  // environment.
  CoordinatorProcess(const std::string& config_path, const std::string& log_path,
                     rlim_t max_open_files = 0, const std::vector<std::string>& env = {}) {
    pid_ = start_process({FEDCASE_COORDINATOR_BIN, "--config", config_path}, log_path,
                         max_open_files, env);
  }
  ~CoordinatorProcess() { kill_now(); }
  void kill_now() {
    kill_process(pid_);
    pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  // Whether the process is still running (false once it has exited or been killed).
  bool running() {
    if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == pid_) pid_ = -1;
    return pid_ > 0;
  }

 private:
  pid_t pid_ = -1;
};

// Longer than a replica's ownership pass needs on a loaded 2-core machine, where a tick (a
// commit, a selection) can take a second or more.
inline constexpr double kTestLeaseS = 4;

// Writes replica `name`'s config in `dir` for the database at `url` (its port file:
// dir/name.port, its id: name, kTestLeaseS leases), with `settings` over it, and returns its
// path.
inline std::string write_replica_config(const TempDir& dir, const std::string& name,
                                        const std::string& url,
                                        const nlohmann::json& settings = nlohmann::json::object()) {
  const std::string path = dir.file(name + ".json");
  nlohmann::json config = {{"port", 0},
                           {"port_file", dir.file(name + ".port")},
                           {"database", url},
                           {"replica_id", name},
                           {"lease_s", kTestLeaseS},
                           {"admin_token", kAdminToken},
                           {"enrollment_token", kEnrollmentToken},
                           {"eval_data_dir", FEDCASE_FMNIST_DIR},
                           {"eval_samples", 500},
                           {"long_poll_max_s", 2},
                           {"pace", kTestPace}};
  config.update(settings);
  std::ofstream(path) << config.dump(2);
  return path;
}

// The port the coordinator wrote to `port_file`, once it has (0 after 60 s without: a
// loaded 2-core machine starting several replicas at once). Giving up, it shows the end of
// `log_path` (the coordinator's output) when one is named.
inline uint16_t wait_for_port(const std::string& port_file, const std::string& log_path = "") {
  uint16_t port = 0;
  const bool written = wait_until(
      [&] {
        std::ifstream in(port_file);
        return static_cast<bool>(in >> port);
      },
      60);
  if (!written && !log_path.empty()) {
    std::ifstream log(log_path);
    std::deque<std::string> tail;
    for (std::string line; std::getline(log, line);) {
      tail.push_back(line);
      if (tail.size() > 40) tail.pop_front();
    }
    std::string text;
    for (const std::string& line : tail) text += line + "\n";
    MESSAGE("no port in " << port_file << " after 60 s; the end of " << log_path << ":\n"
                          << text);
  }
  return written ? port : 0;
}

}  // namespace fedcase::testing
