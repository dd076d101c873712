#include "aggregation/rdp_accountant.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "aggregation/state_codec.h"

namespace fedcase::aggregation {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr char kStateKind[] = "rdp_accountant";
// The fractional-order series stops once both of its terms fall below exp(-30) (as in the
// reference implementations); the cap only guards against a series that never does.
constexpr double kSeriesCutoff = -30;
constexpr int kMaxSeriesTerms = 100000;
constexpr double kMaxOrder = 10000;
constexpr double kPi = 3.14159265358979323846;
constexpr double kSqrt2 = 1.41421356237309504880;

double log_add(double a, double b) {
  if (a == -kInf) return b;
  if (b == -kInf) return a;
  const double hi = std::max(a, b);
  return hi + std::log1p(std::exp(-std::fabs(a - b)));
}

// log(exp(a) - exp(b)) for a >= b; NaN when a < b (a lost-precision series).
double log_sub(double a, double b) {
  if (b == -kInf) return a;
  if (a == b) return -kInf;
  if (a < b) return std::numeric_limits<double>::quiet_NaN();
  return std::log(std::expm1(a - b)) + b;
}

// log(erfc(x)), with the asymptotic expansion where erfc underflows.
double log_erfc(double x) {
  const double r = std::erfc(x);
  if (r > 0) return std::log(r);
  const double x2 = x * x;
  return -std::log(kPi) / 2 - std::log(x) - x2 - 0.5 / x2 + 0.625 / (x2 * x2) -
         37.0 / 24.0 / (x2 * x2 * x2) + 353.0 / 64.0 / (x2 * x2 * x2 * x2);
}

// log(A_alpha) for integer alpha: the binomial expansion of E[(1 - q + q * e^{(2z-1)/2s^2})^a].
double log_a_integer(double q, double sigma, int alpha) {
  double log_a = -kInf;
  double log_binom = 0;  // log C(alpha, i)
  for (int i = 0; i <= alpha; ++i) {
    if (i > 0) log_binom += std::log(static_cast<double>(alpha - i + 1)) - std::log(double(i));
    const double term = log_binom + i * std::log(q) + (alpha - i) * std::log1p(-q) +
                        (double(i) * i - i) / (2 * sigma * sigma);
    log_a = log_add(log_a, term);
  }
  return log_a;
}

// log(A_alpha) for fractional alpha: the integral split at z0 where the two Gaussians' mixture
// ratio crosses, each half expanded in a (generalised) binomial series.
Result<double> log_a_fractional(double q, double sigma, double alpha) {
  double log_a0 = -kInf, log_a1 = -kInf;
  const double z0 = sigma * sigma * std::log(1 / q - 1) + 0.5;
  double log_coef = 0;   // log |binom(alpha, i)|
  bool positive = true;  // sign of binom(alpha, i)
  for (int i = 0; i < kMaxSeriesTerms; ++i) {
    if (i > 0) {
      const double factor = (alpha - (i - 1)) / i;
      log_coef += std::log(std::fabs(factor));
      if (factor < 0) positive = !positive;
    }
    const double j = alpha - i;
    const double log_t0 = log_coef + i * std::log(q) + j * std::log1p(-q);
    const double log_t1 = log_coef + j * std::log(q) + i * std::log1p(-q);
    const double log_e0 = std::log(0.5) + log_erfc((i - z0) / (kSqrt2 * sigma));
    const double log_e1 = std::log(0.5) + log_erfc((z0 - j) / (kSqrt2 * sigma));
    const double log_s0 = log_t0 + (double(i) * i - i) / (2 * sigma * sigma) + log_e0;
    const double log_s1 = log_t1 + (j * j - j) / (2 * sigma * sigma) + log_e1;
    if (positive) {
      log_a0 = log_add(log_a0, log_s0);
      log_a1 = log_add(log_a1, log_s1);
    } else {
      log_a0 = log_sub(log_a0, log_s0);
      log_a1 = log_sub(log_a1, log_s1);
    }
    if (std::isnan(log_a0) || std::isnan(log_a1)) {
      return internal_error("RDP series lost precision at order " + std::to_string(alpha));
    }
    if (std::max(log_s0, log_s1) < kSeriesCutoff) return log_add(log_a0, log_a1);
  }
  return internal_error("RDP series did not converge at order " + std::to_string(alpha));
}

bool valid_order(double order) { return order > 1 && order <= kMaxOrder; }

}  // namespace

std::vector<double> default_rdp_orders() {
  std::vector<double> orders;
  for (int x = 1; x < 100; ++x) orders.push_back(1 + x / 10.0);
  for (int a = 12; a < 64; ++a) orders.push_back(a);
  return orders;
}

Result<double> sampled_gaussian_rdp(double q, double noise_multiplier, double order) {
  if (!(q >= 0 && q <= 1)) return invalid_argument("sampling rate must be in [0, 1]");
  if (!(noise_multiplier > 0) || !std::isfinite(noise_multiplier)) {
    return invalid_argument("noise multiplier must be positive and finite");
  }
  if (!valid_order(order)) return invalid_argument("RDP orders must be in (1, 10000]");
  if (q == 0) return 0.0;
  if (q == 1) return order / (2 * noise_multiplier * noise_multiplier);
  if (order == std::floor(order)) {
    return log_a_integer(q, noise_multiplier, static_cast<int>(order)) / (order - 1);
  }
  auto log_a = log_a_fractional(q, noise_multiplier, order);
  if (!log_a.ok()) return log_a.status();
  return *log_a / (order - 1);
}

Result<PrivacySpent> epsilon_from_rdp(const std::vector<double>& orders,
                                      const std::vector<double>& rdp, double delta,
                                      RdpConversion conversion) {
  if (orders.empty() || orders.size() != rdp.size()) {
    return invalid_argument("need one RDP value per order");
  }
  if (!(delta > 0 && delta < 1)) return invalid_argument("delta must be in (0, 1)");
  PrivacySpent best{kInf, orders.front()};
  for (size_t k = 0; k < orders.size(); ++k) {
    const double a = orders[k];
    const double r = rdp[k];
    if (!valid_order(a)) return invalid_argument("RDP orders must be in (1, 10000]");
    if (!(r >= 0)) return invalid_argument("RDP values must be non-negative");
    // RDP bounds the KL divergence, and delta >= sqrt(1 - exp(-KL)) already gives epsilon 0.
    const double eps = delta * delta + std::expm1(-r) > 0 ? 0.0
                       : conversion == RdpConversion::kImproved
                           ? r + std::log1p(-1 / a) - (std::log(delta) + std::log(a)) / (a - 1)
                           : r - std::log(delta) / (a - 1);
    if (eps < best.epsilon) best = {eps, a};
  }
  best.epsilon = std::max(0.0, best.epsilon);
  return best;
}

RdpAccountant::RdpAccountant() : RdpAccountant(default_rdp_orders()) {}

RdpAccountant::RdpAccountant(std::vector<double> orders)
    : orders_(std::move(orders)), rdp_(orders_.size(), 0.0) {}

Status RdpAccountant::add_rounds(double q, double noise_multiplier, uint64_t rounds) {
  std::vector<double> next = rdp_;
  for (size_t k = 0; k < orders_.size(); ++k) {
    auto one = sampled_gaussian_rdp(q, noise_multiplier, orders_[k]);
    if (!one.ok()) return one.status();
    next[k] += static_cast<double>(rounds) * *one;
  }
  rdp_ = std::move(next);
  rounds_ += rounds;
  return ok_status();
}

Result<PrivacySpent> RdpAccountant::spent(double delta, RdpConversion conversion) const {
  return epsilon_from_rdp(orders_, rdp_, delta, conversion);
}

std::string RdpAccountant::save_state() const {
  StateWriter writer(kStateKind);
  writer.put_doubles(orders_);
  writer.put_doubles(rdp_);
  writer.put_u64(rounds_);
  return writer.finish();
}

Status RdpAccountant::load_state(std::string_view state) {
  auto reader = StateReader::open(state, kStateKind);
  if (!reader.ok()) return reader.status();
  std::vector<double> orders, rdp;
  uint64_t rounds = 0;
  FEDCASE_RETURN_IF_ERROR(reader->get_doubles(orders));
  FEDCASE_RETURN_IF_ERROR(reader->get_doubles(rdp));
  FEDCASE_RETURN_IF_ERROR(reader->get_u64(rounds));
  FEDCASE_RETURN_IF_ERROR(reader->finish());
  if (orders.size() != rdp.size()) {
    return invalid_argument("saved rdp_accountant state has inconsistent sizes");
  }
  orders_ = std::move(orders);
  rdp_ = std::move(rdp);
  rounds_ = rounds;
  return ok_status();
}

}  // namespace fedcase::aggregation
