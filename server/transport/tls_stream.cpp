#include "server/transport/tls_stream.h"

#include <openssl/err.h>
#include <sys/socket.h>

#include <algorithm>
#include <boost/asio/ssl/error.hpp>
#include <cerrno>
#include <cstdint>
#include <utility>

namespace fedcase::server {
namespace {

namespace net = boost::asio;

// OpenSSL's read buffer: with read-ahead, one receive takes up to this many bytes of records.
// Released whenever it is empty (SSL_MODE_RELEASE_BUFFERS), so idle connections hold none.
constexpr size_t kReadBufferBytes = 256 * 1024;

// OpenSSL's socket BIO writes with write(), which raises SIGPIPE when the peer has gone; this
// one sends with MSG_NOSIGNAL instead (the descriptor is its data), so a closed peer is an
// error of its connection only.
int send_without_sigpipe(BIO* bio, const char* data, int size) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(BIO_get_data(bio)));
  const ssize_t sent = ::send(fd, data, static_cast<size_t>(size), MSG_NOSIGNAL);
  BIO_clear_retry_flags(bio);
  if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
    BIO_set_retry_write(bio);
  }
  return static_cast<int>(sent);
}

const BIO_METHOD* socket_writer() {
  static BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "send");
    BIO_meth_set_write(m, send_without_sigpipe);
    BIO_meth_set_ctrl(m, [](BIO*, int command, long, void*) -> long {
      return command == BIO_CTRL_FLUSH ? 1 : 0;
    });
    return m;
  }();
  return method;
}

}  // namespace

TlsSocketStream::TlsSocketStream(net::ip::tcp::socket socket, SSL_CTX* context)
    : core_(std::make_shared<Core>(std::move(socket), context)) {}

void TlsSocketStream::expires_after(std::chrono::steady_clock::duration timeout) {
  Core& core = *core_;
  core.deadline.expires_after(timeout);
  const uint64_t generation = ++core.deadline_generation;
  core.deadline.async_wait([weak = std::weak_ptr<Core>(core_), generation](error_code ec) {
    auto core = weak.lock();
    if (ec || !core || core->deadline_generation != generation) return;
    core->timed_out = true;
    error_code ignored;
    core->socket.close(ignored);
  });
}

void TlsSocketStream::expires_never() {
  ++core_->deadline_generation;
  core_->deadline.cancel();
}

TlsSocketStream::Core::Core(net::ip::tcp::socket socket_in, SSL_CTX* context)
    : socket(std::move(socket_in)), deadline(socket.get_executor()), ssl(SSL_new(context)) {
  error_code failed;
  socket.non_blocking(true, failed);
  if (failed) socket.close(failed);  // OpenSSL must never block the thread: every attempt fails
  if (!ssl) return;                  // out of memory: every attempt fails
  const int fd = socket.native_handle();
  SSL_set0_rbio(ssl, BIO_new_socket(fd, BIO_NOCLOSE));
  if (BIO* writer = BIO_new(socket_writer())) {
    BIO_set_data(writer, reinterpret_cast<void*>(static_cast<intptr_t>(fd)));
    BIO_set_init(writer, 1);
    SSL_set0_wbio(ssl, writer);
  }
  SSL_set_accept_state(ssl);
  SSL_set_mode(ssl, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS);
  // A peer that closes without close_notify ends the stream like one that sends it: HTTP
  // frames its own messages, so a truncation shows as an incomplete request.
  SSL_set_options(ssl, SSL_OP_IGNORE_UNEXPECTED_EOF);
  SSL_set_read_ahead(ssl, 1);
  SSL_set_default_read_buffer_len(ssl, kReadBufferBytes);
}

TlsSocketStream::Core::~Core() { SSL_free(ssl); }

TlsSocketStream::Attempt TlsSocketStream::Core::attempt(Direction direction, net::mutable_buffer in,
                                                        net::const_buffer out) {
  if (timed_out) return Attempt::finished(boost::beast::error::timeout);
  if (!ssl) return Attempt::finished(net::error::no_memory);
  // OpenSSL holds the descriptor's number: once the socket is closed (by the session, or a
  // deadline) that number may already belong to another connection.
  if (!socket.is_open()) return Attempt::finished(net::error::bad_descriptor);
  switch (direction) {
    case Direction::kHandshake: {
      prepare();
      const int result = SSL_do_handshake(ssl);
      return result == 1 ? Attempt::finished() : fail(result);
    }
    case Direction::kShutdown:
      return shut_down();
    case Direction::kRead: {
      // A failure after some bytes was held back for the read after them.
      if (deferred_error) return Attempt::finished(std::exchange(deferred_error, {}));
      // Decrypts the records already received, up to kMaxReadBytes, before waiting again.
      char* data = static_cast<char*>(in.data());
      const size_t wanted = std::min(in.size(), kMaxReadBytes);
      size_t total = 0;
      while (total < wanted) {
        size_t got = 0;
        prepare();
        const int result = SSL_read_ex(ssl, data + total, wanted - total, &got);
        if (result != 1) {
          Attempt failed = fail(result);
          if (total == 0) return failed;
          if (failed.want == Want::kNothing) deferred_error = failed.error;
          break;
        }
        total += got;
        if (!SSL_has_pending(ssl)) break;
      }
      return Attempt::finished({}, total);
    }
    case Direction::kWrite: {
      if (out.size() == 0) return Attempt::finished();
      // Without partial writes, a write that had to wait is retried with the same buffer
      // until all of it is sent (the operation keeps it).
      size_t written = 0;
      prepare();
      const int result = SSL_write_ex(ssl, out.data(), out.size(), &written);
      return result == 1 ? Attempt::finished({}, written) : fail(result);
    }
  }
  return Attempt::finished();
}

// Sends close_notify (again after a wait, until it is out), then reads and discards what the
// peer still sends (the rest of a refused body, say) until its close_notify or end of stream,
// at most kMaxReadBytes an attempt; the deadline ends a peer that goes on.
TlsSocketStream::Attempt TlsSocketStream::Core::shut_down() {
  if (!close_notify_sent) {
    prepare();
    const int result = SSL_shutdown(ssl);
    if (result < 0) return fail(result);
    close_notify_sent = true;
    if (result == 1) return Attempt::finished();  // the peer's had come already
  }
  char discarded[16 * 1024];
  for (size_t total = 0; total < kMaxReadBytes;) {
    size_t got = 0;
    prepare();
    const int result = SSL_read_ex(ssl, discarded, sizeof(discarded), &got);
    if (result != 1) {
      Attempt failed = fail(result);
      return failed.error == net::error::eof ? Attempt::finished() : failed;
    }
    total += got;
  }
  return Attempt::wait(Want::kRead);
}

void TlsSocketStream::Core::prepare() {
  ERR_clear_error();
  errno = 0;
}

TlsSocketStream::Attempt TlsSocketStream::Core::fail(int result) {
  const int saved_errno = errno;
  switch (SSL_get_error(ssl, result)) {
    case SSL_ERROR_WANT_READ:
      return Attempt::wait(Want::kRead);
    case SSL_ERROR_WANT_WRITE:
      return Attempt::wait(Want::kWrite);
    case SSL_ERROR_ZERO_RETURN:
      return Attempt::finished(net::error::eof);
    case SSL_ERROR_SYSCALL:
      if (ERR_peek_error() == 0) {
        return Attempt::finished(saved_errno
                                     ? error_code(saved_errno, boost::system::system_category())
                                     : error_code(net::error::eof));
      }
      [[fallthrough]];
    default: {
      // An empty error queue still ends the operation with an error, never a success.
      const unsigned long code = ERR_get_error();
      return Attempt::finished(
          code ? error_code(static_cast<int>(code), net::error::get_ssl_category())
               : error_code(net::error::connection_aborted));
    }
  }
}

}  // namespace fedcase::server
