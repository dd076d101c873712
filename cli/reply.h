#pragma once
// What the `fedcase` client prints and the exit code it returns, for each way a call can end:
// a usage error, a coordinator that cannot be reached, or the coordinator's answer.

#include <string>

#include "cli/args.h"
#include "common/status.h"

namespace fedcase::cli {

struct Outcome {
  int exit_code = 0;  // one of cli/exit_codes.h
  std::string out;    // for standard output
  std::string err;    // for standard error
};

// The exit code for an HTTP status: 2xx kExitOk, 401/403 kExitAuth, 404 kExitNotFound, any
// other 4xx kExitRefused, anything else (5xx, 1xx, 3xx) kExitServerError.
int exit_code_for_http(int status);

// A command line parse_args refused: its message and a pointer to `fedcase help`.
Outcome usage_failure(const Status& status);

// The call never got an answer (HttpClient::request failed): names the URL and suggests
// checking that the coordinator runs; kExitUnreachable.
Outcome transport_failure(const Invocation& inv, const Status& status);

// The coordinator's answer `body` with HTTP `status` to the request of `inv`. On success, the
// subcommand's table or summary (with --json the answer pretty-printed: for `rounds` its
// `rounds` array, for `clients --job` only that job's clients). On failure, the server's error
// message with what it means (401: the token was not accepted). An answer that is not JSON or
// lacks what the view needs gives kExitServerError. `now_s` (Unix seconds) dates client ages.
Outcome interpret_reply(const Invocation& inv, int status, const std::string& body, double now_s);

// The answer to `models get`: an export's bytes `body`, with the ETag ("\"<sha256 hex>\"") and
// the X-Fedcase-Model-Version the coordinator sent. A failure as interpret_reply's; bytes
// whose SHA-256 is not the ETag's give kExitServerError. On success, `out` is the line the
// caller prints once it has written `body` to inv.out_file: version, format, size, checksum.
Outcome interpret_export(const Invocation& inv, int status, const std::string& body,
                         const std::string& etag, const std::string& version);

}  // namespace fedcase::cli
