#pragma once
// The admin API request each subcommand makes (docs/protocol.md, "Admin API").

#include <map>
#include <string>

#include "cli/args.h"

namespace fedcase::cli {

struct ApiRequest {
  std::string method;  // "GET" or "POST"
  std::string target;  // e.g. "/v1/admin/jobs/3/pause"
  std::string body;
  std::map<std::string, std::string> headers;  // Authorization, and Content-Type with a body
};

// The request for `inv` (not kHelp). `job_config` is the body of `jobs create`: the job
// file's contents, sent as they are (the coordinator validates them). With a `model` (the
// bytes of --model's file) the body is multipart/form-data with the parts "config" and
// "model" (docs/protocol.md).
ApiRequest api_request(const Invocation& inv, const std::string& job_config = {},
                       const std::string& model = {});

}  // namespace fedcase::cli
