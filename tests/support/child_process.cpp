#include "tests/support/child_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace fedcase::testing {

uint16_t free_local_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                     getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  close(fd);
  if (!bound) throw std::runtime_error("no free port on 127.0.0.1");
  return ntohs(address.sin_port);
}

pid_t start_process(const std::vector<std::string>& argv, const std::string& log_path,
                    rlim_t max_open_files, const std::vector<std::string>& env) {
  // Everything the child needs is made before fork(): it only duplicates descriptors and execs.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& mine : env)
      replaced |= mine.compare(0, name.size() + 1, std::string(name) + "=") == 0;
    if (!replaced) envp.push_back(*e);
  }
  for (const std::string& mine : env) envp.push_back(const_cast<char*>(mine.c_str()));
  envp.push_back(nullptr);
  const int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) throw std::runtime_error("cannot open " + log_path);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(log, STDOUT_FILENO);
    dup2(log, STDERR_FILENO);
    // Nothing else is inherited: a descriptor the parent was given (a lock held by the command
    // that runs it, a socket) would otherwise stay open, and held, for as long as the child
    // lives, even after the parent died without killing it.
    close_range(3, ~0U, 0);
    if (max_open_files > 0) {
      const rlimit limit{max_open_files, max_open_files};
      setrlimit(RLIMIT_NOFILE, &limit);
    }
    execve(args[0], args.data(), envp.data());
    _exit(127);
  }
  close(log);
  if (pid < 0) throw std::runtime_error("fork failed for " + argv[0]);
  return pid;
}

void kill_process(pid_t pid) {
  if (pid <= 0) return;
  ::kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
}

std::string haproxy_config(uint16_t port, const std::vector<uint16_t>& replica_ports,
                           const HaproxySettings& settings) {
  const std::string path = std::string(FEDCASE_SOURCE_DIR) + "/configs/haproxy.cfg";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  std::string config = text.str();
  for (const auto& [name, value] :
       {std::pair<std::string, std::string>{"@PORT@", std::to_string(port)},
        {"@CHECK_INTERVAL@", settings.check_interval},
        {"@HTTP_REQUEST_TIMEOUT@", settings.http_request_timeout},
        {"@MAXCONN_PER_CLIENT@", std::to_string(settings.max_connections_per_client)},
        {"@MAXCONN@", std::to_string(settings.max_connections)},
        {"@REPLICA_MAXCONN@", std::to_string(settings.replica_max_connections)}}) {
    size_t at = config.find(name);
    if (at == std::string::npos) throw std::runtime_error(path + " has no " + name);
    for (; at != std::string::npos; at = config.find(name, at + value.size())) {
      config.replace(at, name.size(), value);
    }
  }
  for (size_t i = 0; i < replica_ports.size(); ++i) {
    config += "  server replica-" + std::to_string(i) +
              " 127.0.0.1:" + std::to_string(replica_ports[i]) + " check\n";
  }
  return config;
}

}  // namespace fedcase::testing
