#include "client_sdk/http_client.h"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>
#include <optional>

namespace fedcase::client {

namespace beast = boost::beast;
namespace http = beast::http;
namespace net = boost::asio;
using tcp = net::ip::tcp;

std::string HttpResponse::header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? std::string() : it->second;
}

struct HttpClient::Impl {
  std::string host;
  uint16_t port;
  net::io_context ioc;
  std::optional<beast::tcp_stream> stream;
  beast::flat_buffer buffer;

  // Runs the io_context until `done` or the timeout; a timeout cancels the stream.
  beast::error_code run(bool& done, beast::error_code& ec, double timeout_s) {
    ioc.restart();
    ioc.run_for(std::chrono::milliseconds(int64_t(timeout_s * 1000)));
    if (!done) {
      stream->cancel();
      ioc.restart();
      ioc.run();  // let the cancelled handler finish
      stream.reset();
      return net::error::timed_out;
    }
    return ec;
  }

  beast::error_code connect(double timeout_s) {
    stream.emplace(ioc);
    buffer.clear();
    tcp::resolver resolver(ioc);
    beast::error_code ec;
    auto endpoints = resolver.resolve(host, std::to_string(port), ec);
    if (ec) return ec;
    bool done = false;
    stream->async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) {
      ec = e;
      done = true;
    });
    return run(done, ec, timeout_s);
  }

  beast::error_code exchange(http::request<http::string_body>& req,
                             http::response_parser<http::string_body>& parser, double timeout_s) {
    beast::error_code ec;
    bool done = false;
    http::async_write(*stream, req, [&](beast::error_code e, size_t) {
      if (e) {
        ec = e;
        done = true;
        return;
      }
      http::async_read(*stream, buffer, parser, [&](beast::error_code e2, size_t) {
        ec = e2;
        done = true;
      });
    });
    return run(done, ec, timeout_s);
  }
};

HttpClient::HttpClient(std::string host, uint16_t port) : impl_(std::make_unique<Impl>()) {
  impl_->host = std::move(host);
  impl_->port = port;
}

HttpClient::~HttpClient() = default;

Result<HttpResponse> HttpClient::request(const std::string& method, const std::string& target,
                                         const std::string& body,
                                         const std::map<std::string, std::string>& headers,
                                         double timeout_s) {
  Impl& s = *impl_;
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, s.host);
  req.set(http::field::user_agent, "fedcase-client");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();

  // A kept-alive connection may have been closed by the server: retry once on a fresh one.
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = s.stream.has_value();
    if (!reused) {
      if (auto ec = s.connect(timeout_s)) {
        s.stream.reset();
        return unavailable("cannot connect to " + s.host + ":" + std::to_string(s.port) + ": " +
                           ec.message());
      }
    }
    http::response_parser<http::string_body> parser;
    parser.body_limit(1ull << 32);
    auto ec = s.exchange(req, parser, timeout_s);
    if (ec) {
      s.stream.reset();
      if (reused && ec != net::error::timed_out) continue;
      return unavailable("request " + method + " " + target + " failed: " + ec.message());
    }
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
    if (!res.keep_alive()) s.stream.reset();
    return out;
  }
  return unavailable("request " + method + " " + target + " failed");
}

}  // namespace fedcase::client
