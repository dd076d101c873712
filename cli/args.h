#pragma once
// The command line of the `fedcase` client: subcommands, flags and the environment they
// fall back on. Pure: the environment is passed in, nothing is read or opened here.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace fedcase::cli {

enum class Command {
  kHelp,
  kJobsList,
  kJobsCreate,
  kJobsShow,
  kJobsPause,
  kJobsResume,
  kJobsCancel,
  kClients,
  kRounds,
  kModelsList,
  kModelsGet,
};

// Where the coordinator is, from --url / FEDCASE_URL and --ca / FEDCASE_CA.
struct Endpoint {
  std::string url;  // as given, for messages
  std::string host;
  uint16_t port = 0;
  bool tls = false;
  std::string ca_file;  // set exactly when tls
};

struct Invocation {
  Command command = Command::kHelp;
  std::optional<uint64_t> job;  // the job of show/pause/resume/cancel/rounds and clients --job
  std::string job_file;         // jobs create: a path, or "-" for standard input
  std::string model_file;       // jobs create --model: the job's model file; empty = built-in
  // models get: the version (a number, "latest" or "best"), the export format and the file
  // to write ("-": standard output).
  std::string version = "latest";
  std::string format = "torchscript";
  std::string out_file;
  bool json = false;  // print the coordinator's JSON instead of a table
  Endpoint endpoint;
  std::string token;  // the admin token
  double timeout_s = 10;
};

inline constexpr const char* kDefaultUrl = "http://127.0.0.1:8080";

// Parses `args` (argv without the program name). Flags may stand anywhere, as `--flag VALUE`
// or `--flag=VALUE`; a flag beats its environment variable (FEDCASE_URL, FEDCASE_TOKEN,
// FEDCASE_CA in `env`). `--help`, `-h` or `help` anywhere gives kHelp and needs nothing
// else. kInvalidArgument, with a message for the operator, when the line is not usable: no or
// unknown subcommand, unknown flag, missing or extra argument, a job id that is not a positive
// number, a model version that is not a number, "latest" or "best", a format other than
// torchscript, npz or blob, `models get` without --out, no token, a bad URL, https without a
// CA file, --ca with an http URL, a timeout that is not a positive number.
Result<Invocation> parse_args(const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& env);

// Parses "http://host[:port]" or "https://host[:port]" (default ports 80 and 443; an IPv6
// host in brackets; a trailing "/" is allowed, any other path is not). ca_file is left empty.
Result<Endpoint> parse_url(const std::string& url);

// The usage text `fedcase help` prints.
std::string usage();

}  // namespace fedcase::cli
