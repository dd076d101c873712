#include "aggregation/config_reader.h"

#include <algorithm>
#include <cmath>

namespace fedcase::aggregation {

ConfigReader::ConfigReader(const nlohmann::json& config, std::string section)
    : config_(config), section_(std::move(section)) {}

Status ConfigReader::check_keys(const std::vector<std::string_view>& allowed) const {
  if (!config_.is_object()) return invalid_argument(section_ + " must be a JSON object");
  for (const auto& item : config_.items()) {
    if (std::find(allowed.begin(), allowed.end(), item.key()) == allowed.end()) {
      std::string names;
      for (std::string_view a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
      return invalid_argument(section_ + " has unknown key '" + item.key() + "' (expected " +
                              names + ")");
    }
  }
  return ok_status();
}

const nlohmann::json* ConfigReader::find(std::string_view key) const {
  auto it = config_.find(std::string(key));
  return it == config_.end() ? nullptr : &*it;
}

Status ConfigReader::get_number(std::string_view key, double& out) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return ok_status();
  FEDCASE_RETURN_IF_ERROR(require(value->is_number(), key, "must be a number"));
  out = value->get<double>();
  return require(std::isfinite(out), key, "must be finite");
}

Status ConfigReader::get_count(std::string_view key, uint64_t& out) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return ok_status();
  const bool non_negative_integer =
      value->is_number_unsigned() || (value->is_number_integer() && value->get<int64_t>() >= 0);
  FEDCASE_RETURN_IF_ERROR(require(non_negative_integer, key, "must be a non-negative integer"));
  out = value->get<uint64_t>();
  return ok_status();
}

Status ConfigReader::get_string(std::string_view key, std::string& out) const {
  const nlohmann::json* value = find(key);
  if (value == nullptr) return ok_status();
  FEDCASE_RETURN_IF_ERROR(require(value->is_string(), key, "must be a string"));
  out = value->get<std::string>();
  return ok_status();
}

Status ConfigReader::require(bool ok, std::string_view key, std::string_view requirement) const {
  if (ok) return ok_status();
  return invalid_argument(section_ + "." + std::string(key) + " " + std::string(requirement));
}

}  // namespace fedcase::aggregation
