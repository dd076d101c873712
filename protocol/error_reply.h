#pragma once
// The body of every error answer of the coordinator (docs/protocol.md, "Limits and errors"):
// {"error": {"code": "conflict", "message": "round 3 of job 1 is not open for updates"}}.
// The coordinator writes it; the SDK and the `fedcase` command read it to say why.
//
// Pure functions over plain values; thread-safe. Untrusted input gives a Status, never an
// exception.

#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace fedcase::protocol {

// Both members are required (the body's one member `error` holds them).
struct ErrorReply {
  std::string code;     // stable, lower-case: code_name (common/status.h) or "method_not_allowed"
  std::string message;  // for people

  bool operator==(const ErrorReply& o) const { return code == o.code && message == o.message; }
  bool operator!=(const ErrorReply& o) const { return !(*this == o); }
};

// kInvalidArgument naming the field for a body without an `error` object or with a missing
// or mistyped member. Unknown keys are ignored.
Result<ErrorReply> read_error_reply(const nlohmann::json& body);
nlohmann::json write_error_reply(const ErrorReply& error);

}  // namespace fedcase::protocol
