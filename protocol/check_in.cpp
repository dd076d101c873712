#include "protocol/check_in.h"

#include <cctype>
#include <cstdio>

namespace fedcase::protocol {

namespace {

constexpr double kMaxSeconds = 86400;

// Reads `name=` and a plain decimal (digits, then optionally '.' and digits) off `text`.
bool read_field(std::string_view& text, std::string_view name, double& out) {
  if (text.substr(0, name.size()) != name || text.substr(name.size(), 1) != "=") return false;
  text.remove_prefix(name.size() + 1);
  size_t n = 0, digits = 0;
  double whole = 0, scale = 1, fraction = 0;
  for (; n < text.size() && std::isdigit(static_cast<unsigned char>(text[n])); ++n, ++digits) {
    whole = whole * 10 + (text[n] - '0');
  }
  if (n < text.size() && text[n] == '.') {
    size_t decimals = 0;
    for (++n; n < text.size() && std::isdigit(static_cast<unsigned char>(text[n])); ++n) {
      scale /= 10;
      fraction += (text[n] - '0') * scale;
      ++decimals;
    }
    if (decimals == 0) return false;
  }
  if (digits == 0 || digits > 9) return false;
  text.remove_prefix(n);
  out = whole + fraction;
  return true;
}

bool consume(std::string_view& text, std::string_view separator) {
  if (text.substr(0, separator.size()) != separator) return false;
  text.remove_prefix(separator.size());
  return true;
}

}  // namespace

std::string write_check_in(const CheckIn& c) {
  char text[96];
  std::snprintf(text, sizeof text, "after=%.3f, before=%.3f, reconnect=%.3f", c.after_s, c.before_s,
                c.reconnect_s);
  return text;
}

Result<CheckIn> read_check_in(std::string_view value) {
  const Status malformed = invalid_argument(
      std::string(kCheckInHeader) +
      " must be 'after=A, before=B, reconnect=R' with 0 <= A <= B <= 86400, 0 <= R <= 86400");
  CheckIn c;
  if (!read_field(value, "after", c.after_s) || !consume(value, ", ") ||
      !read_field(value, "before", c.before_s) || !consume(value, ", ") ||
      !read_field(value, "reconnect", c.reconnect_s) || !value.empty()) {
    return malformed;
  }
  if (c.after_s > c.before_s || c.before_s > kMaxSeconds || c.reconnect_s > kMaxSeconds) {
    return malformed;
  }
  return c;
}

}  // namespace fedcase::protocol
