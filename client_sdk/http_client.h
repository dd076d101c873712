#pragma once
// A small blocking HTTP/1.1 client for the SDK: one keep-alive connection to the coordinator,
// every call bounded by a timeout, reconnecting transparently when the connection was closed.
// Not thread-safe: one HttpClient per client thread.

#include <map>
#include <memory>
#include <string>

#include "common/status.h"

namespace fedcase::client {

struct HttpResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string header(const std::string& name) const;
};

class HttpClient {
 public:
  HttpClient(std::string host, uint16_t port);
  ~HttpClient();

  // Sends one request and reads the whole response. kUnavailable when the coordinator cannot
  // be reached, the connection breaks, or `timeout_s` passes; any HTTP status is a successful
  // call (the caller interprets it).
  Result<HttpResponse> request(const std::string& method, const std::string& target,
                               const std::string& body,
                               const std::map<std::string, std::string>& headers,
                               double timeout_s);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fedcase::client
