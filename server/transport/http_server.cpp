#include "server/transport/http_server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <boost/asio/execution.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <cerrno>
#include <chrono>
#include <list>
#include <thread>
#include <type_traits>

#include "common/log.h"
#include "server/core/base/metrics.h"
#include "server/transport/connection_limits.h"
#include "server/transport/tls.h"
#include "server/transport/tls_stream.h"

namespace fedcase::server {
namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr size_t kHeaderLimit = 16 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);
// A connection's read buffer larger than this (grown by a large request) is given back while
// the connection waits for its next request: a fleet's idle connections hold little memory.
constexpr size_t kIdleReadBufferBytes = 16 * 1024;
constexpr auto kAcceptBackoffMin = std::chrono::milliseconds(10);
constexpr auto kAcceptBackoffMax = std::chrono::milliseconds(1000);
// File descriptors kept beyond the connections for the store, logs and the evaluator.
constexpr rlim_t kSpareDescriptors = 64;

// Raises the soft limit on open files to the hard limit, and warns once when even that is too
// low for `max_connections`.
void raise_descriptor_limit(size_t max_connections) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  // An unlimited hard limit still has the kernel's cap (fs.nr_open, 2^20 by default).
  const rlim_t wanted = limit.rlim_max == RLIM_INFINITY ? rlim_t(1) << 20 : limit.rlim_max;
  if (limit.rlim_cur < wanted) {
    rlimit raised = limit;
    raised.rlim_cur = wanted;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur != RLIM_INFINITY && max_connections + kSpareDescriptors > limit.rlim_cur) {
    log_warn("max_connections is " + std::to_string(max_connections) +
             " but this process may open only " + std::to_string(limit.rlim_cur) +
             " files: beyond about " +
             std::to_string(limit.rlim_cur > kSpareDescriptors ? limit.rlim_cur - kSpareDescriptors
                                                               : 0) +
             " connections, new ones wait in the kernel's queue");
  }
}

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// Logs at most one line a second, counting what it held back: a peer must not be able to fill
// the log with failed handshakes.
class ThrottledLog {
 public:
  void warn(const std::string& line) {
    const auto now = std::chrono::steady_clock::now();
    MutexLock lock(mu_);
    if (now - last_ < std::chrono::seconds(1)) {
      ++held_back_;
      return;
    }
    last_ = now;
    log_warn(held_back_ ? line + " (and " + std::to_string(held_back_) + " more since)" : line);
    held_back_ = 0;
  }

 private:
  Mutex mu_;
  std::chrono::steady_clock::time_point last_ FEDCASE_GUARDED_BY(mu_){};
  uint64_t held_back_ FEDCASE_GUARDED_BY(mu_) = 0;
};

// A session as the server sees it when it stops.
class Drainable {
 public:
  virtual ~Drainable() = default;
  // Posted onto the session's strand: close when idle, answer a waiting poll, and close after
  // the answer to a request in flight.
  virtual void drain() = 0;
};

// What every session shares; owned by HttpServer::Impl and outlives every session.
struct Frontend {
  Frontend(RequestHandler& handler, const CoordinatorConfig& config, Metrics& metrics)
      : handler(handler),
        config(config),
        metrics(metrics),
        upload_bodies(config.max_upload_bodies, config.max_upload_bytes),
        per_address(config.max_connections_per_ip) {}

  // Registers a live session for drain(); returns its place for forget().
  std::list<std::weak_ptr<Drainable>>::iterator remember(std::weak_ptr<Drainable> session) {
    MutexLock lock(sessions_mu);
    return sessions.insert(sessions.end(), std::move(session));
  }
  void forget(std::list<std::weak_ptr<Drainable>>::iterator place) {
    MutexLock lock(sessions_mu);
    sessions.erase(place);
  }

  RequestHandler& handler;
  const CoordinatorConfig& config;
  Metrics& metrics;
  BodySlots upload_bodies;
  AddressConnections per_address;
  std::atomic<size_t> open_connections{0};
  std::atomic<size_t> waiting_polls{0};
  std::atomic<bool> draining{false};
  ThrottledLog handshake_log;
  Mutex sessions_mu;
  std::list<std::weak_ptr<Drainable>> sessions FEDCASE_GUARDED_BY(sessions_mu);
  // Handlers run here, never on I/O threads: uploads apart, so that a queue of folds never
  // delays a heartbeat's answer.
  net::thread_pool* handlers = nullptr;
  net::thread_pool* upload_handlers = nullptr;
};

// One connection, plain (beast::tcp_stream) or TLS (TlsSocketStream): reads a request (idle and
// read timeouts, route body limits, upload admission), hands it to a handler thread, resumes
// on its strand with the answer (or waits for a long poll's wake-up), and writes it back.
template <class Stream>
class Session : public Drainable, public std::enable_shared_from_this<Session<Stream>> {
  static constexpr bool kTls = std::is_same_v<Stream, TlsSocketStream>;

 public:
  // `lease` counts this connection against its address; null refuses the connection with 503.
  // `plain_on_tls_port`: a plain-HTTP request arrived on a TLS port; answer 400 and close.
  Session(Stream&& stream, Frontend& frontend, std::unique_ptr<AddressConnections::Lease> lease,
          std::string peer, bool plain_on_tls_port = false)
      : stream_(std::move(stream)),
        frontend_(frontend),
        lease_(std::move(lease)),
        peer_(std::move(peer)),
        plain_on_tls_port_(plain_on_tls_port) {
    ++frontend_.open_connections;
  }
  ~Session() override {
    if (pending_ && pending_->unwatch) pending_->unwatch(watch_);
    stop_waiting();
    release_body_slot();
    if (registered_) frontend_.forget(place_);
    --frontend_.open_connections;
  }

  // Starts serving (or refusing) on the connection's strand.
  void run(const char* refusal) {
    net::dispatch(executor_, [self = this->shared_from_this(), refusal] {
      if (refusal) return self->send(error_response(unavailable(refusal), 11, false));
      self->place_ = self->frontend_.remember(self);
      self->registered_ = true;
      if (self->frontend_.draining) return self->close();
      if constexpr (kTls) {
        self->start_handshake();
      } else {
        self->do_read_request();
      }
    });
  }

  void drain() override {
    net::post(executor_, [self = this->shared_from_this()] {
      self->draining_ = true;
      if (self->idle_) return self->close();
      if (self->pending_) self->finish_poll(self->pending_->empty());
    });
  }

 private:
  // The socket with its deadline: the stream itself over TLS.
  auto& tcp() { return beast::get_lowest_layer(stream_); }

  void start_handshake() {
    tcp().expires_after(to_ms(frontend_.config.read_timeout_s));
    stream_.async_handshake([self = this->shared_from_this()](beast::error_code ec) {
      if (ec) {
        self->frontend_.handshake_log.warn("TLS handshake with " + self->peer_ +
                                           " failed: " + ec.message());
        return self->close();
      }
      self->do_read_request();
    });
  }

  // Waits up to idle_timeout_s for the first byte of the next request (unless it has arrived
  // already), then gives the whole request read_timeout_s.
  void do_read_request() {
    if (draining_) return close();
    if (buffer_.size() > 0) return do_read_header();
    // An idle connection (a device between two requests) keeps no large read buffer.
    if (buffer_.capacity() > kIdleReadBufferBytes) buffer_.shrink_to_fit();
    idle_ = true;
    tcp().expires_after(to_ms(frontend_.config.idle_timeout_s));
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = this->shared_from_this()](beast::error_code ec, size_t n) {
                              self->idle_ = false;
                              if (ec) return self->close();
                              self->buffer_.commit(n);
                              self->do_read_header();
                            });
  }

  void do_read_header() {
    route_ = "other";
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    // Beast checks Content-Length against the body limit as soon as the header is parsed, so
    // the route's own limit is applied in on_header; until then allow the largest one.
    parser_->body_limit(frontend_.handler.largest_body_limit());
    tcp().expires_after(to_ms(frontend_.config.read_timeout_s));
    http::async_read_header(
        stream_, buffer_, *parser_,
        beast::bind_front_handler(&Session::on_header, this->shared_from_this()));
  }

  void on_header(beast::error_code ec, size_t n) {
    frontend_.metrics.add(metric::kHttpReceivedBytes, {}, double(n));
    if (ec) return on_read_error(ec);
    route_ = frontend_.handler.route_label(parser_->get());
    if (plain_on_tls_port_) {
      return send(error_response(
          invalid_argument("this port speaks TLS: connect with https:// (TLS 1.2 or later)"), 11,
          false));
    }
    if (draining_) {
      return send(error_response(unavailable("the coordinator is shutting down"), 11, false));
    }
    // RFC 9112 6.1: a request whose transfer coding is not (only) chunked cannot be framed.
    const auto& header = parser_->get();
    const auto encodings = header.equal_range(http::field::transfer_encoding);
    for (auto it = encodings.first; it != encodings.second; ++it) {
      if (!beast::iequals(it->value(), "chunked") ||
          header.count(http::field::transfer_encoding) > 1) {
        return send(error_response(
            invalid_argument("Transfer-Encoding other than chunked is not supported"), 11, false));
      }
    }
    const uint64_t limit = frontend_.handler.body_limit(header);
    auto length = parser_->content_length();
    if (length && *length > limit) return on_read_error(http::error::body_limit);
    parser_->body_limit(limit);  // bounds chunked bodies as they arrive
    if (frontend_.handler.is_upload(header)) {
      // Only a registered client may hold one of the few body slots.
      if (std::optional<Response> refusal = frontend_.handler.refuse_upload(header, peer_)) {
        refusal->keep_alive(false);  // its body is not read
        return send(std::move(*refusal));
      }
    }
    // Update uploads, and job creations with a model file (admin and tenants only: body_limit
    // gave anyone else the JSON limit), share the body slots: large bodies are few at once.
    const bool large =
        frontend_.handler.is_upload(header) || limit > frontend_.config.max_json_bytes;
    if (large && !take_body_slot()) return wait_for_body_slot();
    continue_to_body();
  }

  // At most max_upload_bodies large bodies (updates, model files) are in memory at once: one
  // beyond them waits for a slot before its body is read (the peer's TCP window holds the rest).
  bool take_body_slot() {
    std::weak_ptr<Session> weak = this->shared_from_this();
    holds_body_slot_ = frontend_.upload_bodies.acquire([weak] {
      auto self = weak.lock();
      if (!self) return false;
      net::post(self->executor_, [self] { self->on_body_slot(); });
      return true;
    });
    return holds_body_slot_;
  }

  void wait_for_body_slot() {
    waiting_for_slot_ = true;
    tcp().expires_never();
    timer_.expires_after(to_ms(frontend_.config.read_timeout_s));
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec == net::error::operation_aborted || !self->waiting_for_slot_) return;
      self->waiting_for_slot_ = false;
      self->send(error_response(unavailable("too many uploads are being received; retry later"), 11,
                                false));
    });
  }

  void on_body_slot() {
    holds_body_slot_ = true;
    if (!waiting_for_slot_) return release_body_slot();  // gave up meanwhile
    waiting_for_slot_ = false;
    timer_.cancel();
    tcp().expires_after(to_ms(frontend_.config.read_timeout_s));
    continue_to_body();
  }

  void release_body_slot() {
    if (!holds_body_slot_) return;
    holds_body_slot_ = false;
    frontend_.upload_bodies.release();
  }

  void continue_to_body() {
    auto expect = parser_->get().find(http::field::expect);
    if (expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue")) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      http::async_write(stream_, *cont,
                        [self = this->shared_from_this(), cont](beast::error_code ec, size_t) {
                          if (ec) return self->close();
                          self->do_read_body();
                        });
      return;
    }
    do_read_body();
  }

  void do_read_body() {
    body_started_ = std::chrono::steady_clock::now();
    if (auto length = parser_->content_length(); holds_body_slot_ && length) {
      return read_upload_body(*length);
    }
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::on_read, this->shared_from_this()));
  }

  // A large body of known length (already checked against its limit) is read straight into
  // the request's body, in a buffer kept from an earlier body, with reads as large as the
  // socket holds (asio's own completion conditions stop each read at 64 KB), instead of
  // through the parser's 64 KB reads and a copy out of the read buffer.
  void read_upload_body(uint64_t length) {
    request_.emplace(parser_->release());
    std::string& body = request_->body();
    body = frontend_.upload_bodies.take_buffer();
    body.resize(length);
    const size_t buffered = std::min<size_t>(buffer_.size(), length);
    net::buffer_copy(net::buffer(body.data(), buffered), buffer_.data());
    buffer_.consume(buffered);
    frontend_.metrics.add(metric::kHttpReceivedBytes, {}, double(buffered));
    const size_t rest = length - buffered;
    net::async_read(
        stream_, net::buffer(body.data() + buffered, rest),
        [rest](const beast::error_code& ec, size_t read) { return ec ? 0 : rest - read; },
        [self = this->shared_from_this(), buffered](beast::error_code ec, size_t read) {
          if (ec && ec != net::error::operation_aborted && buffered + read > 0) {
            return self->on_cut_body(buffered + read, read);
          }
          self->on_read(ec, read);
        });
  }

  // The connection dropped (or stalled past read_timeout_s) while an upload's body arrived:
  // its handler keeps what it can of the `arrived` bytes that did (RequestContext::
  // body_cut_short), then the connection closes. No answer goes out.
  void on_cut_body(size_t arrived, size_t n) {
    frontend_.metrics.add(metric::kHttpReceivedBytes, {}, double(n));
    tcp().expires_never();
    request_->body().resize(arrived);
    run_handler(/*body_cut_short=*/true);
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return send(error_response(
          too_large("request body exceeds the limit of " +
                    std::to_string(frontend_.handler.body_limit(parser_->get())) + " bytes"),
          11, false));
    }
    if (ec == http::error::header_limit) {
      return send(error_response(too_large("request header too large"), 11, false));
    }
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset) {
      return close();
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category()) {
      return send(
          error_response(invalid_argument("malformed HTTP request: " + ec.message()), 11, false));
    }
    close();
  }

  // The request is whole: its handler runs on a handler thread, and the session resumes on
  // its strand with the reply. Nothing else touches request_ in between.
  void on_read(beast::error_code ec, size_t n) {
    frontend_.metrics.add(metric::kHttpReceivedBytes, {}, double(n));
    if (ec) return on_read_error(ec);
    tcp().expires_never();
    if (!request_) request_.emplace(parser_->release());
    run_handler(/*body_cut_short=*/false);
  }

  // Runs the request's handler on a handler thread; the session resumes on its strand with
  // the reply, or closes when the body was cut short.
  void run_handler(bool body_cut_short) {
    RequestContext context;
    context.receive_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - body_started_).count();
    context.peer = peer_;
    context.body_cut_short = body_cut_short;
    net::thread_pool& pool = holds_body_slot_ ? *frontend_.upload_handlers : *frontend_.handlers;
    // The reply comes back through an executor that counts as outstanding work: with no other
    // operation pending (a drain closes everything else), the I/O threads would otherwise
    // return from run() while the handler works, and nobody would write its reply.
    auto back = net::prefer(executor_, net::execution::outstanding_work.tracked);
    net::post(pool, [self = this->shared_from_this(), context, back] {
      Reply reply = self->frontend_.handler.handle(*self->request_, context);
      net::post(back, [self, reply = std::move(reply), cut = context.body_cut_short]() mutable {
        self->release_request();
        if (cut) return self->close();
        self->on_reply(std::move(reply));
      });
    });
  }

  // The request's body is no longer needed once its handler ran.
  void release_request() {
    if (holds_body_slot_) frontend_.upload_bodies.keep_buffer(std::move(request_->body()));
    request_.reset();
    parser_.reset();
    release_body_slot();
  }

  void on_reply(Reply reply) {
    if (reply.shared_body) {
      return send_shared(std::move(reply.response), reply.shared_body, reply.shared_offset,
                         reply.shared_length);
    }
    if (!reply.poll) return send(std::move(reply.response));
    // A long poll: answered when the coordinator wakes it with a task, or empty at the end of
    // its wait (or at once when the server drains). Nothing runs in between.
    pending_ = std::move(reply);
    if (draining_) return finish_poll(pending_->empty());
    ++polls_;
    poll_waiting_ = true;
    ++frontend_.waiting_polls;
    timer_.expires_after(to_ms(pending_->wait_s));
    timer_.async_wait([self = this->shared_from_this()](beast::error_code ec) {
      if (ec == net::error::operation_aborted || !self->pending_) return;  // answered already
      self->finish_poll(self->pending_->empty());
    });
    watch_and_poll();
  }

  // Arranges a wake-up for when a task may appear, then polls once, so that a task that
  // appeared before the watch is not missed. A wake-up comes from another thread and is
  // posted onto this session's strand, where it polls, and re-arms the watch (which fires
  // once) only when that poll finds nothing. The wake-up keeps only a weak reference (the
  // notifier outlives the I/O threads), and carries its poll's number, so a late wake-up of
  // an earlier poll does nothing.
  void watch_and_poll() {
    std::weak_ptr<Session> weak = this->shared_from_this();
    const uint64_t poll = polls_;
    watch_ = pending_->watch([weak, poll] {
      auto session = weak.lock();
      if (!session) return;
      net::post(session->executor_, [weak, poll] {
        auto self = weak.lock();
        if (self && self->pending_ && self->polls_ == poll) self->on_wake();
      });
    });
    if (std::optional<Response> ready = pending_->poll()) finish_poll(std::move(*ready));
  }

  void on_wake() {
    if (std::optional<Response> ready = pending_->poll()) return finish_poll(std::move(*ready));
    watch_and_poll();
  }

  void finish_poll(Response response) {
    stop_waiting();
    pending_->unwatch(watch_);
    timer_.cancel();
    send(std::move(response));
  }

  void stop_waiting() {
    if (!poll_waiting_) return;
    poll_waiting_ = false;
    --frontend_.waiting_polls;
  }

  void send(Response response) {
    if (draining_) response.keep_alive(false);
    write(std::make_shared<Response>(std::move(response)), nullptr);
  }

  // `header`'s response with `body` as its body, written from the shared blob without a copy.
  // Sends bytes [offset, offset + length) of `body` (clamped to it) after `header`.
  void send_shared(Response header, std::shared_ptr<const std::string> body, size_t offset,
                   size_t length) {
    using SpanResponse = http::response<http::span_body<const char>>;
    if (draining_) header.keep_alive(false);
    offset = std::min(offset, body->size());
    length = std::min(length, body->size() - offset);
    auto res = std::make_shared<SpanResponse>(
        std::move(header.base()), beast::span<const char>(body->data() + offset, length));
    res->prepare_payload();
    write(std::move(res), std::move(body));
  }

  // Writes `res` (`keep` owns what its body points into), then reads the next request or
  // closes as the response says.
  template <class Message>
  void write(std::shared_ptr<Message> res, std::shared_ptr<const std::string> keep) {
    pending_.reset();
    frontend_.metrics.add(metric::kHttpRequests, {{"route", std::string(route_)},
                                                  {"code", std::to_string(res->result_int())}});
    tcp().expires_after(to_ms(frontend_.config.read_timeout_s));
    http::async_write(stream_, *res,
                      [self = this->shared_from_this(), res, keep](beast::error_code ec, size_t n) {
                        self->frontend_.metrics.add(metric::kHttpSentBytes, {}, double(n));
                        if (ec) return self->close();
                        if (!res->keep_alive()) return self->linger_close();
                        self->do_read_request();
                      });
  }

  // Ends a connection after a final answer (413, 503, Connection: close) without losing it:
  // closing a socket with unread request bytes makes the kernel reset the connection, which
  // can destroy the answer in flight. So stop sending (over TLS: send close_notify), discard
  // what the peer still sends until it closes or kLingerTime passes, then close.
  void linger_close() {
    tcp().expires_after(kLingerTime);
    if constexpr (kTls) {
      stream_.async_shutdown(
          [self = this->shared_from_this()](beast::error_code) { self->close(); });
    } else {
      beast::error_code ignored;
      tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
      discard();
    }
  }

  void discard() {
    if (!discard_buffer_) discard_buffer_ = std::make_unique<std::array<char, 16384>>();
    tcp().async_read_some(net::buffer(*discard_buffer_),
                          [self = this->shared_from_this()](beast::error_code ec, size_t) {
                            if (ec) return self->close();
                            self->discard();
                          });
  }

  void close() {
    beast::error_code ignored;
    tcp().socket().shutdown(tcp::socket::shutdown_send, ignored);
    tcp().socket().close(ignored);
  }

  Stream stream_;
  const net::any_io_executor executor_ = tcp().get_executor();  // the connection's strand
  net::steady_timer timer_{executor_};  // a long poll's wait, or an upload's wait for a slot
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<Request> request_;  // the whole request, while its handler runs
  std::optional<Reply> pending_;
  uint64_t watch_ = 0;                // the long poll's wake-up, while pending_
  uint64_t polls_ = 0;                // long polls started on this connection
  bool idle_ = false;                 // waiting for the next request's first byte
  bool poll_waiting_ = false;         // counted in frontend_.waiting_polls
  std::string_view route_ = "other";  // the current request's route template, for metrics
  bool draining_ = false;
  bool waiting_for_slot_ = false;
  bool holds_body_slot_ = false;
  bool registered_ = false;
  std::list<std::weak_ptr<Drainable>>::iterator place_;  // in frontend_.sessions
  std::chrono::steady_clock::time_point body_started_;
  std::unique_ptr<std::array<char, 16384>> discard_buffer_;  // made when lingering
  Frontend& frontend_;
  std::unique_ptr<AddressConnections::Lease> lease_;
  const std::string peer_;
  const bool plain_on_tls_port_;
};

// On a TLS port, the first byte tells a TLS client hello (a handshake record, 0x16) from a
// plain-HTTP request, which gets a readable 400 instead of a failed handshake. The byte is
// peeked, not read, so either session starts from the connection's first byte.
class TlsDetector : public std::enable_shared_from_this<TlsDetector> {
 public:
  TlsDetector(tcp::socket&& socket, Frontend& frontend, SSL_CTX* context,
              std::unique_ptr<AddressConnections::Lease> lease, std::string peer)
      : socket_(std::move(socket)),
        frontend_(frontend),
        context_(context),
        lease_(std::move(lease)),
        peer_(std::move(peer)) {
    ++frontend_.open_connections;  // until its session takes over (and counts it too)
  }
  ~TlsDetector() { --frontend_.open_connections; }

  void run() {
    timer_.expires_after(to_ms(frontend_.config.idle_timeout_s));
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      beast::error_code ignored;
      self->socket_.close(ignored);  // said nothing in time
    });
    wait_for_first_byte();
  }

 private:
  void wait_for_first_byte() {
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this()](beast::error_code ec) {
      if (ec) {  // closed, or timed out
        self->timer_.cancel();
        return;
      }
      unsigned char first = 0;
      const ssize_t peeked =
          ::recv(self->socket_.native_handle(), &first, 1, MSG_PEEK | MSG_DONTWAIT);
      if (peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        return self->wait_for_first_byte();  // a wake-up without data
      }
      self->timer_.cancel();
      if (peeked != 1) return;  // closed
      self->start(first == 0x16);
    });
  }

  void start(bool tls) {
    if (tls) {
      std::make_shared<Session<TlsSocketStream>>(TlsSocketStream(std::move(socket_), context_),
                                                 frontend_, std::move(lease_), std::move(peer_))
          ->run(nullptr);
    } else {
      std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(socket_)), frontend_,
                                                   std::move(lease_), std::move(peer_),
                                                   /*plain_on_tls_port=*/true)
          ->run(nullptr);
    }
  }

  tcp::socket socket_;
  net::steady_timer timer_{socket_.get_executor()};
  Frontend& frontend_;
  SSL_CTX* context_;
  std::unique_ptr<AddressConnections::Lease> lease_;
  std::string peer_;
};

}  // namespace

struct HttpServer::Impl {
  Impl(RequestHandler& handler, const CoordinatorConfig& config, Metrics& metrics)
      : frontend(handler, config, metrics),
        ioc(config.io_threads),
        handlers(config.handler_threads),
        upload_handlers(config.upload_threads),
        acceptor(net::make_strand(ioc)) {
    frontend.handlers = &handlers;
    frontend.upload_handlers = &upload_handlers;
    gauges = metrics.add_collector([this](Metrics& m) {
      m.set(metric::kHttpOpenConnections, {}, double(frontend.open_connections.load()));
      m.set(metric::kLongPollsWaiting, {}, double(frontend.waiting_polls.load()));
    });
  }

  void do_accept() {
    if (!acceptor.is_open()) return;  // closed by a drain or a stop
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) return on_accept_error(ec);
      if (accept_backoff != kAcceptBackoffMin) {
        log_info("accepting connections again after " + std::to_string(failed_accepts) +
                 " failed accepts");
      }
      accept_backoff = kAcceptBackoffMin;
      failed_accepts = 0;
      serve(std::move(socket));
      do_accept();
    });
  }

  // Starts a session for `socket`, or one that answers 503 at once when the server or the
  // peer's address is at its connection limit.
  void serve(tcp::socket socket) {
    beast::error_code ec;
    const std::string peer = socket.remote_endpoint(ec).address().to_string();
    if (ec) return;  // the peer is gone already
    const char* refusal = nullptr;
    std::unique_ptr<AddressConnections::Lease> lease;
    if (frontend.open_connections >= frontend.config.max_connections) {
      refusal = "too many open connections; retry later";
    } else if (!(lease = frontend.per_address.open(peer))) {
      refusal = "too many open connections from this address; retry later";
    }
    // A refusal is written in plain HTTP even on a TLS port: the handshake costs more than
    // the connection is worth, and a TLS client reports a clear protocol error.
    if (tls && !refusal) {
      std::make_shared<TlsDetector>(std::move(socket), frontend, tls->native_handle(),
                                    std::move(lease), peer)
          ->run();
      return;
    }
    std::make_shared<Session<beast::tcp_stream>>(beast::tcp_stream(std::move(socket)), frontend,
                                                 std::move(lease), peer)
        ->run(refusal);
  }

  // Out of file descriptors (or another accept failure): the pending connections stay queued
  // in the kernel, the open ones keep being served, and accepting resumes after a pause that
  // doubles up to kAcceptBackoffMax, logged once per episode instead of once per attempt.
  void on_accept_error(beast::error_code ec) {
    if (failed_accepts++ == 0) {
      log_warn("accept failed: " + ec.message() + "; retrying with backoff (open connections: " +
               std::to_string(frontend.open_connections.load()) + ")");
    }
    accept_timer.expires_after(accept_backoff);
    accept_backoff = std::min(accept_backoff * 2, kAcceptBackoffMax);
    accept_timer.async_wait([this](beast::error_code timer_ec) {
      if (timer_ec == net::error::operation_aborted) return;
      do_accept();
    });
  }

  void close_acceptor() {
    net::post(acceptor.get_executor(), [this] {
      beast::error_code ignored;
      acceptor.close(ignored);
      accept_timer.cancel();
    });
  }

  // Member order matters: sessions (destroyed with the io_context's and the handler pool's
  // pending work) refer to the frontend, so it is declared first and destroyed last.
  Frontend frontend;
  std::unique_ptr<Metrics::Registration> gauges;   // reads frontend
  std::shared_ptr<boost::asio::ssl::context> tls;  // null: plain HTTP
  net::io_context ioc;
  net::thread_pool handlers;
  net::thread_pool upload_handlers;
  tcp::acceptor acceptor;
  net::steady_timer accept_timer{acceptor.get_executor()};  // on the acceptor's strand
  std::chrono::milliseconds accept_backoff = kAcceptBackoffMin;
  uint64_t failed_accepts = 0;
  std::vector<std::thread> threads;
  uint16_t port = 0;
};

HttpServer::HttpServer(RequestHandler& handler, const CoordinatorConfig& config, Metrics& metrics)
    : impl_(std::make_unique<Impl>(handler, config, metrics)) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  Impl& s = *impl_;
  const CoordinatorConfig& config = s.frontend.config;
  if (config.tls.enabled()) {
    auto context = make_server_tls_context(config.tls);
    if (!context.ok()) return context.status();
    s.tls = std::move(context).value();
  }
  beast::error_code ec;
  auto address = net::ip::make_address(config.listen_address, ec);
  if (ec) return invalid_argument("bad listen_address '" + config.listen_address + "'");
  tcp::endpoint endpoint(address, config.port);
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return unavailable("cannot listen on " + config.listen_address + ":" +
                       std::to_string(config.port) + ": " + ec.message());
  }
  s.port = s.acceptor.local_endpoint().port();
  raise_descriptor_limit(config.max_connections);
  s.do_accept();
  for (int i = 0; i < config.io_threads; ++i) s.threads.emplace_back([&s] { s.ioc.run(); });
  return ok_status();
}

uint16_t HttpServer::port() const { return impl_->port; }

bool HttpServer::tls() const { return impl_->tls != nullptr; }

size_t HttpServer::open_connections() const { return impl_->frontend.open_connections; }

bool HttpServer::drain(double timeout_s) {
  Impl& s = *impl_;
  if (s.threads.empty()) return true;
  s.frontend.draining = true;
  s.close_acceptor();
  std::vector<std::shared_ptr<Drainable>> live;
  {
    MutexLock lock(s.frontend.sessions_mu);
    for (const auto& weak : s.frontend.sessions) {
      if (auto session = weak.lock()) live.push_back(std::move(session));
    }
  }
  for (const auto& session : live) session->drain();
  live.clear();
  const auto until = std::chrono::steady_clock::now() + to_ms(timeout_s);
  while (s.frontend.open_connections > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return s.frontend.open_connections == 0;
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (s.threads.empty()) return;
  s.close_acceptor();
  s.ioc.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
  for (net::thread_pool* pool : {&s.handlers, &s.upload_handlers}) {
    pool->stop();
    pool->join();
  }
}

}  // namespace fedcase::server
