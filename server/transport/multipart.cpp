#include "server/transport/multipart.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <utility>

namespace fedcase::server {
namespace {

constexpr std::string_view kCrlf = "\r\n";
constexpr size_t kMaxBoundary = 70;

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// A header value "type; name=value; name="quoted value"": its type and parameters, type and
// parameter names lower-cased.
struct HeaderValue {
  std::string type;
  std::vector<std::pair<std::string, std::string>> params;
  const std::string* param(const std::string& name) const {
    for (const auto& [key, value] : params) {
      if (key == name) return &value;
    }
    return nullptr;
  }
};

Result<HeaderValue> parse_header_value(std::string_view text, const char* what) {
  HeaderValue out;
  size_t i = text.find(';');
  out.type = lower(trimmed(text.substr(0, i)));
  while (i != std::string_view::npos) {
    ++i;  // past ';'
    const size_t eq = text.find('=', i);
    if (eq == std::string_view::npos) {
      if (trimmed(text.substr(i)).empty()) break;  // a trailing ';'
      return invalid_argument(std::string(what) + ": a parameter without '='");
    }
    std::string name = lower(trimmed(text.substr(i, eq - i)));
    std::string value;
    i = eq + 1;
    while (i < text.size() && is_space(text[i])) ++i;
    if (i < text.size() && text[i] == '"') {
      bool closed = false;
      for (++i; i < text.size(); ++i) {
        if (text[i] == '\\' && i + 1 < text.size()) {
          value += text[++i];
        } else if (text[i] == '"') {
          closed = true;
          ++i;
          break;
        } else {
          value += text[i];
        }
      }
      if (!closed) return invalid_argument(std::string(what) + ": an unclosed quoted parameter");
      const size_t next = text.find(';', i);
      if (!trimmed(text.substr(i, next - i)).empty()) {
        return invalid_argument(std::string(what) + ": text after a quoted parameter");
      }
      i = next;
    } else {
      const size_t next = text.find(';', i);
      value = std::string(trimmed(text.substr(i, next - i)));
      i = next;
    }
    if (name.empty()) return invalid_argument(std::string(what) + ": a parameter without a name");
    out.params.emplace_back(std::move(name), std::move(value));
  }
  return out;
}

bool valid_boundary(std::string_view b) {
  if (b.empty() || b.size() > kMaxBoundary || b.back() == ' ') return false;
  for (char c : b) {
    const bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                    std::string_view("'()+_,-./:=? ").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

// The Content-Disposition and Content-Type of a part's header section `headers` (its lines
// without the empty line that ends them).
Status parse_part_headers(std::string_view headers, MultipartPart& part) {
  bool disposition = false;
  while (!headers.empty()) {
    const size_t end = std::min(headers.find(kCrlf), headers.size());
    const std::string_view line = headers.substr(0, end);
    headers.remove_prefix(std::min(headers.size(), end + kCrlf.size()));
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0 || is_space(line.front())) {
      return invalid_argument("multipart body: a part's header line is not 'Name: value'");
    }
    const std::string name = lower(trimmed(line.substr(0, colon)));
    const std::string_view value = trimmed(line.substr(colon + 1));
    if (name == "content-type") {
      part.content_type = std::string(value);
    } else if (name == "content-disposition") {
      if (disposition)
        return invalid_argument("multipart body: a part has two Content-Disposition");
      disposition = true;
      auto parsed = parse_header_value(value, "multipart Content-Disposition");
      if (!parsed.ok()) return parsed.status();
      const std::string* field = parsed->param("name");
      if (parsed->type != "form-data" || field == nullptr || field->empty()) {
        return invalid_argument(
            "multipart body: each part needs Content-Disposition: form-data; name=\"...\"");
      }
      part.name = *field;
      if (const std::string* file = parsed->param("filename")) part.filename = *file;
    }
  }
  if (!disposition) {
    return invalid_argument("multipart body: each part needs a Content-Disposition header");
  }
  return ok_status();
}

}  // namespace

bool is_multipart_form_data(std::string_view content_type) {
  return lower(trimmed(content_type.substr(0, content_type.find(';')))) == "multipart/form-data";
}

Result<std::string> multipart_boundary(std::string_view content_type) {
  auto parsed = parse_header_value(content_type, "Content-Type");
  if (!parsed.ok()) return parsed.status();
  if (parsed->type != "multipart/form-data") {
    return invalid_argument("Content-Type must be multipart/form-data");
  }
  const std::string* boundary = parsed->param("boundary");
  if (boundary == nullptr || !valid_boundary(*boundary)) {
    return invalid_argument(
        "Content-Type multipart/form-data needs a boundary of 1 to 70 characters");
  }
  return *boundary;
}

Result<std::vector<MultipartPart>> parse_multipart(std::string_view body, std::string_view boundary,
                                                   const MultipartLimits& limits) {
  if (!valid_boundary(boundary)) return invalid_argument("multipart body: bad boundary");
  const std::string dash = "--" + std::string(boundary);
  const std::string delimiter = std::string(kCrlf) + dash;
  const std::boyer_moore_searcher<std::string::const_iterator> searcher(delimiter.begin(),
                                                                        delimiter.end());
  // The offset just past the next delimiter at or after `from`, or npos.
  auto after_delimiter = [&](size_t from) -> size_t {
    const auto found = std::search(body.begin() + from, body.end(), searcher);
    if (found == body.end()) return std::string_view::npos;
    return size_t(found - body.begin()) + delimiter.size();
  };

  size_t pos = body.substr(0, dash.size()) == dash ? dash.size() : after_delimiter(0);
  if (pos == std::string_view::npos) {
    return invalid_argument("multipart body: no boundary line starts the first part");
  }
  std::vector<MultipartPart> parts;
  while (true) {
    if (body.substr(pos, 2) == "--") return parts;  // the closing delimiter; the rest is epilogue
    while (pos < body.size() && is_space(body[pos])) ++pos;  // transport padding
    if (body.substr(pos, kCrlf.size()) != kCrlf) {
      return invalid_argument("multipart body: a boundary line does not end with CRLF");
    }
    pos += kCrlf.size();
    if (parts.size() == limits.max_parts) {
      return invalid_argument("multipart body: more than " + std::to_string(limits.max_parts) +
                              " parts");
    }
    if (body.substr(pos, kCrlf.size()) == kCrlf) {
      return invalid_argument("multipart body: each part needs a Content-Disposition header");
    }
    MultipartPart& part = parts.emplace_back();
    // The header section ends at an empty line.
    const std::string_view window = body.substr(pos, limits.max_header_bytes + 4);
    const size_t end = window.find("\r\n\r\n");
    if (end == std::string_view::npos) {
      return invalid_argument(window.size() > limits.max_header_bytes
                                  ? "multipart body: a part's headers exceed " +
                                        std::to_string(limits.max_header_bytes) + " bytes"
                                  : std::string("multipart body: a part's headers do not end"));
    }
    FEDCASE_RETURN_IF_ERROR(parse_part_headers(window.substr(0, end), part));
    // The body follows the empty line. An empty body may also omit its CRLF: then the empty
    // line's CRLF starts the delimiter.
    const size_t body_start = pos + end + 4;
    const size_t next = after_delimiter(body_start - kCrlf.size());
    if (next == std::string_view::npos) {
      return invalid_argument("multipart body: part '" + part.name +
                              "' is not closed by a boundary");
    }
    const size_t body_end = std::max(body_start, next - delimiter.size());
    part.body = body.substr(body_start, body_end - body_start);
    pos = next;
  }
}

}  // namespace fedcase::server
