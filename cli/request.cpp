#include "cli/request.h"

namespace fedcase::cli {

ApiRequest api_request(const Invocation& inv, const std::string& job_config) {
  ApiRequest r;
  r.method = "GET";
  const std::string job = inv.job ? "/v1/admin/jobs/" + std::to_string(*inv.job) : "";
  switch (inv.command) {
    case Command::kJobsList:
      r.target = "/v1/admin/jobs";
      break;
    case Command::kJobsCreate:
      r.method = "POST";
      r.target = "/v1/admin/jobs";
      r.body = job_config;
      break;
    case Command::kJobsShow:
    case Command::kRounds:
      r.target = job;
      break;
    case Command::kJobsPause:
    case Command::kJobsResume:
    case Command::kJobsCancel:
      r.method = "POST";
      r.target = job + (inv.command == Command::kJobsPause    ? "/pause"
                        : inv.command == Command::kJobsResume ? "/resume"
                                                              : "/cancel");
      break;
    case Command::kClients:
      r.target = "/v1/admin/clients";
      break;
    case Command::kHelp:
      break;
  }
  r.headers["Authorization"] = "Bearer " + inv.token;
  r.headers["Accept"] = "application/json";
  if (r.method == "POST") r.headers["Content-Type"] = "application/json";
  return r;
}

}  // namespace fedcase::cli
