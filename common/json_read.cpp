#include "common/json_read.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace fedcase {
namespace {

std::string format_bound(double x) {
  std::ostringstream out;
  out << x;  // "0", "0.001", "1e-12", "inf"
  return out.str();
}

// The deepest nesting of objects and arrays in `text`, or max_depth + 1 as soon as it goes
// deeper. Brackets inside strings do not count.
size_t nesting_depth(std::string_view text, size_t max_depth) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > max_depth) return deepest;
    } else if ((c == '}' || c == ']') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

Result<nlohmann::json> parse_untrusted_json(std::string_view text, size_t max_depth) {
  if (nesting_depth(text, max_depth) > max_depth) {
    return invalid_argument("JSON nested deeper than " + std::to_string(max_depth) + " levels");
  }
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return invalid_argument("not valid JSON");
  return j;
}

ObjectReader::ObjectReader(const nlohmann::json& value, std::string where)
    : value_(value), where_(std::move(where)) {
  if (!value_.is_object()) fail(where_ + " must be an object");
}

const nlohmann::json* ObjectReader::member(const char* key) {
  known_.emplace_back(key);
  if (!value_.is_object()) return nullptr;
  auto it = value_.find(key);
  return it == value_.end() ? nullptr : &*it;
}

ObjectReader& ObjectReader::number(const char* key, double& out, double min, double max) {
  const nlohmann::json* v = member(key);
  if (v == nullptr) return *this;
  double x = v->is_number() ? v->get<double>() : std::nan("");
  if (!(x >= min && x <= max)) {
    fail(path(key) + " must be a number in [" + format_bound(min) + ", " + format_bound(max) + "]");
  } else {
    out = x;
  }
  return *this;
}

ObjectReader& ObjectReader::number(const char* key, std::optional<double>& out, double min,
                                   double max) {
  double x = std::nan("");  // number() assigns only a valid value, never NaN
  number(key, x, min, max);
  if (!std::isnan(x)) out = x;
  return *this;
}

ObjectReader& ObjectReader::text(const char* key, std::string& out) {
  const nlohmann::json* v = member(key);
  if (v == nullptr) return *this;
  if (!v->is_string()) {
    fail(path(key) + " must be a string");
  } else {
    out = v->get<std::string>();
  }
  return *this;
}

ObjectReader& ObjectReader::boolean(const char* key, bool& out) {
  const nlohmann::json* v = member(key);
  if (v == nullptr) return *this;
  if (!v->is_boolean()) {
    fail(path(key) + " must be true or false");
  } else {
    out = v->get<bool>();
  }
  return *this;
}

ObjectReader& ObjectReader::finite(const char* key, double& out, double min) {
  const nlohmann::json* v = member(key);
  if (v == nullptr) return *this;
  const double x = v->is_number() ? v->get<double>() : std::nan("");
  if (!std::isfinite(x) || x < min) {
    fail(path(key) + " must be a finite number >= " + format_bound(min));
  } else {
    out = x;
  }
  return *this;
}

bool ObjectReader::read_unsigned(const char* key, uint64_t min, uint64_t max, uint64_t& out) {
  const nlohmann::json* v = member(key);
  if (v == nullptr) return false;
  const bool non_negative_integer =
      v->is_number_unsigned() || (v->is_number_integer() && v->get<int64_t>() >= 0);
  if (!non_negative_integer || v->get<uint64_t>() < min || v->get<uint64_t>() > max) {
    fail(path(key) + " must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
         "]");
    return false;
  }
  out = v->get<uint64_t>();
  return true;
}

ObjectReader& ObjectReader::require(const char* key) {
  if (member(key) == nullptr) fail(path(key) + " is required");
  return *this;
}

ObjectReader& ObjectReader::skip(const char* key) {
  known_.emplace_back(key);
  return *this;
}

ObjectReader& ObjectReader::merge(const Status& nested) {
  if (!nested.ok() && status_.ok()) status_ = nested;
  return *this;
}

void ObjectReader::fail(std::string message) {
  if (status_.ok()) status_ = invalid_argument(std::move(message));
}

Status ObjectReader::status() const { return status_; }

Status ObjectReader::strict_status() const {
  if (!status_.ok() || !value_.is_object()) return status_;
  for (const auto& item : value_.items()) {
    if (std::find(known_.begin(), known_.end(), item.key()) == known_.end()) {
      return invalid_argument("unknown key " + where_ + "." + item.key());
    }
  }
  return ok_status();
}

}  // namespace fedcase
