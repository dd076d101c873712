#pragma once
// Shamir t-of-n secret sharing of 32-byte secrets over the prime field GF(p), p = 2^61 - 1.
//
// Why this field: a Mersenne prime makes reduction a shift and an add on 128-bit products, so
// sharing and reconstruction are a few hundred multiplications per secret, with no big-integer
// code. A 32-byte secret is cut into five 56-bit chunks (7 bytes each, the last padded with
// zeros), each below p and shared with its own random polynomial of degree t - 1 (coefficients
// uniform in GF(p) from the OS CSPRNG): any t shares give each chunk by Lagrange interpolation
// at 0, and any t - 1 shares are independent of the secret (each chunk is a uniformly random
// field element given them). A share is its x coordinate (the holder's index, >= 1) and the
// five y values: kShareBytes on the wire.
//
// Pure functions; thread-safe. Errors are Status values.

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "secagg/crypto.h"

namespace fedcase::secagg {

inline constexpr uint64_t kShamirPrime = (uint64_t(1) << 61) - 1;
inline constexpr size_t kShamirChunks = 5;
inline constexpr size_t kShareBytes = 4 + 8 * kShamirChunks;

struct ShamirShare {
  uint32_t x = 0;  // >= 1: the holder's index
  std::array<uint64_t, kShamirChunks> y{};
};

// One share of `secret` for each x in `xs` (distinct, >= 1), any `threshold` of which
// reconstruct it. kInvalidArgument for threshold 0 or above xs.size(), or bad xs.
Result<std::vector<ShamirShare>> shamir_split(const Bytes32& secret, uint32_t threshold,
                                              const std::vector<uint32_t>& xs);

// What shamir_recover found: the secret, and the indexes (into the shares given) of the shares
// that do not lie on its polynomials, increasing.
struct Recovered {
  Bytes32 secret{};
  std::vector<size_t> wrong;
};
// The secret of `shares` that `accept` takes (its commitment matches), from `threshold` of
// them: the first ones, else the first `threshold` of the others once each set of 1, 2, ...
// shares is left out in turn, at most `max_tries` interpolations in all. So wrong shares
// among more than `threshold` cannot fail the reconstruction while enough right ones
// arrived, and they are named. kInvalidArgument for fewer than `threshold` shares, a repeated
// or zero x, a y outside the field, or when no set tried gives a secret `accept` takes (an
// interpolation that is not a valid chunk never is: shares of different secrets or of another
// threshold). With an `accept` that takes any secret, the first `threshold` shares decide.
Result<Recovered> shamir_recover(const std::vector<ShamirShare>& shares, uint32_t threshold,
                                 const std::function<bool(const Bytes32&)>& accept,
                                 size_t max_tries = 4096);

// kShareBytes bytes: x (4 bytes) and y (8 bytes each), little-endian.
std::string encode_share(const ShamirShare& share);
// kInvalidArgument for a length other than kShareBytes, x = 0 or a y outside the field.
Result<ShamirShare> decode_share(std::string_view bytes);

}  // namespace fedcase::secagg
