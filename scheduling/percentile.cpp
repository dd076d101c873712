#include "scheduling/percentile.h"

#include <algorithm>
#include <cmath>

namespace fedcase::scheduling {

double percentile(std::vector<double> values, double q) {
  const size_t n = values.size();
  const size_t rank = std::min(n - 1, static_cast<size_t>(std::floor(q * static_cast<double>(n))));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rank),
                   values.end());
  return values[rank];
}

}  // namespace fedcase::scheduling
