// fedcase: the operators' command-line client of the coordinator's admin API.
//   fedcase [--url URL] [--token TOKEN] [--ca FILE] [--timeout S] [--json] SUBCOMMAND
// Subcommands, flags, environment and exit codes: `fedcase help` and docs/cli.md.

#include <chrono>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/args.h"
#include "cli/exit_codes.h"
#include "cli/reply.h"
#include "cli/request.h"
#include "client_sdk/http_client.h"

namespace {

using namespace fedcase;
using namespace fedcase::cli;

std::map<std::string, std::string> environment() {
  std::map<std::string, std::string> env;
  for (const char* name : {"FEDCASE_URL", "FEDCASE_TOKEN", "FEDCASE_CA"}) {
    if (const char* value = std::getenv(name)) env[name] = value;
  }
  return env;
}

// The `what` file of `jobs create` (the job file or the model file), or standard input for
// "-".
Result<std::string> read_input_file(const std::string& path, const std::string& what) {
  std::ostringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
    return text.str();
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return invalid_argument("cannot read the " + what + " '" + path + "'");
  text << in.rdbuf();
  return text.str();
}

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// `models get`: the export checked against its checksum, then written to --out (its bytes on
// standard output and the summary on standard error for '-').
Outcome save_export(const Invocation& inv, const client::HttpResponse& response) {
  Outcome outcome = interpret_export(inv, response.status, response.body, response.header("etag"),
                                     response.header("x-fedcase-model-version"));
  if (outcome.exit_code != kExitOk) return outcome;
  if (inv.out_file == "-") return {kExitOk, response.body, outcome.out};
  std::ofstream file(inv.out_file, std::ios::binary | std::ios::trunc);
  file << response.body;
  file.close();
  if (!file) {
    return {kExitUsage, "", "fedcase: cannot write '" + inv.out_file + "'\n"};
  }
  return outcome;
}

Outcome run(const std::vector<std::string>& args) {
  auto inv = parse_args(args, environment());
  if (!inv.ok()) return usage_failure(inv.status());
  if (inv->command == Command::kHelp) return {kExitOk, usage(), ""};
  std::string job_config, model;
  if (inv->command == Command::kJobsCreate) {
    auto text = read_input_file(inv->job_file, "job file");
    if (!text.ok()) return usage_failure(text.status());
    job_config = std::move(text).value();
  }
  if (!inv->model_file.empty()) {
    auto bytes = read_input_file(inv->model_file, "model file");
    if (!bytes.ok()) return usage_failure(bytes.status());
    model = std::move(bytes).value();
  }
  const ApiRequest request = api_request(*inv, job_config, model);
  client::ConnectionOptions connection;
  connection.host = inv->endpoint.host;
  connection.port = inv->endpoint.port;
  connection.ca_file = inv->endpoint.ca_file;
  client::HttpClient http(connection);
  auto response =
      http.request(request.method, request.target, request.body, request.headers, inv->timeout_s);
  if (!response.ok()) return transport_failure(*inv, response.status());
  if (inv->command == Command::kModelsGet) return save_export(*inv, *response);
  return interpret_reply(*inv, response->status, response->body, unix_now());
}

}  // namespace

int main(int argc, char** argv) {
  Outcome outcome;
  try {
    outcome = run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    outcome = {kExitServerError, "", std::string("fedcase: ") + e.what() + "\n"};
  }
  std::cout << outcome.out << std::flush;
  std::cerr << outcome.err << std::flush;
  return outcome.exit_code;
}
