#pragma once
// A TCP proxy on 127.0.0.1 (port 0) in front of a server on 127.0.0.1:`target`, that cuts the
// first `cuts` connections whose answers pass `cut_after` bytes: it forwards that many bytes of
// the answer, then closes both ends, as a flaky link drops a download. Every other connection
// passes whole. For tests of resumed downloads. A thread per connection; stops at destruction.

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

namespace fedcase::testing {

class CuttingProxy {
 public:
  CuttingProxy(uint16_t target, size_t cut_after, int cuts)
      : target_(target), cut_after_(cut_after), cuts_left_(cuts) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = loopback(0);
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) ||
        ::listen(listener_, 64)) {
      throw std::runtime_error("the cutting proxy cannot listen");
    }
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~CuttingProxy() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    acceptor_.join();
    for (std::thread& t : connections_) t.join();
  }
  CuttingProxy(const CuttingProxy&) = delete;
  CuttingProxy& operator=(const CuttingProxy&) = delete;

  uint16_t port() const { return port_; }
  int cuts_made() const { return cuts_made_; }

 private:
  static sockaddr_in loopback(uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  }
  void accept_loop() {
    while (!stop_) {
      const int client = ::accept(listener_, nullptr, nullptr);
      if (client < 0) return;
      connections_.emplace_back([this, client] { relay(client); });
    }
  }
  // Forwards both ways until either side closes (or the proxy stops), cutting as configured.
  void relay(int client) {
    const int server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = loopback(target_);
    if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&address), sizeof address)) {
      ::close(client);
      if (server >= 0) ::close(server);
      return;
    }
    size_t answered = 0;
    char buffer[16384];
    while (!stop_) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(fds, 2, 100) < 0) break;
      if (fds[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t n = ::recv(client, buffer, sizeof buffer, 0);
        if (n <= 0 || !send_all(server, buffer, size_t(n))) break;
      }
      if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t n = ::recv(server, buffer, sizeof buffer, 0);
        if (n <= 0) break;
        bool cut = false;
        if (answered + size_t(n) > cut_after_ && cuts_left_.fetch_sub(1) > 0) {
          n = ssize_t(cut_after_ > answered ? cut_after_ - answered : 0);
          cut = true;
          ++cuts_made_;
        }
        if (!send_all(client, buffer, size_t(n)) || cut) break;
        answered += size_t(n);
      }
    }
    ::close(client);
    ::close(server);
  }
  static bool send_all(int fd, const char* data, size_t size) {
    while (size > 0) {
      const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
      if (n <= 0) return false;
      data += n;
      size -= size_t(n);
    }
    return true;
  }

  const uint16_t target_;
  const size_t cut_after_;
  std::atomic<int> cuts_left_;
  std::atomic<int> cuts_made_{0};
  std::atomic<bool> stop_{false};
  int listener_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // the acceptor's thread only, until the join
};

}  // namespace fedcase::testing
