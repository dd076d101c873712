#include "scheduling/pace.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace fedcase::scheduling {

namespace {

Status check_range(const char* name, double value, double low, double high, bool high_open) {
  if (std::isfinite(value) && value >= low && (high_open ? value < high : value <= high)) {
    return ok_status();
  }
  return invalid_argument(std::string("pace.") + name + " must be in [" + std::to_string(low) +
                          ", " + std::to_string(high) + (high_open ? ")" : "]"));
}

}  // namespace

Status check_pace_config(const PaceConfig& c) {
  if (!(c.pool_factor >= 1 && c.pool_factor <= 1e6)) {
    return invalid_argument("pace.pool_factor must be in [1, 1e6]");
  }
  FEDCASE_RETURN_IF_ERROR(check_range("max_period_s", c.max_period_s, 0, 86400, false));
  FEDCASE_RETURN_IF_ERROR(check_range("min_period_s", c.min_period_s, 0, c.max_period_s, false));
  FEDCASE_RETURN_IF_ERROR(check_range("jitter", c.jitter, 0, 1, true));
  FEDCASE_RETURN_IF_ERROR(check_range("value_spread", c.value_spread, 0, 1, true));
  return check_range("reconnect_window_s", c.reconnect_window_s, 0, 3600, false);
}

double check_in_period(const PaceConfig& config, size_t fleet, double wanted, double awake_s) {
  if (!(wanted > 0)) return config.max_period_s;
  const double period = std::max(awake_s, 0.0) * (double(fleet) / wanted - 1);
  return std::clamp(period, config.min_period_s, config.max_period_s);
}

CheckInWindow check_in_window(const PaceConfig& config, double period_s, double value) {
  if (!std::isfinite(value)) value = 0.5;
  value = std::clamp(value, 0.0, 1.0);
  const double own = std::clamp(period_s * (1 + config.value_spread * (1 - 2 * value)),
                                config.min_period_s, config.max_period_s);
  return {own * (1 - config.jitter), own * (1 + config.jitter)};
}

double rank_among(const std::vector<double>& ascending, double value) {
  if (ascending.empty()) return 0.5;
  const auto below = std::lower_bound(ascending.begin(), ascending.end(), value);
  const auto up_to = std::upper_bound(below, ascending.end(), value);
  const double position = double(below - ascending.begin()) + double(up_to - below) / 2;
  return position / double(ascending.size());
}

}  // namespace fedcase::scheduling
