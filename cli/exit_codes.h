#pragma once
// The exit codes of the `fedcase` command-line client, stable so that scripts can test them
// (docs/cli.md).

namespace fedcase::cli {

inline constexpr int kExitOk = 0;
// The command line is wrong: unknown subcommand or flag, missing argument or token, bad URL.
inline constexpr int kExitUsage = 2;
// The coordinator could not be reached: refused, timed out, unresolvable, or TLS failed.
inline constexpr int kExitUnreachable = 3;
// The coordinator refused the token (401) or the token may not do this (403).
inline constexpr int kExitAuth = 4;
// The job (or endpoint) does not exist (404).
inline constexpr int kExitNotFound = 5;
// The coordinator refused the request: 400, 409, 422 or another 4xx (validation, wrong state).
inline constexpr int kExitRefused = 6;
// The coordinator failed (5xx), answered something unreadable, or the client itself failed.
inline constexpr int kExitServerError = 7;

}  // namespace fedcase::cli
