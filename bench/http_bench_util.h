#pragma once
// What the benchmarks that drive a real coordinator over HTTP share: their tokens, latency
// percentiles and fatal errors.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace fedcase::bench {

inline constexpr const char* kAdminToken = "bench-admin-token-0123456789";
inline constexpr const char* kEnrollmentToken = "bench-enroll-token-0123456789";

// The q-quantile (q in [0, 1]) of `values`, by the nearest rank; 0 for none.
inline double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1, size_t(q * double(values.size() - 1) + 0.5))];
}

// Prints "<bench>: <what>" and exits 1: a benchmark that cannot run has no figures.
[[noreturn]] inline void die(const char* bench, const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", bench, what.c_str());
  std::exit(1);
}

}  // namespace fedcase::bench
