#pragma once
// A small blocking HTTP/1.1 client for the SDK: one keep-alive connection to the coordinator,
// plain or TLS, every call bounded by a timeout, reconnecting transparently when the
// connection was closed. Not thread-safe: one HttpClient per client thread.

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "common/status.h"

namespace fedcase::client {

// Where the coordinator is and how to reach it.
struct ConnectionOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;
  // With a CA file the connection is TLS (1.2 or later): the coordinator's certificate must
  // chain to a certificate in this PEM file and name `host` (DNS name or IP address).
  std::string ca_file;
  // Mutual TLS: the client's PEM certificate chain and private key, when the coordinator asks.
  std::string cert_file;
  std::string key_file;
  bool tls() const { return !ca_file.empty(); }
};

// Plain HTTP to host:port (a coordinator on 127.0.0.1 or a trusted network).
inline ConnectionOptions plain_connection(std::string host, uint16_t port) {
  ConnectionOptions options;
  options.host = std::move(host);
  options.port = port;
  return options;
}

struct HttpResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  // The body stopped before its end (the connection dropped, or the timeout passed, after the
  // header): `body` holds what arrived. Only with request(..., keep_partial).
  bool cut = false;
  std::string header(const std::string& name) const;
};

class HttpClient {
 public:
  // A bad CA, certificate or key file is reported by every request() (kInvalidArgument).
  explicit HttpClient(ConnectionOptions options);
  ~HttpClient();

  // Sends one request and reads the whole response. kUnavailable when the coordinator cannot
  // be reached, the connection or the TLS handshake fails (the message says why: refused,
  // certificate not trusted, wrong host name, not a TLS port), or `timeout_s` passes; any HTTP
  // status is a successful call (the caller interprets it). With `keep_partial`, a response
  // whose body is cut off after its header is returned with what arrived (`cut`), so that a
  // download can resume from there.
  Result<HttpResponse> request(const std::string& method, const std::string& target,
                               const std::string& body,
                               const std::map<std::string, std::string>& headers, double timeout_s,
                               bool keep_partial = false);

  // HTTP/1.1 pipelining, for requests whose bodies should keep a slow link busy (an update's
  // chunks): send() writes a request on the connection (opening one when there is none)
  // without reading its answer; receive() reads the answer of the oldest request sent and not
  // answered yet. The coordinator takes a connection's requests in order, so the link carries
  // the next body while it handles the previous one. A failed send() or receive() closes the
  // connection, and the answers of the requests still unanswered on it are lost (receive()
  // then fails until send() opens a new one). request() may not be called while answers are
  // pending (kInternal). `body` must outlive the send() call only. Errors as
  // request()'s.
  Status send(const std::string& method, const std::string& target, std::string_view body,
              const std::map<std::string, std::string>& headers, double timeout_s);
  Result<HttpResponse> receive(double timeout_s);
  // Requests sent by send() whose answers receive() has not read.
  size_t pending() const;

  // Closes the connection, if one is open; the next request opens a new one.
  void disconnect();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedcase::client
