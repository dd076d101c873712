#include "common/crash_point.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace fedcase {
namespace {

struct Armed {
  std::string name;  // empty: no crash point is armed
  long nth = 1;
  std::atomic<long> passed{0};
};

Armed& armed() {
  static Armed* a = [] {
    auto* out = new Armed;
    const char* spec = std::getenv("FEDCASE_CRASH_AT");
    if (spec == nullptr) return out;
    std::string text = spec;
    const size_t at = text.find('@');
    out->name = text.substr(0, at);
    if (at != std::string::npos)
      out->nth = std::max(1L, std::strtol(text.c_str() + at + 1, nullptr, 10));
    return out;
  }();
  return *a;
}

}  // namespace

void crash_point(const char* name) {
  Armed& a = armed();
  if (a.name.empty() || a.name != name) return;
  if (a.passed.fetch_add(1) + 1 == a.nth) raise(SIGKILL);
}

}  // namespace fedcase
