#include "server/transport/multipart.h"

#include <doctest/doctest.h>

#include <string>

namespace fedcase::server {
namespace {

constexpr std::string_view kBoundary = "------------------------d74496d66958873e";

// A body as `curl -F config=@job.json -F model=@model.pt` sends it.
std::string curl_body(const std::string& config, const std::string& model) {
  const std::string b(kBoundary);
  return "--" + b +
         "\r\n"
         "Content-Disposition: form-data; name=\"config\"; filename=\"job.json\"\r\n"
         "Content-Type: application/json\r\n"
         "\r\n" +
         config + "\r\n--" + b +
         "\r\n"
         "Content-Disposition: form-data; name=\"model\"; filename=\"model.pt\"\r\n"
         "Content-Type: application/octet-stream\r\n"
         "\r\n" +
         model + "\r\n--" + b + "--\r\n";
}

// A body of the given parts, each "name" with `body`, and optional `extra` header lines.
std::string body_of(const std::vector<std::pair<std::string, std::string>>& parts,
                    const std::string& boundary = "b0undary") {
  std::string out;
  for (const auto& [name, body] : parts) {
    out += "--" + boundary + "\r\nContent-Disposition: form-data; name=\"" + name + "\"\r\n\r\n" +
           body + "\r\n";
  }
  return out + "--" + boundary + "--";
}

std::string parse_error(std::string_view body, std::string_view boundary = "b0undary",
                        const MultipartLimits& limits = {}) {
  auto parts = parse_multipart(body, boundary, limits);
  REQUIRE_FALSE(parts.ok());
  CHECK(parts.status().code() == Code::kInvalidArgument);
  return parts.status().message();
}

TEST_CASE("a curl upload splits into its named parts, bytes intact") {
  // Binary bytes that look like the start of a delimiter but are not one.
  const std::string model("\x80PK\0\r\n--\r\n-----\r\n--------\0\xff", 24);
  const std::string body = curl_body("{\"name\": \"j\"}", model);
  auto parts = parse_multipart(body, kBoundary);
  REQUIRE_MESSAGE(parts.ok(), parts.status().to_string());
  REQUIRE(parts->size() == 2);
  CHECK(parts->at(0).name == "config");
  CHECK(parts->at(0).filename == "job.json");
  CHECK(parts->at(0).content_type == "application/json");
  CHECK(parts->at(0).body == "{\"name\": \"j\"}");
  CHECK(parts->at(1).name == "model");
  CHECK(parts->at(1).filename == "model.pt");
  CHECK(parts->at(1).body == model);
  // The parts are views into the body.
  CHECK(parts->at(1).body.data() >= body.data());
  CHECK(parts->at(1).body.data() + parts->at(1).body.size() <= body.data() + body.size());
}

std::string boundary_of(std::string_view content_type) {
  auto boundary = multipart_boundary(content_type);
  REQUIRE_MESSAGE(boundary.ok(), boundary.status().to_string());
  return *boundary;
}

TEST_CASE("the boundary comes from the Content-Type, case and quotes aside") {
  CHECK(boundary_of("multipart/form-data; boundary=abc") == "abc");
  CHECK(boundary_of("Multipart/Form-Data;charset=utf-8; BOUNDARY=\"a b:c\"") == "a b:c");
  CHECK(boundary_of("multipart/form-data; boundary=\"q\\:x\"; x=y;") == "q:x");
  CHECK(is_multipart_form_data(" multipart/form-data ; boundary=x"));
  CHECK_FALSE(is_multipart_form_data("application/json"));
  for (const char* bad :
       {"application/json; boundary=abc", "multipart/form-data",
        "multipart/form-data; boundary=", "multipart/form-data; boundary=\"abc",
        "multipart/form-data; boundary=\"abc\"x", "multipart/form-data; boundary",
        "multipart/form-data; =abc", "multipart/form-data; boundary=\"ends \"",
        "multipart/form-data; boundary=no<angle>", "multipart/form-data; boundary=\"q\\\"x\""}) {
    CAPTURE(bad);
    auto b = multipart_boundary(bad);
    REQUIRE_FALSE(b.ok());
    CHECK(b.status().code() == Code::kInvalidArgument);
  }
  CHECK(multipart_boundary("multipart/form-data; boundary=" + std::string(70, 'x')).ok());
  CHECK_FALSE(multipart_boundary("multipart/form-data; boundary=" + std::string(71, 'x')).ok());
}

TEST_CASE("a preamble, an epilogue, padding and empty parts are allowed") {
  const std::string body =
      "preamble\r\n--b0undary  \t\r\n"
      "content-disposition: FORM-DATA; name=a\r\n\r\n"
      "\r\n--b0undary\r\n"  // an empty body with its CRLF
      "Content-Disposition: form-data; name=\"b\"\r\n\r\n"
      "--b0undary\r\n"  // an empty body whose CRLF is omitted
      "Content-Disposition: form-data; name=\"c\"\r\nX-Other: 1\r\n\r\n"
      "x\r\n--b0undary--\r\nepilogue";
  auto parts = parse_multipart(body, "b0undary");
  REQUIRE_MESSAGE(parts.ok(), parts.status().to_string());
  REQUIRE(parts->size() == 3);
  CHECK(parts->at(0).name == "a");
  CHECK(parts->at(0).body.empty());
  CHECK(parts->at(1).name == "b");
  CHECK(parts->at(1).body.empty());
  CHECK(parts->at(2).name == "c");
  CHECK(parts->at(2).body == "x");
  CHECK(parse_multipart("--b0undary--", "b0undary")->empty());
}

TEST_CASE("malformed multipart bodies are refused with a reason") {
  const std::string cd = "Content-Disposition: form-data; name=\"a\"\r\n";
  CHECK(parse_error("").find("no boundary") != std::string::npos);
  CHECK(parse_error("no delimiter at all").find("no boundary") != std::string::npos);
  CHECK(parse_error("--b0undary\r\n" + cd + "\r\nbody").find("not closed") != std::string::npos);
  CHECK(parse_error("--b0undaryX\r\n" + cd + "\r\nx\r\n--b0undary--").find("CRLF") !=
        std::string::npos);
  CHECK(parse_error("--b0undary\r\n" + cd + "no end").find("do not end") != std::string::npos);
  CHECK(parse_error("--b0undary\r\n\r\nheaderless\r\n--b0undary--").find("Content-Disposition") !=
        std::string::npos);
  CHECK(parse_error("--b0undary\r\nContent-Type: text/plain\r\n\r\nx\r\n--b0undary--")
            .find("Content-Disposition") != std::string::npos);
  CHECK(parse_error("--b0undary\r\nno colon here\r\n\r\nx\r\n--b0undary--").find("Name: value") !=
        std::string::npos);
  CHECK(parse_error("--b0undary\r\n" + cd + " folded: line\r\n\r\nx\r\n--b0undary--")
            .find("Name: value") != std::string::npos);
  CHECK(parse_error("--b0undary\r\n" + cd + cd + "\r\nx\r\n--b0undary--").find("two") !=
        std::string::npos);
  for (const char* disposition : {"attachment; name=\"a\"", "form-data", "form-data; name=\"\"",
                                  "form-data; name=\"a", "form-data; filename=\"x\""}) {
    CAPTURE(disposition);
    parse_error("--b0undary\r\nContent-Disposition: " + std::string(disposition) +
                "\r\n\r\nx\r\n--b0undary--");
  }
  CHECK(parse_error(body_of({{"a", "1"}, {"b", "2"}, {"c", "3"}}), "b0undary", {2, 8192})
            .find("more than 2 parts") != std::string::npos);
  CHECK(parse_multipart(body_of({{"a", "1"}, {"b", "2"}}), "b0undary", {2, 8192}).ok());
  const std::string long_header = "X-Pad: " + std::string(100, 'p') + "\r\n";
  CHECK(parse_error("--b0undary\r\n" + cd + long_header + "\r\nx\r\n--b0undary--", "b0undary",
                    {16, 64})
            .find("exceed 64 bytes") != std::string::npos);
  CHECK(parse_error(body_of({{"a", "1"}}), "bad<boundary>").find("boundary") != std::string::npos);
}

TEST_CASE("every truncation of a valid body is refused, never read past its end") {
  const std::string body = curl_body("{\"name\": \"j\"}", std::string("\0\1\2\r\n", 5));
  const size_t closing = body.rfind("--\r\n");  // the closing delimiter ends here
  for (size_t n = 0; n < body.size(); ++n) {
    CAPTURE(n);
    auto parts = parse_multipart(std::string_view(body).substr(0, n), kBoundary);
    CHECK(parts.ok() == (n >= closing + 2));
  }
}

}  // namespace
}  // namespace fedcase::server
