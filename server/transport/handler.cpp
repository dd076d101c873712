#include "server/transport/handler.h"

#include <nlohmann/json.hpp>

#include "common/log.h"
#include "protocol/error_reply.h"

namespace fedcase::server {

Response error_response(const Status& status, unsigned http_version, bool keep_alive) {
  if (status.code() == Code::kInternal && status.message() != kInternalErrorMessage) {
    log_error("request failed: " + status.to_string());
    return error_response(internal_error(std::string(kInternalErrorMessage)), http_version,
                          keep_alive);
  }
  Response res{static_cast<http::status>(http_status(status.code())), http_version};
  res.set(http::field::content_type, "application/json");
  if (status.code() == Code::kUnauthenticated) res.set(http::field::www_authenticate, "Bearer");
  if (status.code() == Code::kUnavailable) res.set(http::field::retry_after, "1");
  res.keep_alive(keep_alive);
  // A status message may quote the caller's text, which may hold invalid UTF-8: replaced.
  res.body() = protocol::write_error_reply({code_name(status.code()), status.message()})
                   .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  res.prepare_payload();
  return res;
}

}  // namespace fedcase::server
