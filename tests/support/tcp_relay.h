#pragma once
// A TCP relay on 127.0.0.1 (port 0) in front of a server on 127.0.0.1:`target`: each accepted
// connection gets one to the target and a thread that forwards the bytes both ways, 64 KiB
// reads at a time, asking `pass` how many of the bytes just read go on and whether the
// connection is cut after them. What flaky and slow links are made of (cutting_proxy.h,
// bench/shaped_link.h). `pass` is called from the connections' threads at once; the relay
// stops and joins them at destruction.

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

namespace fedcase::testing {

class TcpRelay {
 public:
  enum Direction { kRequests = 0, kAnswers = 1 };
  struct Verdict {
    size_t bytes = 0;  // of those read, the ones forwarded
    bool cut = false;  // then both ends are closed
  };
  // `message`: the bytes this connection already forwarded of the message in flight that way
  // (a message is what one side sends until the other one sends: HTTP/1.1 takes turns); `n`:
  // the bytes just read.
  using Pass = std::function<Verdict(Direction way, size_t message, size_t n)>;

  TcpRelay(uint16_t target, Pass pass) : target_(target), pass_(std::move(pass)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = loopback(0);
    if (listener_ < 0 || ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) ||
        ::listen(listener_, 64)) {
      throw std::runtime_error("the relay cannot listen");
    }
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  ~TcpRelay() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    ::close(listener_);
    acceptor_.join();
    for (std::thread& t : connections_) t.join();
  }
  TcpRelay(const TcpRelay&) = delete;
  TcpRelay& operator=(const TcpRelay&) = delete;

  uint16_t port() const { return port_; }

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
  // Forwards both ways until either side closes, a verdict cuts, or the relay stops.
  void relay(int client) {
    const int server = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address = loopback(target_);
    if (server < 0 || ::connect(server, reinterpret_cast<sockaddr*>(&address), sizeof address)) {
      ::close(client);
      if (server >= 0) ::close(server);
      return;
    }
    size_t message[2] = {0, 0};
    std::vector<char> buffer(64 << 10);
    bool open = true;
    while (open && !stop_) {
      pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
      if (::poll(fds, 2, 100) < 0) break;
      for (int from = kRequests; from <= kAnswers && open; ++from) {
        if (!(fds[from].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::recv(from == kRequests ? client : server, buffer.data(),
                                 buffer.size(), 0);
        if (n <= 0) {
          open = false;
          break;
        }
        message[1 - from] = 0;  // the other side's message ended
        const Verdict verdict = pass_(Direction(from), message[from], size_t(n));
        message[from] += verdict.bytes;
        open = send_all(from == kRequests ? server : client, buffer.data(), verdict.bytes) &&
               !verdict.cut;
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
  const Pass pass_;
  std::atomic<bool> stop_{false};
  int listener_ = -1;
  uint16_t port_ = 0;
  std::thread acceptor_;
  std::vector<std::thread> connections_;  // the acceptor's thread only, until the join
};

}  // namespace fedcase::testing
