#pragma once
// Typed, range-checked reads of JSON object members, shared by the parsers of configs
// (coordinator, job sections, simulated fleets), stored profiles and saved policy state. A reader
// keeps the first error it meets and the names of the members it was asked for, so a parser is a
// list of reads and one status check.

#include <algorithm>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fedcase {

// The nesting depth that untrusted JSON may reach: {"a":[1]} has depth 2.
inline constexpr size_t kMaxJsonDepth = 64;

// Parses untrusted JSON text without exceptions and without deep recursion: kInvalidArgument
// for text that is not JSON or nests objects and arrays deeper than `max_depth` (checked
// before the parser builds anything).
Result<nlohmann::json> parse_untrusted_json(std::string_view text,
                                            size_t max_depth = kMaxJsonDepth);

class ObjectReader {
 public:
  // `where` names the object in error messages ("selection", "profile.availability"). A value
  // that is not an object is an error.
  ObjectReader(const nlohmann::json& value, std::string where);

  // Each read leaves `out` unchanged when the member is absent, and records an error (leaving
  // `out` unchanged) when it is present but of the wrong type or out of range.
  ObjectReader& number(const char* key, double& out, double min, double max);
  ObjectReader& number(const char* key, std::optional<double>& out, double min, double max);
  ObjectReader& text(const char* key, std::string& out);
  ObjectReader& boolean(const char* key, bool& out);
  // A finite number >= `min`, without an upper bound ("must be a finite number >= 0").
  ObjectReader& finite(const char* key, double& out, double min);
  template <class Int>
  ObjectReader& integer(const char* key, Int& out) {
    uint64_t value = 0;
    if (read_unsigned(key, 0, std::numeric_limits<Int>::max(), value)) {
      out = static_cast<Int>(value);
    }
    return *this;
  }
  // An integer in [min, max] (max is also capped at what Int holds).
  template <class Int>
  ObjectReader& integer(const char* key, Int& out, uint64_t min, uint64_t max) {
    uint64_t value = 0;
    const uint64_t cap = std::min<uint64_t>(max, std::numeric_limits<Int>::max());
    if (read_unsigned(key, min, cap, value)) out = static_cast<Int>(value);
    return *this;
  }
  // Records an error when the member is absent.
  ObjectReader& require(const char* key);
  // Marks a member as known without reading it (another parser owns it).
  ObjectReader& skip(const char* key);
  // The member if present (marked as read), else nullptr.
  const nlohmann::json* member(const char* key);
  // Folds in the status of a nested parse.
  ObjectReader& merge(const Status& nested);

  std::string path(const char* key) const { return where_ + "." + key; }
  // The member names asked for so far (read, required, skipped or looked up), in order.
  const std::vector<std::string>& keys() const { return known_; }
  // The first error recorded, if any.
  Status status() const;
  // As status(), and also an error for a member that no read, skip or member() asked for:
  // for configs, where an unknown key is a typo.
  Status strict_status() const;

 private:
  bool read_unsigned(const char* key, uint64_t min, uint64_t max, uint64_t& out);
  void fail(std::string message);

  const nlohmann::json& value_;
  std::string where_;
  std::vector<std::string> known_;
  Status status_;
};

}  // namespace fedcase
