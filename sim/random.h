#pragma once
// The distributions the fleet model draws from, over the scheduling library's xoshiro256**
// generator, so a fleet is the same on every platform and standard library (std
// distributions are implementation-defined). Pure functions; the generator is the caller's.

#include <vector>

#include "scheduling/rng.h"

namespace fedcase::sim {

using scheduling::Rng;

// Standard normal (Box-Muller).
double normal(Rng& rng);
// exp(N(ln median, sigma^2)): positive, with the given median; sigma 0 returns the median.
double lognormal(Rng& rng, double median, double sigma);
// Exponential with the given mean (> 0).
double exponential(Rng& rng, double mean);
// Gamma(shape, 1) for shape > 0 (Marsaglia-Tsang).
double gamma(Rng& rng, double shape);
// A point of the (k-1)-simplex drawn from the symmetric Dirichlet(alpha) (alpha > 0, k > 0).
std::vector<double> dirichlet(Rng& rng, double alpha, size_t k);
// Pareto(x_min, shape): x_min * U^(-1/shape), a power law with P(X > x) = (x_min / x)^shape.
double pareto(Rng& rng, double x_min, double shape);
// An index drawn with probability proportional to `weights` (non-negative, not all zero).
size_t categorical(Rng& rng, const std::vector<double>& weights);

}  // namespace fedcase::sim
