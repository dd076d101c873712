#pragma once
// A raw TCP connection to a coordinator on 127.0.0.1, for tests that send bytes no HTTP client
// would (slow, pipelined, malformed). Blocking POSIX socket with a receive timeout; optionally
// from another loopback address (127.0.0.0/8 is all loopback on Linux), as a separate peer.

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace fedcase::testing {

class RawConnection {
 public:
  RawConnection(uint16_t port, const std::string& from = "127.0.0.1")
      : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    REQUIRE(inet_pton(AF_INET, from.c_str(), &local.sin_addr) == 1);
    REQUIRE(::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local)) == 0);
    sockaddr_in remote{};
    remote.sin_family = AF_INET;
    remote.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
    REQUIRE(::connect(fd_, reinterpret_cast<sockaddr*>(&remote), sizeof(remote)) == 0);
    set_receive_timeout(10);
  }
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  void set_receive_timeout(double seconds) {
    timeval tv{static_cast<time_t>(seconds),
               static_cast<suseconds_t>((seconds - static_cast<time_t>(seconds)) * 1e6)};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }

  // False when the peer has closed or reset the connection.
  bool send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }

  // What arrives until the coordinator closes the connection, `max_bytes` have come, or the
  // receive timeout passes without a byte.
  std::string read(size_t max_bytes = std::string::npos) {
    std::string out;
    char buffer[4096];
    while (out.size() < max_bytes) {
      ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        closed_ = n == 0 || errno == ECONNRESET;
        break;
      }
      out.append(buffer, static_cast<size_t>(n));
    }
    return out;
  }

  // Whether the last read ended because the coordinator closed the connection.
  bool closed() const { return closed_; }

 private:
  int fd_;
  bool closed_ = false;
};

// Sends `bytes` on every connection of `connections` each 200 ms (a slow loris's trickle)
// until none takes them any more or `until` has come.
inline void trickle(const std::vector<std::unique_ptr<RawConnection>>& connections,
                    const std::string& bytes, std::chrono::steady_clock::time_point until) {
  while (std::chrono::steady_clock::now() < until) {
    bool any_open = false;
    for (const auto& c : connections) any_open |= c->send(bytes);
    if (!any_open) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace fedcase::testing
