#include "cli/request.h"

namespace fedcase::cli {
namespace {

// A multipart/form-data body with the job config and the model file, and its boundary: one
// that occurs in neither part.
std::pair<std::string, std::string> multipart_body(const std::string& config,
                                                   const std::string& model) {
  std::string boundary = "fedcase-job-boundary";
  while (config.find(boundary) != std::string::npos || model.find(boundary) != std::string::npos) {
    boundary += "-x";
  }
  std::string body;
  body.reserve(config.size() + model.size() + 512);
  body += "--" + boundary + "\r\n";
  body += "Content-Disposition: form-data; name=\"config\"; filename=\"job.json\"\r\n";
  body += "Content-Type: application/json\r\n\r\n";
  body += config;
  body += "\r\n--" + boundary + "\r\n";
  body += "Content-Disposition: form-data; name=\"model\"; filename=\"model\"\r\n";
  body += "Content-Type: application/octet-stream\r\n\r\n";
  body += model;
  body += "\r\n--" + boundary + "--\r\n";
  return {std::move(body), boundary};
}

}  // namespace

ApiRequest api_request(const Invocation& inv, const std::string& job_config,
                       const std::string& model) {
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
    case Command::kModelsList:
      r.target = job + "/models";
      break;
    case Command::kModelsGet:
      r.target = job + "/models/" + inv.version + "/export?format=" + inv.format;
      break;
    case Command::kHelp:
      break;
  }
  r.headers["Authorization"] = "Bearer " + inv.token;
  r.headers["Accept"] =
      inv.command == Command::kModelsGet ? "application/octet-stream" : "application/json";
  if (r.method == "POST") r.headers["Content-Type"] = "application/json";
  if (inv.command == Command::kJobsCreate && !inv.model_file.empty()) {
    auto [body, boundary] = multipart_body(job_config, model);
    r.body = std::move(body);
    r.headers["Content-Type"] = "multipart/form-data; boundary=" + boundary;
  }
  return r;
}

}  // namespace fedcase::cli
