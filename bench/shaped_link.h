#pragma once
// A slow, flaky link for transfer_bench: a TCP relay (tests/support/tcp_relay.h) on 127.0.0.1
// in front of a server on 127.0.0.1:`target`, that paces each direction to `rate` bytes a
// second (one token bucket per direction, shared by every connection: the link's capacity, as
// a tbf qdisc shapes an interface) and cuts the connection in flight each time `cut_every`
// more bytes crossed it one way (it forwards up to the boundary, then closes both ends). It
// counts the bytes each way and times the transfer begun each way: from the first to the last
// byte of its large messages (a model's body, an update's chunks), so that the small messages
// around it (a task poll, a chunk's answer) do not stretch it. Thread-safe.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <thread>

#include "tests/support/tcp_relay.h"

namespace fedcase::bench {

class ShapedLink {
 public:
  using Clock = std::chrono::steady_clock;
  using Relay = fedcase::testing::TcpRelay;
  enum Direction { kUp = Relay::kRequests, kDown = Relay::kAnswers };

  ShapedLink(uint16_t target, double rate, uint64_t cut_every)
      : rate_(rate),
        cut_every_(cut_every),
        relay_(target, [this](Relay::Direction way, size_t at, size_t n) {
          bool cut = false;
          const size_t now = admit(Direction(way), at, n, cut);
          return Relay::Verdict{now, cut};
        }) {}

  uint16_t port() const { return relay_.port(); }
  int cuts(Direction d) const { return cuts_[d]; }
  uint64_t bytes(Direction d) const {
    std::lock_guard<std::mutex> lock(mu_);
    return way_[d].bytes;
  }
  // Marks the start of a transfer in direction `d`: it counts from the next byte of a large
  // message.
  void begin(Direction d) {
    std::lock_guard<std::mutex> lock(mu_);
    Way& w = way_[d];
    w.mark = w.bytes;
    w.started = w.ended = false;
  }
  // The seconds of the transfer begun in direction `d`: from the first to the last byte of its
  // large messages, as the link carried them (0 before its first). One transfer at a time: it
  // ends when one begins the other way.
  double seconds(Direction d) const {
    std::lock_guard<std::mutex> lock(mu_);
    const Way& w = way_[d];
    return w.started ? std::chrono::duration<double>(w.last - w.first).count() : 0;
  }

 private:
  struct Way {
    uint64_t bytes = 0;          // forwarded so far
    Clock::time_point next{};    // when the bucket lets the next byte through
    uint64_t mark = UINT64_MAX;  // begin(): the transfer's first byte (none yet)
    bool started = false;
    bool ended = false;  // the other direction's transfer began
    Clock::time_point first{}, last{};
  };

  // A message longer than this is a transfer's payload; shorter ones are what goes around it.
  static constexpr size_t kSmallMessage = 16 << 10;

  // How many of `n` bytes, at byte `at` of their message, go in direction `d` (up to the next
  // cut), once the bucket lets them through; `cut` tells that the connection ends after them.
  size_t admit(Direction d, size_t at, size_t n, bool& cut) {
    Clock::time_point until;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Way& w = way_[d];
      const uint64_t boundary = (w.bytes / cut_every_ + 1) * cut_every_;
      cut = w.bytes + n >= boundary;
      if (cut) n = size_t(boundary - w.bytes);
      const Clock::time_point now = Clock::now();
      w.next = std::max(w.next, now) + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(double(n) / rate_));
      until = w.next;
      w.bytes += n;
      if (w.bytes > w.mark && !w.ended && at + n > kSmallMessage) {
        if (!w.started) {
          w.started = true;
          w.first = now;
          way_[1 - d].ended = way_[1 - d].started;
        }
        w.last = until;
      }
    }
    std::this_thread::sleep_until(until);
    if (cut) ++cuts_[d];
    return n;
  }

  const double rate_;
  const uint64_t cut_every_;
  mutable std::mutex mu_;
  Way way_[2];
  std::atomic<int> cuts_[2] = {0, 0};
  Relay relay_;  // last: its threads stop before the link's state goes
};

}  // namespace fedcase::bench
