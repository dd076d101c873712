#pragma once
// Requests through the Api as the HTTP front end hands them over, for in-process tests of the
// routes over a fixture coordinator (coordinator_fixture.h): calls, multipart job creations,
// and a small model of any framework to create them with.

#include <doctest/doctest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "common/blob.h"
#include "server/api/api.h"
#include "tests/server/coordinator_fixture.h"

namespace fedcase::server::fixture {

inline constexpr const char* kAdmin = "admin-token-0123456789";  // config_in's admin token
inline constexpr const char* kBoundary = "------------------------d74496d66958873e";

// A small model of any framework: two tensors, nine parameters.
inline ModelBlob own_model() {
  return {5, {{{"dense.weight", {3, 2}}, {"dense.bias", {3}}}}, {1, 2, 3, 4, 5, 6, -1, 0, 1}};
}

inline json blob_job(json patch = json::object()) {
  json j = job_config({{"name", "keyboard"},
                       {"model", "blob"},
                       {"loss", "mse"},
                       {"evaluation", {{"max_samples", 100}}},
                       {"selection", {{"overcommit", 1.0}}}});
  j.merge_patch(patch);
  return j;
}

// A multipart/form-data body as curl -F sends it: the config, and the model file if any.
inline std::string multipart_body(const std::string& config,
                                  const std::optional<std::string>& model = std::nullopt,
                                  const std::string& extra_part = "") {
  const std::string b = kBoundary;
  std::string out = "--" + b +
                    "\r\nContent-Disposition: form-data; name=\"config\"; filename=\"job.json\"\r\n"
                    "Content-Type: application/json\r\n\r\n" +
                    config + "\r\n";
  if (model) {
    out += "--" + b +
           "\r\nContent-Disposition: form-data; name=\"model\"; filename=\"model.bin\"\r\n"
           "Content-Type: application/octet-stream\r\n\r\n" +
           *model + "\r\n";
  }
  if (!extra_part.empty()) {
    out +=
        "--" + b + "\r\nContent-Disposition: form-data; name=\"" + extra_part + "\"\r\n\r\nx\r\n";
  }
  return out + "--" + b + "--\r\n";
}

inline std::string multipart_type() {
  return std::string("multipart/form-data; boundary=") + kBoundary;
}

// One request through the Api, as the HTTP front end hands it over.
inline Reply call(Api& api, http::verb method, const std::string& target, const std::string& token,
                  const std::string& body = "", const std::string& content_type = "",
                  std::map<std::string, std::string> headers = {}) {
  Request req{method, target, 11};
  req.set(http::field::authorization, "Bearer " + token);
  if (!content_type.empty()) req.set(http::field::content_type, content_type);
  for (const auto& [name, value] : headers) req.set(name, value);
  req.body() = body;
  req.prepare_payload();
  return api.handle(req);
}

inline json body_of(const Reply& reply) {
  return json::parse(reply.response.body(), nullptr, false);
}

inline Reply create_multipart(Api& api, const json& config,
                              const std::optional<std::string>& model) {
  return call(api, http::verb::post, "/v1/admin/jobs", kAdmin, multipart_body(config.dump(), model),
              multipart_type());
}

}  // namespace fedcase::server::fixture
