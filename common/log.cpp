#include "common/log.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

#include "common/mutex.h"

namespace fedcase {
namespace {

LogLevel threshold_from_env() {
  const char* env = std::getenv("FEDCASE_LOG");
  std::string v = env ? env : "info";
  if (v == "debug") return LogLevel::kDebug;
  if (v == "warn") return LogLevel::kWarn;
  if (v == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "DEBUG";
    case LogLevel::kInfo:
      return "INFO";
    case LogLevel::kWarn:
      return "WARN";
    case LogLevel::kError:
      return "ERROR";
  }
  return "INFO";
}

}  // namespace

void log_message(LogLevel level, std::string_view message) {
  static const LogLevel threshold = threshold_from_env();
  static Mutex mu;
  if (level < threshold) return;
  auto now = std::chrono::system_clock::now();
  std::time_t secs = std::chrono::system_clock::to_time_t(now);
  int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
  MutexLock lock(mu);
  std::fprintf(stderr, "%s.%03dZ %s %.*s\n", stamp, millis, level_name(level),
               static_cast<int>(message.size()), message.data());
}

}  // namespace fedcase
