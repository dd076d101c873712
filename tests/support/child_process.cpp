#include "tests/support/child_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <stdexcept>

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
                    rlim_t max_open_files) {
  // Everything the child needs is made before fork(): it only duplicates descriptors and execs.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
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
    execv(args[0], args.data());
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

std::string haproxy_config(uint16_t port, const std::vector<uint16_t>& replica_ports) {
  std::ostringstream out;
  out << "global\n  maxconn 4000\n"
      << "defaults\n  mode http\n  timeout connect 2s\n  timeout client 120s\n"
      << "  timeout server 120s\n  timeout http-keep-alive 60s\n"
      << "frontend fedcase\n  bind 127.0.0.1:" << port << "\n  default_backend replicas\n"
      << "backend replicas\n  balance roundrobin\n  option httpchk GET /healthz\n"
      << "  http-check expect status 200\n  default-server inter 500ms fall 2 rise 1\n";
  for (size_t i = 0; i < replica_ports.size(); ++i) {
    out << "  server replica-" << i << " 127.0.0.1:" << replica_ports[i] << " check\n";
  }
  return out.str();
}

}  // namespace fedcase::testing
