#pragma once
// Privacy accounting for central DP rounds with Renyi differential privacy (RDP).
//
// One round is the sampled Gaussian mechanism: each client takes part independently with
// probability q (the sampling rate), clipped updates are summed, and Gaussian noise with
// standard deviation z * C is added (dp.h). Its RDP at order alpha is computed as in Mironov,
// Talwar and Zhang, "Renyi Differential Privacy of the Sampled Gaussian Mechanism" (2019), the
// method of TensorFlow Privacy and Opacus: a finite binomial sum for integer alpha, a
// convergent series over the two tails for fractional alpha, both in log space. RDP adds up
// over rounds; epsilon at a given delta is the minimum over the tracked orders of
//   kImproved: rdp + log((alpha - 1) / alpha) - (log(delta) + log(alpha)) / (alpha - 1)
//              (Balle et al. 2020, Prop. 12; what Opacus and Google's dp_accounting report)
//   kClassic:  rdp + log(1 / delta) / (alpha - 1)
//              (Mironov 2017, Prop. 3; what TensorFlow Privacy's early tools reported)
// clamped at 0, and 0 at orders where delta >= sqrt(1 - exp(-rdp)) (RDP bounds the KL
// divergence, which bounds delta at epsilon 0; as dp_accounting does). The improved bound is
// never larger.
//
// Amplification by sampling assumes clients are drawn at random with rate q. A selection
// policy that picks clients deterministically (by utility, speed, ...) gets no such
// amplification: account those rounds with q = 1.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace fedcase::aggregation {

enum class RdpConversion { kImproved, kClassic };

struct PrivacySpent {
  double epsilon = 0;
  double order = 0;  // the RDP order that gave the smallest epsilon
};

// The orders Opacus tracks by default: 1.1, 1.2, ..., 10.9, then 12, 13, ..., 63.
std::vector<double> default_rdp_orders();

// RDP at `order` (in (1, 10000]) of one application of the Gaussian mechanism with noise multiplier
// z (> 0) to a Poisson sample with rate q in [0, 1]. q = 0 gives 0, q = 1 gives order / (2 z^2).
// kInvalidArgument for arguments out of range.
Result<double> sampled_gaussian_rdp(double q, double noise_multiplier, double order);

// The smallest epsilon over `orders` for total RDP values `rdp` (same length, orders in
// (1, 10000], values >= 0) at delta in (0, 1). kInvalidArgument for bad input.
Result<PrivacySpent> epsilon_from_rdp(const std::vector<double>& orders,
                                      const std::vector<double>& rdp, double delta,
                                      RdpConversion conversion = RdpConversion::kImproved);

// Running RDP totals over a fixed set of orders. Not thread-safe.
class RdpAccountant {
 public:
  RdpAccountant();  // default_rdp_orders()
  // `orders`: each in (1, 10000]; construction does not check, the first add_rounds() or spent()
  // that meets a bad order reports it.
  explicit RdpAccountant(std::vector<double> orders);

  // Composes `rounds` rounds with sampling rate q and noise multiplier z. Leaves the totals
  // unchanged on error (kInvalidArgument).
  Status add_rounds(double q, double noise_multiplier, uint64_t rounds = 1);

  // Epsilon spent so far at `delta`.
  Result<PrivacySpent> spent(double delta,
                             RdpConversion conversion = RdpConversion::kImproved) const;

  uint64_t rounds() const { return rounds_; }
  const std::vector<double>& orders() const { return orders_; }
  const std::vector<double>& rdp() const { return rdp_; }

  // The orders, totals and round count (state_codec.h envelope); load_state(save_state())
  // restores an identical accountant, and rejects (kInvalidArgument) corrupted state, leaving
  // the accountant unchanged.
  std::string save_state() const;
  Status load_state(std::string_view state);

 private:
  std::vector<double> orders_;
  std::vector<double> rdp_;
  uint64_t rounds_ = 0;
};

}  // namespace fedcase::aggregation
