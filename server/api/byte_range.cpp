#include "server/api/byte_range.h"

#include <algorithm>

namespace fedcase::server {
namespace {

// The digits of `text` as a number; nullopt for no digits, other characters or an overflow.
std::optional<uint64_t> number(std::string_view text) {
  if (text.empty() || text.size() > 19) return std::nullopt;
  uint64_t out = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    out = out * 10 + uint64_t(c - '0');
  }
  return out;
}

}  // namespace

RangeAsked read_range(std::optional<std::string_view> header, uint64_t size) {
  using Kind = RangeAsked::Kind;
  constexpr std::string_view kUnit = "bytes=";
  if (!header || size == 0 || header->substr(0, kUnit.size()) != kUnit) return {};
  const std::string_view spec = header->substr(kUnit.size());
  const size_t dash = spec.find('-');
  if (dash == std::string_view::npos || spec.find(',') != std::string_view::npos) return {};
  const std::string_view from = spec.substr(0, dash), to = spec.substr(dash + 1);
  if (from.empty()) {  // the last N bytes
    const std::optional<uint64_t> n = number(to);
    if (!n || *n == 0) return {};
    return {Kind::kRange, {size - std::min(*n, size), size - 1}};
  }
  const std::optional<uint64_t> first = number(from);
  if (!first) return {};
  uint64_t last = size - 1;
  if (!to.empty()) {
    const std::optional<uint64_t> asked = number(to);
    if (!asked || *asked < *first) return {};
    last = std::min(*asked, size - 1);
  }
  if (*first >= size) return {Kind::kUnsatisfiable, {}};
  return {Kind::kRange, {*first, last}};
}

}  // namespace fedcase::server
