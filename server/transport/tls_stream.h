#pragma once
// A server-side TLS connection that OpenSSL reads and writes straight on the socket's
// descriptor: records go from the kernel into OpenSSL's read buffer (several per system call)
// and are decrypted there, with no intermediate copies through memory BIOs; one read decrypts,
// and one write encrypts, at most 64 KB, so that a long body does not hold its thread.
// Readiness waits are asio's, so the stream serves Beast's HTTP reads and writes like
// beast::tcp_stream does, with the same kind of deadline (expires_after / expires_never).
//
// Threads: every member, and every operation's completion, runs on the socket's executor (the
// connection's strand); the stream is not safe for concurrent use. One operation of each
// direction may be in flight, as with any asio stream.
// Errors: a deadline that passes closes the socket, and the operation then in flight (or the
// next one) fails with beast::error::timeout; the peer's close_notify ends reads with
// net::error::eof; OpenSSL's failures carry its reason in asio's SSL error category.

#include <openssl/ssl.h>

#include <boost/asio/compose.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <type_traits>
#include <vector>

namespace fedcase::server {

class TlsSocketStream {
 public:
  using executor_type = boost::asio::any_io_executor;
  using error_code = boost::system::error_code;

  // Takes the accepted `socket` (its executor becomes the stream's) and a new server-side
  // session of `context` (not owned; must outlive the stream).
  TlsSocketStream(boost::asio::ip::tcp::socket socket, SSL_CTX* context);

  executor_type get_executor() { return core_->socket.get_executor(); }
  boost::asio::ip::tcp::socket& socket() { return core_->socket; }

  // The deadline of the operations from now on (as beast::tcp_stream's).
  void expires_after(std::chrono::steady_clock::duration timeout);
  void expires_never();

  // Handler: void(error_code).
  template <class Token>
  auto async_handshake(Token&& token) {
    return start<void(error_code)>(Direction::kHandshake, {}, {}, {}, std::forward<Token>(token));
  }
  // Sends close_notify, then reads and drops what the peer still sends until its close_notify
  // or end of stream (bounded by the deadline). Handler: void(error_code).
  template <class Token>
  auto async_shutdown(Token&& token) {
    return start<void(error_code)>(Direction::kShutdown, {}, {}, {}, std::forward<Token>(token));
  }
  // Reads at least one byte into the first non-empty buffer. Handler: void(error_code, size_t).
  template <class Buffers, class Token>
  auto async_read_some(const Buffers& buffers, Token&& token) {
    return start<void(error_code, size_t)>(Direction::kRead,
                                           first_nonempty<boost::asio::mutable_buffer>(buffers), {},
                                           {}, std::forward<Token>(token));
  }
  // Writes up to kMaxWriteBytes of the first non-empty buffer, or the whole sequence when it
  // is small (one record instead of one a buffer). Handler: void(error_code, size_t).
  template <class Buffers, class Token>
  auto async_write_some(const Buffers& buffers, Token&& token) {
    std::vector<char> gathered = gather(buffers);
    const boost::asio::const_buffer out =
        gathered.empty() ? boost::asio::const_buffer(boost::asio::buffer(
                               first_nonempty<boost::asio::const_buffer>(buffers), kMaxWriteBytes))
                         : boost::asio::const_buffer(gathered.data(), gathered.size());
    return start<void(error_code, size_t)>(Direction::kWrite, {}, out, std::move(gathered),
                                           std::forward<Token>(token));
  }

 private:
  enum class Direction { kHandshake, kRead, kWrite, kShutdown };
  enum class Want { kNothing, kRead, kWrite };

  // What an attempt did: finished (with `error` and `bytes`) or must wait for the socket.
  struct Attempt {
    static Attempt finished(error_code error = {}, size_t bytes = 0) {
      return {Want::kNothing, error, bytes};
    }
    static Attempt wait(Want want) { return {want, {}, 0}; }
    Want want;
    error_code error;
    size_t bytes;
  };

  // Shared with the operations in flight and (weakly) with the deadline's timer, so that
  // neither outlives what it touches.
  struct Core {
    Core(boost::asio::ip::tcp::socket socket, SSL_CTX* context);
    ~Core();
    Attempt attempt(Direction direction, boost::asio::mutable_buffer in,
                    boost::asio::const_buffer out);
    Attempt shut_down();
    // Before each OpenSSL call: its error queue and errno say only what that call did.
    void prepare();
    Attempt fail(int result);

    boost::asio::ip::tcp::socket socket;
    boost::asio::steady_timer deadline;
    SSL* ssl;
    uint64_t deadline_generation = 0;
    bool timed_out = false;
    bool close_notify_sent = false;
    error_code deferred_error;  // a read's failure after some bytes, for the next read
  };

  // The most one read decrypts and one write encrypts: while records keep arriving (or the
  // socket keeps taking them), an operation would otherwise go on through a whole upload or
  // download and hold its thread from every other connection's work. Four records.
  static constexpr size_t kMaxReadBytes = 64 * 1024;
  static constexpr size_t kMaxWriteBytes = 64 * 1024;
  // Buffer sequences up to this size (an HTTP header and a short body) are sent as one record.
  static constexpr size_t kGatherLimit = 16 * 1024;

  // The first non-empty buffer of `buffers` (Buffer: mutable_buffer or const_buffer).
  template <class Buffer, class Buffers>
  static Buffer first_nonempty(const Buffers& buffers) {
    for (auto it = boost::asio::buffer_sequence_begin(buffers);
         it != boost::asio::buffer_sequence_end(buffers); ++it) {
      Buffer b(*it);
      if (b.size() > 0) return b;
    }
    return {};
  }
  // A copy of a sequence of several buffers of kGatherLimit bytes at most in all; empty
  // otherwise (the first buffer is sent as it is).
  template <class Buffers>
  static std::vector<char> gather(const Buffers& buffers);

  // Tries the operation at once and after each readiness wait the attempt asks for; an
  // operation that finishes without waiting completes through a post, never inline.
  // kTransfers: the handler takes the bytes transferred too.
  template <bool kTransfers>
  struct Operation {
    std::shared_ptr<Core> core;
    Direction direction;
    boost::asio::mutable_buffer in;
    boost::asio::const_buffer out;  // into `gathered` when that is not empty
    std::vector<char> gathered;     // moves with the operation; its bytes stay in place
    bool waited = false;
    std::optional<Attempt> result;  // set once finished (want is kNothing)

    template <class Self>
    void operator()(Self& self, error_code wait_error = {}) {
      if (!result && wait_error) {
        result = Attempt::finished(core->timed_out ? boost::beast::error::timeout : wait_error);
      }
      if (result) {
        if constexpr (kTransfers) {
          self.complete(result->error, result->bytes);
        } else {
          self.complete(result->error);
        }
        return;
      }
      Attempt attempt = core->attempt(direction, in, out);
      if (attempt.want == Want::kNothing) {
        result = attempt;
        if (waited) return (*this)(self);
        return boost::asio::post(core->socket.get_executor(), std::move(self));
      }
      waited = true;
      core->socket.async_wait(attempt.want == Want::kRead
                                  ? boost::asio::ip::tcp::socket::wait_read
                                  : boost::asio::ip::tcp::socket::wait_write,
                              std::move(self));
    }
  };

  template <class Signature, class Token>
  auto start(Direction direction, boost::asio::mutable_buffer in, boost::asio::const_buffer out,
             std::vector<char> gathered, Token&& token) {
    constexpr bool kTransfers = std::is_same_v<Signature, void(error_code, size_t)>;
    return boost::asio::async_compose<Token, Signature>(
        Operation<kTransfers>{core_, direction, in, out, std::move(gathered), false, std::nullopt},
        token, core_->socket);
  }

  std::shared_ptr<Core> core_;
};

template <class Buffers>
std::vector<char> TlsSocketStream::gather(const Buffers& buffers) {
  size_t total = 0;
  size_t count = 0;
  for (auto it = boost::asio::buffer_sequence_begin(buffers);
       it != boost::asio::buffer_sequence_end(buffers); ++it) {
    const size_t size = boost::asio::const_buffer(*it).size();
    count += size > 0;
    total += size;
  }
  if (count <= 1 || total > kGatherLimit) return {};
  std::vector<char> gathered(total);
  boost::asio::buffer_copy(boost::asio::buffer(gathered), buffers);
  return gathered;
}

}  // namespace fedcase::server
