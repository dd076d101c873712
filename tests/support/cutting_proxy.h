#pragma once
// A TCP proxy on 127.0.0.1 (port 0) in front of a server on 127.0.0.1:`target`, that cuts the
// first `cuts` answers longer than `cut_after` bytes (and, with Direction::kBoth, the first
// `cuts` requests too): it forwards `cut_after` bytes of it, then closes both ends, as a flaky
// link drops a download or an upload. Everything else passes whole (tcp_relay.h: a message is
// what one side sends until the other one sends). It counts the bytes it forwarded each way.
// For tests of resumed transfers; stops at destruction.

#include <atomic>
#include <cstdint>

#include "tests/support/tcp_relay.h"

namespace fedcase::testing {

class CuttingProxy {
 public:
  enum class Direction { kAnswers, kBoth };
  CuttingProxy(uint16_t target, size_t cut_after, int cuts,
               Direction direction = Direction::kAnswers)
      : cut_after_(cut_after),
        cuts_left_{direction == Direction::kBoth ? cuts : 0, cuts},
        relay_(target, [this](TcpRelay::Direction way, size_t message, size_t n) {
          return pass(way, message, n);
        }) {}

  uint16_t port() const { return relay_.port(); }
  int cuts_made() const { return cuts_made_; }
  uint64_t request_bytes() const { return bytes_[TcpRelay::kRequests]; }  // to the server
  uint64_t answer_bytes() const { return bytes_[TcpRelay::kAnswers]; }    // to the client

 private:
  TcpRelay::Verdict pass(TcpRelay::Direction way, size_t message, size_t n) {
    TcpRelay::Verdict verdict{n, false};
    if (message + n > cut_after_ && cuts_left_[way].fetch_sub(1) > 0) {
      verdict = {cut_after_ > message ? cut_after_ - message : 0, true};
      ++cuts_made_;
    }
    bytes_[way] += verdict.bytes;
    return verdict;
  }

  const size_t cut_after_;
  std::atomic<int> cuts_left_[2];  // by TcpRelay::Direction
  std::atomic<int> cuts_made_{0};
  std::atomic<uint64_t> bytes_[2] = {0, 0};
  TcpRelay relay_;  // last: its threads stop before the counters go
};

}  // namespace fedcase::testing
