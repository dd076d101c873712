#pragma once
// A small blocking HTTP/1.1 client for the SDK: one keep-alive connection to the coordinator,
// plain or TLS, every call bounded by a timeout, reconnecting transparently when the
// connection was closed. Not thread-safe: one HttpClient per client thread.

#include <map>
#include <memory>
#include <string>

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

  // Closes the connection, if one is open; the next request opens a new one.
  void disconnect();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedcase::client
