#pragma once
// Strict reading of a factory's JSON config object: unknown keys and wrongly typed values are
// errors (kInvalidArgument naming the section and key), absent keys keep their defaults.

#include <cstdint>
#include <vector>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace fedcase::aggregation {

class ConfigReader {
 public:
  // `config` must outlive the reader; `section` prefixes error messages ("aggregation").
  ConfigReader(const nlohmann::json& config, std::string section);

  // kInvalidArgument unless the config is an object whose keys are all in `allowed`.
  Status check_keys(const std::vector<std::string_view>& allowed) const;

  // Each sets `out` when `key` is present and well typed, and leaves it alone when absent.
  Status get_number(std::string_view key, double& out) const;
  Status get_count(std::string_view key, uint64_t& out) const;  // a non-negative integer
  Status get_string(std::string_view key, std::string& out) const;

  // kInvalidArgument "<section>.<key> <requirement>" unless `ok`.
  Status require(bool ok, std::string_view key, std::string_view requirement) const;

 private:
  const nlohmann::json* find(std::string_view key) const;

  const nlohmann::json& config_;
  std::string section_;
};

}  // namespace fedcase::aggregation
