#include "common/status.h"

namespace fedcase {

int http_status(Code code) {
  switch (code) {
    case Code::kOk: return 200;
    case Code::kInvalidArgument: return 400;
    case Code::kUnauthenticated: return 401;
    case Code::kPermissionDenied: return 403;
    case Code::kNotFound: return 404;
    case Code::kConflict: return 409;
    case Code::kGone: return 410;
    case Code::kTooLarge: return 413;
    case Code::kUnprocessable: return 422;
    case Code::kResourceExhausted: return 429;
    case Code::kUnavailable: return 503;
    case Code::kInternal: return 500;
  }
  return 500;
}

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kUnauthenticated: return "unauthenticated";
    case Code::kPermissionDenied: return "permission_denied";
    case Code::kNotFound: return "not_found";
    case Code::kConflict: return "conflict";
    case Code::kGone: return "gone";
    case Code::kTooLarge: return "too_large";
    case Code::kUnprocessable: return "unprocessable";
    case Code::kResourceExhausted: return "resource_exhausted";
    case Code::kUnavailable: return "unavailable";
    case Code::kInternal: return "internal";
  }
  return "internal";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string out = std::string(code_name(code_)) + ": " + message_;
  if (!detail_.empty()) out += " (" + detail_ + ")";
  return out;
}

}  // namespace fedcase
