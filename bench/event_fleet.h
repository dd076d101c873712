#pragma once
// serve_bench's fleet: every client's keep-alive connection driven from one thread, with
// non-blocking sockets and edge-triggered epoll, plain or TLS (OpenSSL reading straight from
// the socket; its records are written into the connection's own buffer and sent in batches of
// about kSendBatch bytes, one system call each instead of one a 16 KB record). The clients stand
// for devices on other machines; driven this way, they cost the two shared cores little beside the
// coordinator (a thread and an asio client per device cost more than the coordinator's answer, and
// decided the dispatch figure).
//
// Each client, every round: long-polls for its task, downloads the model (counted, not kept),
// waits until every client holds it, then uploads the round's delta, so that the uploads of a
// round arrive together. Requests are written by hand; answers are parsed just enough (status,
// Content-Length). Any failure ends the benchmark (die): its figures would be wrong, with one
// exception: behind a load balancer, a replica that has not followed the round yet refuses the
// task's download (403) or upload (409) until it has (about a second at most), and one that has
// not seen the previous round close yet offers its task again; such a request is sent again
// 100 ms later, at most kMaxRetries times, as the SDK retries after its backoff, and counted
// (retried_polls(), retried_downloads(), retried_uploads()).
// Not thread-safe: run() on one thread; uploads_in_flight() may be read from any.

#include <fcntl.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "bench/http_bench_util.h"
#include "bench/http_wire.h"

namespace fedcase::bench {

class EventFleet {
 public:
  using Clock = std::chrono::steady_clock;
  struct Round {
    Clock::time_point first_upload = Clock::time_point::max();
    Clock::time_point last_answer = Clock::time_point::min();
  };
  // `tokens`: one registered client each; `deltas[r]`: the update every client uploads in
  // round r; `ca_file` non-empty: TLS, the coordinator verified against it as 127.0.0.1;
  // `opened_at(task)`: when the task's round opened (unix seconds); `before_uploads(r)` runs
  // when every client holds round r's model, just before the uploads (the coordinator idle).
  EventFleet(const char* bench, uint16_t port, const std::string& ca_file,
             std::vector<std::string> tokens, const std::vector<std::string>& deltas,
             std::function<double(const nlohmann::json&)> opened_at,
             std::function<void(size_t)> before_uploads)
      : bench_(bench),
        deltas_(deltas),
        opened_at_(std::move(opened_at)),
        before_uploads_(std::move(before_uploads)),
        rounds_(deltas.size()) {
    if (!ca_file.empty() && !(tls_ = make_context(ca_file))) die(bench, "CA file " + ca_file);
    epoll_ = epoll_create1(0);
    if (epoll_ < 0) fail("epoll_create1");
    connections_.resize(tokens.size());
    for (size_t i = 0; i < tokens.size(); ++i) open(connections_[i], port, std::move(tokens[i]));
  }
  ~EventFleet() {
    for (Connection& c : connections_) {
      if (c.ssl) SSL_free(c.ssl);
      if (c.fd >= 0) close(c.fd);
    }
    if (tls_) SSL_CTX_free(tls_);
    if (epoll_ >= 0) close(epoll_);
  }

  // Runs every round; returns the rounds' upload windows. For each poll that was waiting when
  // its round opened (after the first round), dispatch_seconds() holds the time until the
  // task's answer reached the client's socket (the kernel's receive timestamp of its last
  // packet), and dispatch_read_seconds() the time until this thread read it, which adds the
  // wait behind the other clients this one thread drives (their downloads, say).
  std::vector<Round> run() {
    rounds_seen_.assign(rounds_, Round{});
    for (Connection& c : connections_) send_poll(c);
    std::vector<epoll_event> events(256);
    while (done_ < connections_.size()) {
      while (!ready_.empty()) {
        Connection* c = ready_.back();
        ready_.pop_back();
        pump(*c);
      }
      if (done_ == connections_.size()) break;
      int timeout_ms = 1000;
      if (!retrying_.empty()) {
        const double due = std::min_element(retrying_.begin(), retrying_.end())->first;
        timeout_ms = std::clamp(int((due - unix_now()) * 1e3) + 1, 0, 1000);
      }
      const int n = epoll_wait(epoll_, events.data(), int(events.size()), timeout_ms);
      resend_due();
      if (n < 0 && errno != EINTR) fail("epoll_wait");
      for (int i = 0; i < n; ++i) pump(connections_[events[i].data.u32]);
    }
    return rounds_seen_;
  }
  const std::vector<double>& dispatch_seconds() const { return dispatch_s_; }
  const std::vector<double>& dispatch_read_seconds() const { return dispatch_read_s_; }
  int uploads_in_flight() const { return uploads_in_flight_; }
  // Requests sent again (see above), by the stage of the client that sent them.
  size_t retried_polls() const { return retried_[size_t(Stage::kPolling)]; }
  size_t retried_downloads() const { return retried_[size_t(Stage::kDownloading)]; }
  size_t retried_uploads() const { return retried_[size_t(Stage::kUploading)]; }

 private:
  enum class Stage { kPolling, kDownloading, kHolding, kUploading, kDone };
  struct Connection {
    int fd = -1;
    SSL* ssl = nullptr;
    std::string token;
    Stage stage = Stage::kPolling;
    size_t round = 0;
    double poll_sent = 0;   // unix seconds
    double read_at = 0;     // unix seconds of the last read
    double arrived_at = 0;  // unix seconds: the kernel's receive time of the last packet read
    std::string upload_url;
    // The request being written: its head, then a body it does not own.
    std::string head;
    std::string_view body;
    size_t written = 0;  // of head + body
    bool writing = false;
    int retries = 0;  // of the request being made
    // The answer being read: a small body kept, a large one only counted.
    AnswerReader answer{kKeptBody};
    // TLS records not sent yet: out from out_sent on.
    std::string out;
    size_t out_sent = 0;
  };
  static constexpr size_t kKeptBody = size_t(1) << 20;
  static constexpr int kMaxRetries = 100;
  static constexpr double kRetryDelayS = 0.1;
  static constexpr size_t kSendBatch = size_t(256) << 10;

  [[noreturn]] void fail(const std::string& what) {
    die(bench_, what + ": " + (errno ? std::strerror(errno) : "failed"));
  }

  static SSL_CTX* make_context(const std::string& ca_file) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (SSL_CTX_load_verify_locations(ctx, ca_file.c_str(), nullptr) == 1) return ctx;
    SSL_CTX_free(ctx);
    return nullptr;
  }

  // Connects (and shakes hands) blocking, then switches to non-blocking for the rounds.
  void open(Connection& c, uint16_t port, std::string token) {
    c.token = std::move(token);
    c.fd = socket(AF_INET, SOCK_STREAM, 0);
    const sockaddr_in address = loopback_address(port);
    if (c.fd < 0 ||
        connect(c.fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
      fail("connect");
    }
    if (tls_) {
      c.ssl = SSL_new(tls_);
      SSL_set_fd(c.ssl, c.fd);
      X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(c.ssl), "127.0.0.1");
      SSL_set_mode(c.ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
      if (SSL_connect(c.ssl) != 1) die(bench_, "TLS handshake failed");
      BIO* bio = BIO_new(connection_bio());
      BIO_set_data(bio, &c);
      BIO_set_init(bio, 1);
      SSL_set_bio(c.ssl, bio, bio);
    }
    fcntl(c.fd, F_SETFL, fcntl(c.fd, F_GETFL) | O_NONBLOCK);
    const int on = 1;
    setsockopt(c.fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on));
    epoll_event event{};
    event.events = EPOLLIN | EPOLLOUT | EPOLLET;
    event.data.u32 = uint32_t(&c - connections_.data());
    if (epoll_ctl(epoll_, EPOLL_CTL_ADD, c.fd, &event) != 0) fail("epoll_ctl");
  }

  // The BIO of a TLS connection (its data): reads through receive(), and appends what OpenSSL
  // writes to the connection's out, which flush() sends.
  static const BIO_METHOD* connection_bio() {
    static BIO_METHOD* method = [] {
      BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "connection");
      BIO_meth_set_write(m, [](BIO* bio, const char* data, int n) {
        static_cast<Connection*>(BIO_get_data(bio))->out.append(data, size_t(n));
        return n;
      });
      BIO_meth_set_read(m, [](BIO* bio, char* data, int n) {
        BIO_clear_retry_flags(bio);
        const ssize_t r = receive(*static_cast<Connection*>(BIO_get_data(bio)), data, size_t(n));
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) BIO_set_retry_read(bio);
        return int(r);
      });
      BIO_meth_set_ctrl(m, [](BIO*, int command, long, void*) -> long {
        return command == BIO_CTRL_FLUSH ? 1 : 0;
      });
      return m;
    }();
    return method;
  }

  // Plain bytes taken (over TLS: encrypted into c.out), or 0 when the socket would block.
  size_t write_some(Connection& c, const char* data, size_t n) {
    if (c.ssl) {
      if (!flush(c)) return 0;
      size_t taken = 0;
      while (taken < n && c.out.size() < kSendBatch) {
        const int r = SSL_write(c.ssl, data + taken, int(std::min<size_t>(n - taken, 1 << 30)));
        if (r <= 0) die(bench_, "TLS write failed");
        taken += size_t(r);
      }
      flush(c);
      return taken;
    }
    const ssize_t r = send(c.fd, data, n, MSG_NOSIGNAL);
    if (r > 0) return size_t(r);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    fail("send");
  }
  // Sends the TLS records in c.out; false while some are left (the socket would block).
  bool flush(Connection& c) {
    while (c.out_sent < c.out.size()) {
      const ssize_t r =
          send(c.fd, c.out.data() + c.out_sent, c.out.size() - c.out_sent, MSG_NOSIGNAL);
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
      if (r <= 0) fail("send");
      c.out_sent += size_t(r);
    }
    c.out.clear();
    c.out_sent = 0;
    return true;
  }
  // recv(), noting the kernel's receive time of the last packet read in c.arrived_at.
  static ssize_t receive(Connection& c, char* data, size_t n) {
    iovec part{data, n};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
    msghdr message{};
    message.msg_iov = &part;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    const ssize_t r = recvmsg(c.fd, &message, 0);
    if (r <= 0) return r;
    for (cmsghdr* m = CMSG_FIRSTHDR(&message); m; m = CMSG_NXTHDR(&message, m)) {
      if (m->cmsg_level != SOL_SOCKET || m->cmsg_type != SCM_TIMESTAMPNS) continue;
      timespec stamp{};
      std::memcpy(&stamp, CMSG_DATA(m), sizeof(stamp));
      c.arrived_at = double(stamp.tv_sec) + double(stamp.tv_nsec) * 1e-9;
    }
    return r;
  }
  size_t read_some(Connection& c, char* data, size_t n) {
    if (c.ssl) {
      const int r = SSL_read(c.ssl, data, int(n));
      if (r > 0) return size_t(r);
      const int e = SSL_get_error(c.ssl, r);
      if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) return 0;
      die(bench_, "TLS read failed (the coordinator closed the connection?)");
    }
    const ssize_t r = receive(c, data, n);
    if (r > 0) return size_t(r);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    die(bench_, "the coordinator closed a connection");
  }

  void begin(Connection& c, std::string head, std::string_view body = {}) {
    c.retries = 0;
    c.head = std::move(head);
    c.body = body;
    c.written = 0;
    c.writing = true;
    ready_.push_back(&c);
  }
  void send_poll(Connection& c) {
    c.stage = Stage::kPolling;
    c.poll_sent = unix_now();
    begin(c, request_head("GET", "/v1/task?wait=600", c.token) + "\r\n");
  }

  // Writes what it can, then reads what has come; an answer may start the next request.
  void pump(Connection& c) {
    for (bool moved = true; moved;) {
      moved = false;
      while (c.writing) {
        const size_t total = c.head.size() + c.body.size();
        if (c.written == total) {
          if (flush(c)) c.writing = false;
          break;
        }
        const char* from = c.written < c.head.size() ? c.head.data() + c.written
                                                     : c.body.data() + (c.written - c.head.size());
        const size_t left =
            c.written < c.head.size() ? c.head.size() - c.written : total - c.written;
        const size_t n = write_some(c, from, left);
        if (n == 0) break;
        c.written += n;
      }
      if (c.writing || c.stage == Stage::kHolding || c.stage == Stage::kDone) return;
      static char buffer[1 << 18];
      if (size_t n = read_some(c, buffer, sizeof(buffer)); n > 0) {
        c.read_at = unix_now();
        take(c, buffer, n);
        moved = true;
      }
    }
  }

  // Feeds answer bytes in; completes the answer when it is whole.
  void take(Connection& c, const char* data, size_t n) {
    auto answer = c.answer.take(data, n);
    if (!answer.ok()) die(bench_, answer.status().message());
    if (*answer) answered(c, (*answer)->status, (*answer)->body);
  }

  void answered(Connection& c, int status, const std::string& body) {
    // A replica reading the store (a token, a job or a round another wrote a moment ago) says
    // so with 503: asked again shortly, as the SDK does.
    if (status == 503 && c.stage != Stage::kHolding && c.stage != Stage::kDone) {
      return retry_later(c, "503 " + body);
    }
    switch (c.stage) {
      case Stage::kPolling: {
        if (status == 204) return send_poll(c);
        if (status != 200) die(bench_, "poll: " + std::to_string(status) + " " + body);
        const nlohmann::json task = nlohmann::json::parse(body);
        // A replica whose copy of the previous round is not closed yet hands out its task
        // again (the client's update went to another replica): asked again shortly.
        if (task["model_version"] < c.round) return retry_later(c, "poll: a past round's task");
        if (task["model_version"] != c.round) die(bench_, "unexpected model version");
        const double opened = opened_at_(task);
        // The first round opens as the fleet registers, while its connections are still being
        // accepted: its polls are not settled waiting ones, and do not count.
        if (c.round > 0 && c.poll_sent < opened) {
          // A read without a timestamp (none yet on this socket) counts when it was read.
          dispatch_s_.push_back((c.arrived_at > 0 ? c.arrived_at : c.read_at) - opened);
          dispatch_read_s_.push_back(c.read_at - opened);
        }
        c.upload_url = task["upload_url"];
        c.stage = Stage::kDownloading;
        const std::string model_url = task["model_url"];
        return begin(c, request_head("GET", model_url, c.token) + "\r\n");
      }
      case Stage::kDownloading:
        if (status == 403) return retry_later(c, "download: 403 " + body);
        if (status != 200) die(bench_, "download: " + std::to_string(status));
        c.stage = Stage::kHolding;
        if (++holding_ == connections_.size()) start_uploads();
        return;
      case Stage::kUploading:
        if (status == 409) return retry_later(c, "upload: 409 " + body);
        if (status != 200) die(bench_, "upload: " + std::to_string(status) + " " + body);
        rounds_seen_[c.round].last_answer = Clock::now();
        --uploads_in_flight_;
        if (++c.round < rounds_) return send_poll(c);
        c.stage = Stage::kDone;
        ++done_;
        return;
      case Stage::kHolding:
      case Stage::kDone:
        die(bench_, "an answer nobody asked for");
    }
  }

  // The request just refused is sent again in kRetryDelayS (resend_due).
  void retry_later(Connection& c, const std::string& refusal) {
    if (++c.retries > kMaxRetries)
      die(bench_, refusal + " (" + std::to_string(kMaxRetries) + " times)");
    ++retried_[size_t(c.stage)];
    retrying_.emplace_back(unix_now() + kRetryDelayS, &c);
  }
  void resend_due() {
    const double now = unix_now();
    for (size_t i = 0; i < retrying_.size();) {
      if (retrying_[i].first > now) {
        ++i;
        continue;
      }
      Connection& c = *retrying_[i].second;
      retrying_[i] = retrying_.back();
      retrying_.pop_back();
      if (c.stage == Stage::kPolling) c.poll_sent = now;
      c.written = 0;
      c.writing = true;
      ready_.push_back(&c);
    }
  }

  // Every client holds the model: all upload at once.
  void start_uploads() {
    holding_ = 0;
    const size_t round = connections_.front().round;
    before_uploads_(round);
    rounds_seen_[round].first_upload = Clock::now();
    uploads_in_flight_ = int(connections_.size());
    const std::string& delta = deltas_[round];
    for (Connection& c : connections_) {
      c.stage = Stage::kUploading;
      begin(c, upload_head(c.upload_url, c.token, delta.size()), delta);
    }
  }

  static double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  const char* bench_;
  const std::vector<std::string>& deltas_;
  std::function<double(const nlohmann::json&)> opened_at_;
  std::function<void(size_t)> before_uploads_;
  const size_t rounds_;
  SSL_CTX* tls_ = nullptr;
  int epoll_ = -1;
  std::vector<Connection> connections_;
  std::vector<Connection*> ready_;
  std::vector<std::pair<double, Connection*>> retrying_;  // (unix seconds due, connection)
  size_t retried_[size_t(Stage::kDone) + 1] = {};
  size_t holding_ = 0, done_ = 0;
  std::atomic<int> uploads_in_flight_{0};
  std::vector<Round> rounds_seen_;
  std::vector<double> dispatch_s_, dispatch_read_s_;
};

}  // namespace fedcase::bench
