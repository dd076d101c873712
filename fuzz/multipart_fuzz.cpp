// Fuzzes the multipart/form-data path of a job creation (server/multipart.h): the
// Content-Type's boundary through multipart_boundary, then the body through parse_multipart,
// as server/api.cpp does. Input: the Content-Type value, a '\n', then the body. Parsed parts
// must hold what the parser promises: at most max_parts, each named, each body a view inside
// the input that holds no delimiter.

#include <string>

#include "fuzz/fuzz_target.h"
#include "server/transport/multipart.h"

FEDCASE_FUZZ_TARGET(multipart) {
  const std::string_view input = fedcase::fuzz::as_text(data, size);
  const size_t newline = input.find('\n');
  if (newline == std::string_view::npos) return 0;
  auto boundary = fedcase::server::multipart_boundary(input.substr(0, newline));
  if (!boundary.ok()) return 0;
  const std::string_view body = input.substr(newline + 1);
  const fedcase::server::MultipartLimits limits;
  auto parts = fedcase::server::parse_multipart(body, *boundary, limits);
  if (!parts.ok()) return 0;
  if (parts->size() > limits.max_parts) fedcase::fuzz::fuzz_fail("more parts than the limit");
  const std::string delimiter = "\r\n--" + *boundary;
  for (const auto& part : *parts) {
    if (part.name.empty()) fedcase::fuzz::fuzz_fail("a part without a name");
    if (part.body.data() < body.data() ||
        part.body.data() + part.body.size() > body.data() + body.size()) {
      fedcase::fuzz::fuzz_fail("a part's body lies outside the input");
    }
    if (part.body.find(delimiter) != std::string_view::npos) {
      fedcase::fuzz::fuzz_fail("a part's body holds a delimiter");
    }
  }
  return 0;
}
