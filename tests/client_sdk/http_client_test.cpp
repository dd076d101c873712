// HttpClient's pipelining against a bare TCP server on 127.0.0.1 that answers only once both
// requests arrived: a client that waited for each answer before sending on would never get one.

#include "client_sdk/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <string>
#include <thread>

using namespace fedcase;
using namespace fedcase::client;

namespace {

// Accepts one connection on a port of 127.0.0.1, reads until `wanted` appears in what came,
// then writes `answers`.
class AnswerWhenSeen {
 public:
  AnswerWhenSeen(std::string wanted, std::string answers)
      : wanted_(std::move(wanted)), answers_(std::move(answers)) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    REQUIRE(::listen(listener_, 1) == 0);
    socklen_t length = sizeof address;
    REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~AnswerWhenSeen() {
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
  }
  uint16_t port() const { return port_; }
  const std::string& received() const { return received_; }  // after the answers went

 private:
  void serve() {
    const int connection = ::accept(listener_, nullptr, nullptr);
    if (connection < 0) return;
    char buffer[4096];
    while (received_.find(wanted_) == std::string::npos) {
      const ssize_t n = ::read(connection, buffer, sizeof buffer);
      if (n <= 0) break;
      received_.append(buffer, size_t(n));
    }
    if (received_.find(wanted_) != std::string::npos) {
      (void)!::write(connection, answers_.data(), answers_.size());
    }
    char rest;
    while (::read(connection, &rest, 1) > 0) {
    }
    ::close(connection);
  }

  const std::string wanted_, answers_;
  int listener_ = -1;
  uint16_t port_ = 0;
  std::string received_;
  std::thread thread_;
};

}  // namespace

TEST_CASE("pipelined requests go out before their answers, which come back in order") {
  AnswerWhenSeen server("second body",
                        "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst"
                        "HTTP/1.1 202 Accepted\r\nContent-Length: 6\r\n\r\nsecond");
  HttpClient client(plain_connection("127.0.0.1", server.port()));
  REQUIRE(client.send("PUT", "/one", "first body", {}, 5).ok());
  REQUIRE(client.send("PUT", "/two", "second body", {}, 5).ok());
  CHECK(client.pending() == 2);
  // A plain request now would read the first request's answer as its own.
  CHECK(client.request("GET", "/three", "", {}, 5).status().code() == Code::kInternal);
  auto first = client.receive(5);
  REQUIRE(first.ok());
  CHECK(first->status == 200);
  CHECK(first->body == "first");
  auto second = client.receive(5);
  REQUIRE(second.ok());
  CHECK(second->status == 202);
  CHECK(second->body == "second");
  CHECK(client.pending() == 0);
  CHECK(server.received().find("PUT /one") < server.received().find("PUT /two"));
  // Nothing more is pending: an answer cannot be read.
  CHECK(client.receive(1).status().code() == Code::kUnavailable);
}

TEST_CASE("answers pending on a closed connection are lost, and said so") {
  AnswerWhenSeen server("never sent", "");
  HttpClient client(plain_connection("127.0.0.1", server.port()));
  REQUIRE(client.send("PUT", "/one", "body", {}, 5).ok());
  // The server answers nothing: the wait ends with the timeout, and the connection with it.
  CHECK(client.receive(0.3).status().code() == Code::kUnavailable);
  CHECK(client.pending() == 0);
  CHECK(client.receive(0.3).status().code() == Code::kUnavailable);
}
