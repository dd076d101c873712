#pragma once
// Minimal thread-safe logging to stderr: "2026-11-29T16:40:00.123Z INFO message".
// The threshold comes from FEDCASE_LOG (debug, info, warn, error; default info).

#include <string_view>

namespace fedcase {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

void log_message(LogLevel level, std::string_view message);
inline void log_debug(std::string_view m) { log_message(LogLevel::kDebug, m); }
inline void log_info(std::string_view m) { log_message(LogLevel::kInfo, m); }
inline void log_warn(std::string_view m) { log_message(LogLevel::kWarn, m); }
inline void log_error(std::string_view m) { log_message(LogLevel::kError, m); }

}  // namespace fedcase
