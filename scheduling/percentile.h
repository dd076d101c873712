#pragma once
// Nearest-rank percentile, the definition Oort uses for its preferred duration and its
// utility clip: the value at index min(floor(q * n), n - 1) of the ascending order.

#include <vector>

namespace fedcase::scheduling {

// Percentile `q` (in [0, 1]) of `values`, in O(n). Precondition: `values` is not empty.
double percentile(std::vector<double> values, double q);

}  // namespace fedcase::scheduling
