#pragma once
// Status and Result<T>: the error type of every library layer (storage, scheduling,
// aggregation, ml). A Status carries a code that maps one-to-one onto an HTTP status, so the
// server can turn any error into a response without guessing, and a message that a caller may
// read. What only an operator may read (a database's own error text, with its hosts, sockets
// and database names; a replica's name) goes in its detail, which logs show (to_string) and no
// answer to a request ever carries.

#include <optional>
#include <string>
#include <utility>

namespace fedcase {

enum class Code {
  kOk,
  kInvalidArgument,    // malformed input (400)
  kUnauthenticated,    // missing or unknown credentials (401)
  kPermissionDenied,   // known caller, not allowed (403)
  kNotFound,           // (404)
  kConflict,           // valid request, wrong state: closed round, duplicate upload (409)
  kGone,               // what the request continues is no longer wanted: a dropped upload (410)
  kTooLarge,           // body or value over a configured bound (413)
  kUnprocessable,      // well-formed but semantically invalid: shape, NaN, norm (422)
  kResourceExhausted,  // throttled (429)
  kUnavailable,        // temporarily unable to serve (503)
  kInternal,           // a bug or an I/O failure on our side (500)
};

// HTTP status code for `code` (200 for kOk).
int http_status(Code code);
// Stable lower-case name for `code`, used in JSON error bodies ("invalid_argument", ...).
const char* code_name(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(Code code, std::string message, std::string detail = {})
      : code_(code), message_(std::move(message)), detail_(std::move(detail)) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // For the operator's log only ("" for none).
  const std::string& detail() const { return detail_; }
  // "code: message", and " (detail)" when there is one: for logs.
  std::string to_string() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
  std::string detail_;
};

inline Status ok_status() { return {}; }
inline Status invalid_argument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status unauthenticated(std::string m) { return {Code::kUnauthenticated, std::move(m)}; }
inline Status permission_denied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
inline Status not_found(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status conflict(std::string m) { return {Code::kConflict, std::move(m)}; }
inline Status gone(std::string m) { return {Code::kGone, std::move(m)}; }
inline Status too_large(std::string m) { return {Code::kTooLarge, std::move(m)}; }
inline Status unprocessable(std::string m) { return {Code::kUnprocessable, std::move(m)}; }
inline Status resource_exhausted(std::string m) { return {Code::kResourceExhausted, std::move(m)}; }
inline Status unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status internal_error(std::string m) { return {Code::kInternal, std::move(m)}; }

// A value or the Status that explains why there is none. Never both.
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = internal_error("Result built from an OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace fedcase

// Returns early from the enclosing function when `expr` (a Status) is not OK.
#define FEDCASE_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::fedcase::Status fedcase_status_ = (expr);        \
    if (!fedcase_status_.ok()) return fedcase_status_; \
  } while (0)
