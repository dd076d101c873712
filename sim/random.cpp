#include "sim/random.h"

#include <cmath>

namespace fedcase::sim {
namespace {

constexpr double kTwoPi = 6.283185307179586;

// Uniform in (0, 1]: safe under log().
double open_unit(Rng& rng) { return 1.0 - rng.unit(); }

}  // namespace

double normal(Rng& rng) {
  return std::sqrt(-2.0 * std::log(open_unit(rng))) * std::cos(kTwoPi * rng.unit());
}

double lognormal(Rng& rng, double median, double sigma) {
  return median * std::exp(sigma * normal(rng));
}

double exponential(Rng& rng, double mean) { return -mean * std::log(open_unit(rng)); }

double gamma(Rng& rng, double shape) {
  if (shape < 1) {
    // Boost a Gamma(shape + 1) draw: X * U^(1/shape) ~ Gamma(shape).
    return gamma(rng, shape + 1) * std::pow(open_unit(rng), 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x = normal(rng);
    double v = 1 + c * x;
    if (v <= 0) continue;
    v = v * v * v;
    const double u = open_unit(rng);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

std::vector<double> dirichlet(Rng& rng, double alpha, size_t k) {
  std::vector<double> p(k);
  double sum = 0;
  for (double& x : p) sum += (x = gamma(rng, alpha));
  if (sum <= 0) {
    // Every draw underflowed (tiny alpha): all mass on one coordinate.
    p[rng.below(k)] = sum = 1;
  }
  for (double& x : p) x /= sum;
  return p;
}

double pareto(Rng& rng, double x_min, double shape) {
  return x_min * std::pow(open_unit(rng), -1.0 / shape);
}

size_t categorical(Rng& rng, const std::vector<double>& weights) {
  double total = 0;
  for (double w : weights) total += w;
  double r = rng.unit() * total;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (r < weights[i]) return i;
    r -= weights[i];
  }
  // Rounding left r at or past the end: the last index with weight.
  for (size_t i = weights.size(); i-- > 0;) {
    if (weights[i] > 0) return i;
  }
  return 0;
}

}  // namespace fedcase::sim
