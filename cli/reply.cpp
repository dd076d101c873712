#include "cli/reply.h"

#include <nlohmann/json.hpp>

#include "cli/exit_codes.h"
#include "cli/format.h"
#include "common/crypto.h"
#include "common/json_read.h"
#include "protocol/error_reply.h"

namespace fedcase::cli {

using nlohmann::json;

namespace {

// The server's error message ({"error": {"code", "message"}}), else the start of the body.
std::string error_message(const std::string& body) {
  const auto parsed = parse_untrusted_json(body);
  if (parsed.ok()) {
    auto error = protocol::read_error_reply(*parsed);
    if (error.ok()) return error->message;
  }
  std::string text = body.substr(0, 200);
  return text.empty() ? "no details" : text;
}

std::string failure_text(int status, const std::string& body) {
  const std::string message = error_message(body);
  const std::string code = " (HTTP " + std::to_string(status) + ")";
  switch (status) {
    case 401:
      return "the coordinator did not accept the token" + code + ": " + message +
             "; check --token or FEDCASE_TOKEN";
    case 403:
      return "the token may not do this" + code + ": " + message +
             "; the admin API needs the admin token";
    default:
      break;
  }
  if (status >= 500) return "the coordinator failed" + code + ": " + message;
  return message + code;
}

// The text a successful answer prints.
std::string success_text(const Invocation& inv, const json& answer, double now_s) {
  if (inv.json) {
    if (inv.command == Command::kRounds) return answer.at("rounds").dump(2) + "\n";
    if (inv.command == Command::kClients && inv.job) {
      return clients_for_job(answer, *inv.job).dump(2) + "\n";
    }
    return answer.dump(2) + "\n";
  }
  switch (inv.command) {
    case Command::kJobsList:
      return jobs_table(answer);
    case Command::kJobsCreate:
      return "created " + job_line(answer);
    case Command::kJobsShow:
      return job_detail_text(answer);
    case Command::kJobsPause:
    case Command::kJobsResume:
    case Command::kJobsCancel:
      return job_state_line(answer);
    case Command::kClients:
      return clients_table(answer, inv.job, now_s);
    case Command::kRounds:
      return rounds_table(answer);
    case Command::kModelsList:
      return models_table(answer, now_s);
    case Command::kModelsGet:
    case Command::kHelp:
      break;
  }
  return usage();
}

}  // namespace

int exit_code_for_http(int status) {
  if (status >= 200 && status < 300) return kExitOk;
  if (status == 401 || status == 403) return kExitAuth;
  if (status == 404) return kExitNotFound;
  if (status >= 400 && status < 500) return kExitRefused;
  return kExitServerError;
}

Outcome usage_failure(const Status& status) {
  return {kExitUsage, "", "fedcase: " + status.message() + "\nrun 'fedcase help' for usage\n"};
}

Outcome transport_failure(const Invocation& inv, const Status& status) {
  return {kExitUnreachable, "",
          "fedcase: cannot reach the coordinator at " + inv.endpoint.url + ": " + status.message() +
              "\ncheck that the coordinator is running there (--url or FEDCASE_URL)\n"};
}

Outcome interpret_reply(const Invocation& inv, int status, const std::string& body, double now_s) {
  const int code = exit_code_for_http(status);
  if (code != kExitOk) return {code, "", "fedcase: " + failure_text(status, body) + "\n"};
  const json answer = json::parse(body, nullptr, false);
  if (answer.is_discarded()) {
    return {kExitServerError, "", "fedcase: the coordinator's answer is not JSON\n"};
  }
  try {
    return {kExitOk, success_text(inv, answer, now_s), ""};
  } catch (const json::exception& e) {
    return {kExitServerError, "",
            std::string("fedcase: the coordinator's answer has an unexpected shape: ") + e.what() +
                "\n"};
  }
}

Outcome interpret_export(const Invocation& inv, int status, const std::string& body,
                         const std::string& etag, const std::string& version) {
  const int code = exit_code_for_http(status);
  if (code != kExitOk) return {code, "", "fedcase: " + failure_text(status, body) + "\n"};
  const std::string sha256 = sha256_hex(body);
  if (etag != "\"" + sha256 + "\"") {
    return {kExitServerError, "",
            "fedcase: the download is corrupt: its SHA-256 is " + sha256 + ", the coordinator's " +
                (etag.empty() ? std::string("is missing") : etag) + "\n"};
  }
  const std::string where = inv.out_file == "-" ? "standard output" : inv.out_file;
  return {kExitOk,
          "job " + std::to_string(inv.job.value_or(0)) + " model version " + version + " as " +
              inv.format + ": " + format_bytes(double(body.size())) + " to " + where + ", sha256 " +
              sha256 + "\n",
          ""};
}

}  // namespace fedcase::cli
