#include "server/http_server.h"

#include <sys/resource.h>

#include <array>
#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <chrono>

#include "common/log.h"

namespace fedcase::server {
namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;

constexpr size_t kHeaderLimit = 16 * 1024;
constexpr auto kLingerTime = std::chrono::seconds(2);
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

class Session : public std::enable_shared_from_this<Session> {
 public:
  // `open_connections` counts live sessions; it must outlive them.
  Session(tcp::socket&& socket, Api& api, const CoordinatorConfig& config,
          std::atomic<size_t>& open_connections)
      : stream_(std::move(socket)),
        timer_(stream_.get_executor()),
        api_(api),
        config_(config),
        open_connections_(open_connections) {
    ++open_connections_;
  }
  ~Session() {
    if (pending_ && pending_->unwatch) pending_->unwatch(watch_);
    --open_connections_;
  }

  void run() {
    net::dispatch(stream_.get_executor(),
                  beast::bind_front_handler(&Session::do_read_header, shared_from_this()));
  }

  // Answers 503 at once and closes: the server is at its connection limit.
  void refuse() {
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] {
      self->send(error_response(unavailable("too many open connections; retry later"), 11, false));
    });
  }

 private:
  void do_read_header() {
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    // Beast checks Content-Length against the body limit as soon as the header is parsed, so
    // the route's own limit is applied in on_header; until then allow the largest one.
    parser_->body_limit(std::max(config_.max_upload_bytes, config_.max_json_bytes));
    stream_.expires_after(to_ms(config_.read_timeout_s));
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::on_header, shared_from_this()));
  }

  void on_header(beast::error_code ec, size_t) {
    if (ec) return on_read_error(ec);
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
    const uint64_t limit = api_.body_limit(parser_->get());
    auto length = parser_->content_length();
    if (length && *length > limit) return on_read_error(http::error::body_limit);
    parser_->body_limit(limit);  // bounds chunked bodies as they arrive
    auto expect = parser_->get().find(http::field::expect);
    if (expect != parser_->get().end() && beast::iequals(expect->value(), "100-continue")) {
      auto cont = std::make_shared<http::response<http::empty_body>>(http::status::continue_, 11);
      http::async_write(stream_, *cont,
                        [self = shared_from_this(), cont](beast::error_code ec, size_t) {
                          if (ec) return self->close();
                          self->do_read_body();
                        });
      return;
    }
    do_read_body();
  }

  void do_read_body() {
    body_started_ = std::chrono::steady_clock::now();
    http::async_read(stream_, buffer_, *parser_,
                     beast::bind_front_handler(&Session::on_read, shared_from_this()));
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return send(
          error_response(too_large("request body exceeds the limit of " +
                                   std::to_string(api_.body_limit(parser_->get())) + " bytes"),
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

  void on_read(beast::error_code ec, size_t) {
    if (ec) return on_read_error(ec);
    stream_.expires_never();
    const double receive_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - body_started_).count();
    Reply reply = api_.handle(parser_->get(), receive_seconds);
    if (!reply.poll) return send(std::move(reply.response));
    // A long poll: answered when the coordinator wakes it with a task, or empty at the end of
    // its wait. Nothing runs in between.
    pending_ = std::move(reply);
    ++polls_;
    timer_.expires_after(to_ms(pending_->wait_s));
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec == net::error::operation_aborted || !self->pending_) return;  // answered already
      self->finish_poll(std::move(self->pending_->response));
    });
    watch_and_poll();
  }

  // Arranges a wake-up for when a task may appear, then polls once, so that a task that
  // appeared before the watch is not missed. A wake-up comes from another thread and is
  // posted onto this session's strand; a watch fires once, so each wake-up re-arms it.
  // The wake-up keeps only a weak reference (the notifier outlives the I/O threads), and
  // carries its poll's number, so a late wake-up of an earlier poll does nothing.
  void watch_and_poll() {
    std::weak_ptr<Session> weak = shared_from_this();
    const uint64_t poll = polls_;
    watch_ = pending_->watch([weak, poll] {
      auto session = weak.lock();
      if (!session) return;
      net::post(session->executor_, [weak, poll] {
        auto self = weak.lock();
        if (self && self->pending_ && self->polls_ == poll) self->watch_and_poll();
      });
    });
    if (std::optional<Response> ready = pending_->poll()) finish_poll(std::move(*ready));
  }

  void finish_poll(Response response) {
    pending_->unwatch(watch_);
    timer_.cancel();
    send(std::move(response));
  }

  void send(Response response) {
    pending_.reset();
    auto res = std::make_shared<Response>(std::move(response));
    stream_.expires_after(to_ms(config_.read_timeout_s));
    http::async_write(stream_, *res,
                      [self = shared_from_this(), res](beast::error_code ec, size_t) {
                        if (ec) return self->close();
                        if (!res->keep_alive()) return self->linger_close();
                        self->do_read_header();
                      });
  }

  // Ends a connection after a final answer (413, 503, Connection: close) without losing it:
  // closing a socket with unread request bytes makes the kernel reset the connection, which
  // can destroy the answer in flight. So stop sending, discard what the peer still sends until
  // it closes or kLingerTime passes, then close.
  void linger_close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLingerTime);
    discard();
  }

  void discard() {
    stream_.async_read_some(net::buffer(discard_buffer_),
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              if (ec) return self->close();
                              self->discard();
                            });
  }

  void close() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<Reply> pending_;
  uint64_t watch_ = 0;  // the long poll's wake-up, while pending_
  uint64_t polls_ = 0;  // long polls started on this connection
  const net::any_io_executor executor_ = stream_.get_executor();  // the connection's strand
  std::chrono::steady_clock::time_point body_started_;
  std::array<char, 16384> discard_buffer_;
  Api& api_;
  const CoordinatorConfig& config_;
  std::atomic<size_t>& open_connections_;
};

}  // namespace

struct HttpServer::Impl {
  Impl(Api& api, const CoordinatorConfig& config)
      : api(api), config(config), ioc(config.io_threads), acceptor(net::make_strand(ioc)) {}

  void do_accept() {
    acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == net::error::operation_aborted) return;
      if (ec) return on_accept_error(ec);
      if (accept_backoff != kAcceptBackoffMin) {
        log_info("accepting connections again after " + std::to_string(failed_accepts) +
                 " failed accepts");
      }
      accept_backoff = kAcceptBackoffMin;
      failed_accepts = 0;
      const bool full = open_connections >= config.max_connections;
      auto session = std::make_shared<Session>(std::move(socket), api, config, open_connections);
      if (full)
        session->refuse();
      else
        session->run();
      do_accept();
    });
  }

  // Out of file descriptors (or another accept failure): the pending connections stay queued
  // in the kernel, the open ones keep being served, and accepting resumes after a pause that
  // doubles up to kAcceptBackoffMax, logged once per episode instead of once per attempt.
  void on_accept_error(beast::error_code ec) {
    if (failed_accepts++ == 0) {
      log_warn("accept failed: " + ec.message() + "; retrying with backoff (open connections: " +
               std::to_string(open_connections.load()) + ")");
    }
    accept_timer.expires_after(accept_backoff);
    accept_backoff = std::min(accept_backoff * 2, kAcceptBackoffMax);
    accept_timer.async_wait([this](beast::error_code timer_ec) {
      if (timer_ec == net::error::operation_aborted) return;
      do_accept();
    });
  }

  Api& api;
  const CoordinatorConfig& config;
  net::io_context ioc;
  tcp::acceptor acceptor;
  net::steady_timer accept_timer{acceptor.get_executor()};  // on the acceptor's strand
  std::chrono::milliseconds accept_backoff = kAcceptBackoffMin;
  uint64_t failed_accepts = 0;
  std::vector<std::thread> threads;
  std::atomic<size_t> open_connections{0};
  uint16_t port = 0;
};

HttpServer::HttpServer(Api& api, const CoordinatorConfig& config)
    : impl_(std::make_unique<Impl>(api, config)) {}

HttpServer::~HttpServer() { stop(); }

Status HttpServer::start() {
  Impl& s = *impl_;
  beast::error_code ec;
  auto address = net::ip::make_address(s.config.listen_address, ec);
  if (ec) return invalid_argument("bad listen_address '" + s.config.listen_address + "'");
  tcp::endpoint endpoint(address, s.config.port);
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return unavailable("cannot listen on " + s.config.listen_address + ":" +
                       std::to_string(s.config.port) + ": " + ec.message());
  }
  s.port = s.acceptor.local_endpoint().port();
  raise_descriptor_limit(s.config.max_connections);
  s.do_accept();
  for (int i = 0; i < s.config.io_threads; ++i) s.threads.emplace_back([&s] { s.ioc.run(); });
  return ok_status();
}

uint16_t HttpServer::port() const { return impl_->port; }

void HttpServer::stop() {
  Impl& s = *impl_;
  if (s.threads.empty()) return;
  net::post(s.acceptor.get_executor(), [&s] {
    beast::error_code ignored;
    s.acceptor.close(ignored);
  });
  s.ioc.stop();
  for (auto& t : s.threads) t.join();
  s.threads.clear();
}

}  // namespace fedcase::server
