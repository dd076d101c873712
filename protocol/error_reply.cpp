#include "protocol/error_reply.h"

#include "protocol/internal.h"

namespace fedcase::protocol {
namespace internal {

Status read(const nlohmann::json& value, const std::string& where, ErrorReply& out, Keys* keys) {
  ObjectReader body(value, where);
  body.require("error");
  if (const nlohmann::json* error = body.member("error")) {
    ObjectReader r(*error, body.path("error"));
    r.require("code").text("code", out.code).require("message").text("message", out.message);
    body.merge(finish(r, keys));
  }
  return body.status();
}

}  // namespace internal

Result<ErrorReply> read_error_reply(const nlohmann::json& body) {
  return internal::read_message<ErrorReply>(body, "answer");
}

nlohmann::json write_error_reply(const ErrorReply& e) {
  return {{"error", {{"code", e.code}, {"message", e.message}}}};
}

}  // namespace fedcase::protocol
