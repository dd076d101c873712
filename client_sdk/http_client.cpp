#include "client_sdk/http_client.h"

#include <openssl/ssl.h>

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <chrono>
#include <optional>
#include <variant>

#include "common/crypto.h"

namespace fedcase::client {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;
using Request = http::request<http::span_body<const char>>;  // the body is the caller's

std::string HttpResponse::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

namespace {

// The client side of the coordinator's TLS policy: TLS 1.2+, the server verified against the
// CA file; a client certificate when given. An error names the file and OpenSSL's reason.
Result<std::unique_ptr<ssl::context>> make_client_tls_context(const ConnectionOptions& o) {
  auto context = std::make_unique<ssl::context>(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(context->native_handle(), TLS1_2_VERSION);
  context->set_verify_mode(ssl::verify_peer);
  beast::error_code ec;
  auto failed = [&](const char* what, const std::string& file) {
    return invalid_argument(std::string(what) + " '" + file +
                            "': " + take_openssl_error(ec.message()));
  };
  context->load_verify_file(o.ca_file, ec);
  if (ec) return failed("CA file", o.ca_file);
  if (!o.cert_file.empty()) {
    context->use_certificate_chain_file(o.cert_file, ec);
    if (ec) return failed("client certificate", o.cert_file);
    context->use_private_key_file(o.key_file, ssl::context::pem, ec);
    if (ec) return failed("client key", o.key_file);
  }
  return context;
}

// What a failed TLS connection most likely means, for the caller's error message. (With TLS
// 1.3 a refused client certificate shows at the first read, not in the handshake.)
std::string tls_hint(const beast::error_code& ec) {
  const std::string text = ec.message();
  if (text.find("certificate required") != std::string::npos) {
    return " (the coordinator requires a client certificate: set cert_file and key_file)";
  }
  if (text.find("wrong version number") != std::string::npos ||
      text.find("packet length too long") != std::string::npos) {
    return " (is the coordinator serving plain HTTP on this port?)";
  }
  if (text.find("certificate verify failed") != std::string::npos) {
    return " (the coordinator's certificate is not signed by the CA file, or does not name the "
           "host)";
  }
  return "";
}

}  // namespace

struct HttpClient::Impl {
  ConnectionOptions options;
  net::io_context ioc;
  Result<std::unique_ptr<ssl::context>> tls = std::unique_ptr<ssl::context>();
  // No connection, or a plain or TLS one.
  std::variant<std::monostate, beast::tcp_stream, TlsStream> stream;
  beast::flat_buffer buffer;
  size_t pending = 0;  // requests sent whose answers are not read yet

  bool connected() const { return !std::holds_alternative<std::monostate>(stream); }
  void disconnect() {
    stream.emplace<std::monostate>();
    pending = 0;  // their answers are lost with the connection
  }
  beast::tcp_stream& tcp() {
    if (auto* plain = std::get_if<beast::tcp_stream>(&stream)) return *plain;
    return beast::get_lowest_layer(std::get<TlsStream>(stream));
  }

  // Runs the io_context until `done` or the timeout; a timeout cancels the stream.
  beast::error_code run(bool& done, beast::error_code& ec, double timeout_s) {
    ioc.restart();
    ioc.run_for(std::chrono::milliseconds(int64_t(timeout_s * 1000)));
    if (!done) {
      tcp().cancel();
      ioc.restart();
      ioc.run();  // let the cancelled handler finish
      disconnect();
      return net::error::timed_out;
    }
    return ec;
  }

  // Connects (and over TLS, shakes hands); on failure the message says which step failed.
  Status connect(double timeout_s) {
    const std::string where = options.host + ":" + std::to_string(options.port);
    buffer.clear();
    tcp::resolver resolver(ioc);
    beast::error_code ec;
    auto endpoints = resolver.resolve(options.host, std::to_string(options.port), ec);
    if (ec) return unavailable("cannot resolve " + options.host + ": " + ec.message());
    stream.emplace<beast::tcp_stream>(ioc);
    bool done = false;
    tcp().async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) {
      ec = e;
      done = true;
    });
    if ((ec = run(done, ec, timeout_s))) {
      disconnect();
      return unavailable("cannot connect to " + where + ": " + ec.message());
    }
    if (!options.tls()) return ok_status();
    beast::tcp_stream connected = std::move(std::get<beast::tcp_stream>(stream));
    TlsStream& s = stream.emplace<TlsStream>(std::move(connected), **tls);
    // SNI, and the name the certificate must carry (a DNS name or an IP address).
    boost::system::error_code address_ec;
    net::ip::make_address(options.host, address_ec);
    if (address_ec) SSL_set_tlsext_host_name(s.native_handle(), options.host.c_str());
    X509_VERIFY_PARAM* param = SSL_get0_param(s.native_handle());
    const int named = address_ec ? X509_VERIFY_PARAM_set1_host(param, options.host.c_str(), 0)
                                 : X509_VERIFY_PARAM_set1_ip_asc(param, options.host.c_str());
    if (named != 1) {  // never connect without checking the name
      disconnect();
      return invalid_argument("cannot check the coordinator's certificate for host '" +
                              options.host + "'");
    }
    done = false;
    s.async_handshake(ssl::stream_base::client, [&](beast::error_code e) {
      ec = e;
      done = true;
    });
    if ((ec = run(done, ec, timeout_s))) {
      disconnect();
      return unavailable("TLS handshake with " + where + " failed: " + ec.message() + tls_hint(ec));
    }
    return ok_status();
  }

  // Writes `req` on the connection, within `timeout_s`.
  beast::error_code write(Request& req, double timeout_s) {
    beast::error_code ec;
    bool done = false;
    on_stream([&](auto& s) {
      http::async_write(s, req, [&](beast::error_code e, size_t) {
        ec = e;
        done = true;
      });
    });
    return run(done, ec, timeout_s);
  }

  // Reads the next answer on the connection into `parser`, within `timeout_s`.
  beast::error_code read(http::response_parser<http::string_body>& parser, double timeout_s) {
    beast::error_code ec;
    bool done = false;
    on_stream([&](auto& s) {
      http::async_read(s, buffer, parser, [&](beast::error_code e, size_t) {
        ec = e;
        done = true;
      });
    });
    return run(done, ec, timeout_s);
  }

  // Calls f(stream) on the open plain or TLS stream.
  template <typename F>
  void on_stream(F f) {
    std::visit(
        [&](auto& s) {
          if constexpr (!std::is_same_v<std::decay_t<decltype(s)>, std::monostate>) f(s);
        },
        stream);
  }
};

HttpClient::HttpClient(ConnectionOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  if (impl_->options.tls()) impl_->tls = make_client_tls_context(impl_->options);
}

HttpClient::~HttpClient() = default;

void HttpClient::disconnect() { impl_->disconnect(); }

namespace {

// What `parser` read: the status, the headers (lower-case names) and the body.
HttpResponse response_of(http::response_parser<http::string_body>& parser) {
  auto& res = parser.get();
  HttpResponse out;
  out.status = static_cast<int>(res.result_int());
  out.body = std::move(res.body());
  for (const auto& field : res) {
    std::string name(field.name_string());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return std::tolower(c); });
    out.headers[name] = std::string(field.value());
  }
  return out;
}

}  // namespace

namespace {

// The request, its body read from the caller's `body` (not copied).
Request make_request(const ConnectionOptions& options, const std::string& method,
                     const std::string& target, std::string_view body,
                     const std::map<std::string, std::string>& headers) {
  Request req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, options.host);
  req.set(http::field::user_agent, "fedcase-client");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = {body.data(), body.size()};
  req.prepare_payload();
  return req;
}

double seconds_left(std::chrono::steady_clock::time_point deadline) {
  const double left =
      std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
  return std::max(left, 0.001);
}

}  // namespace

Result<HttpResponse> HttpClient::request(const std::string& method, const std::string& target,
                                         const std::string& body,
                                         const std::map<std::string, std::string>& headers,
                                         double timeout_s, bool keep_partial) {
  Impl& s = *impl_;
  if (!s.tls.ok()) return s.tls.status();
  if (s.pending > 0) return internal_error("request() while pipelined answers are pending");
  Request req = make_request(s.options, method, target, body, headers);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(int64_t(timeout_s * 1000));

  // A kept-alive connection may have been closed by the server: retry once on a fresh one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = s.connected();
    if (!reused) FEDCASE_RETURN_IF_ERROR(s.connect(seconds_left(deadline)));
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ull << 32);
    auto ec = s.write(req, seconds_left(deadline));
    if (!ec) ec = s.read(parser, seconds_left(deadline));
    if (ec) {
      s.disconnect();
      if (keep_partial && parser.is_header_done()) {
        HttpResponse partial = response_of(parser);
        partial.cut = true;
        return partial;
      }
      if (reused && ec != net::error::timed_out) continue;
      return unavailable("request " + method + " " + target + " failed: " + ec.message() +
                         (s.options.tls() ? tls_hint(ec) : ""));
    }
    const bool keep_alive = parser.get().keep_alive();
    HttpResponse out = response_of(parser);
    if (!keep_alive) s.disconnect();
    return out;
  }
  return unavailable("request " + method + " " + target + " failed");
}

Status HttpClient::send(const std::string& method, const std::string& target,
                        std::string_view body,
                        const std::map<std::string, std::string>& headers, double timeout_s) {
  Impl& s = *impl_;
  if (!s.tls.ok()) return s.tls.status();
  Request req = make_request(s.options, method, target, body, headers);
  // A kept-alive connection with no answer pending may have been closed by the server: as
  // request(), try once more on a fresh one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    const bool reused = s.connected();
    const bool answers_pending = s.pending > 0;
    if (!reused) FEDCASE_RETURN_IF_ERROR(s.connect(timeout_s));
    const auto ec = s.write(req, timeout_s);
    if (!ec) {
      ++s.pending;
      return ok_status();
    }
    s.disconnect();
    if (reused && !answers_pending && ec != net::error::timed_out) continue;
    return unavailable("request " + method + " " + target + " failed: " + ec.message() +
                       (s.options.tls() ? tls_hint(ec) : ""));
  }
  return unavailable("request " + method + " " + target + " failed");
}

Result<HttpResponse> HttpClient::receive(double timeout_s) {
  Impl& s = *impl_;
  if (s.pending == 0) {
    return unavailable("no answer is pending: the connection its request went on was closed");
  }
  http::response_parser<http::string_body> parser;
  parser.body_limit(1ull << 32);
  if (const auto ec = s.read(parser, timeout_s)) {
    s.disconnect();
    return unavailable("reading an answer failed: " + ec.message() +
                       (s.options.tls() ? tls_hint(ec) : ""));
  }
  --s.pending;
  const bool keep_alive = parser.get().keep_alive();
  HttpResponse out = response_of(parser);
  if (!keep_alive) s.disconnect();
  return out;
}

size_t HttpClient::pending() const { return impl_->pending; }

}  // namespace fedcase::client
