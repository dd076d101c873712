#include "secagg/shamir.h"

#include <algorithm>
#include <set>

namespace fedcase::secagg {
namespace {

constexpr size_t kChunkBytes = 7;
constexpr uint64_t kP = kShamirPrime;

uint64_t reduce(unsigned __int128 v) {
  // v < 2^122: fold the high bits twice (2^61 = 1 mod p).
  uint64_t lo = static_cast<uint64_t>(v & kP);
  uint64_t hi = static_cast<uint64_t>(v >> 61);
  uint64_t r = lo + (hi & kP) + (hi >> 61);
  r = (r & kP) + (r >> 61);
  return r >= kP ? r - kP : r;
}

uint64_t add(uint64_t a, uint64_t b) {
  uint64_t r = a + b;
  return r >= kP ? r - kP : r;
}
uint64_t sub(uint64_t a, uint64_t b) { return a >= b ? a - b : a + kP - b; }
uint64_t mul(uint64_t a, uint64_t b) { return reduce(static_cast<unsigned __int128>(a) * b); }

uint64_t power(uint64_t base, uint64_t exponent) {
  uint64_t result = 1;
  while (exponent > 0) {
    if (exponent & 1) result = mul(result, base);
    base = mul(base, base);
    exponent >>= 1;
  }
  return result;
}

uint64_t inverse(uint64_t a) { return power(a, kP - 2); }  // Fermat: a != 0

// Field elements uniform in [0, p): 61 random bits, redrawn in the one case they give p.
Status random_elements(std::vector<uint64_t>& out) {
  for (uint64_t& v : out) {
    do {
      uint64_t raw = 0;
      FEDCASE_RETURN_IF_ERROR(random_bytes(reinterpret_cast<uint8_t*>(&raw), sizeof(raw)));
      v = raw & kP;
    } while (v == kP);
  }
  return ok_status();
}

std::array<uint64_t, kShamirChunks> chunks_of(const Bytes32& secret) {
  std::array<uint64_t, kShamirChunks> chunks{};
  for (size_t byte = 0; byte < secret.size(); ++byte) {
    chunks[byte / kChunkBytes] |= uint64_t(secret[byte]) << (8 * (byte % kChunkBytes));
  }
  return chunks;
}

}  // namespace

Result<std::vector<ShamirShare>> shamir_split(const Bytes32& secret, uint32_t threshold,
                                              const std::vector<uint32_t>& xs) {
  if (threshold == 0 || threshold > xs.size()) {
    return invalid_argument("the threshold must be in [1, number of shares]");
  }
  if (std::set<uint32_t>(xs.begin(), xs.end()).size() != xs.size() ||
      std::set<uint32_t>(xs.begin(), xs.end()).count(0) != 0) {
    return invalid_argument("share x coordinates must be distinct and >= 1");
  }
  const std::array<uint64_t, kShamirChunks> chunks = chunks_of(secret);
  // coefficients[c * threshold + d]: degree d of chunk c's polynomial; degree 0 is the chunk.
  std::vector<uint64_t> coefficients(kShamirChunks * threshold);
  FEDCASE_RETURN_IF_ERROR(random_elements(coefficients));
  for (size_t c = 0; c < kShamirChunks; ++c) coefficients[c * threshold] = chunks[c];
  std::vector<ShamirShare> shares(xs.size());
  for (size_t s = 0; s < xs.size(); ++s) {
    shares[s].x = xs[s];
    for (size_t c = 0; c < kShamirChunks; ++c) {
      uint64_t y = 0;  // Horner
      for (size_t d = threshold; d-- > 0;) y = add(mul(y, xs[s]), coefficients[c * threshold + d]);
      shares[s].y[c] = y;
    }
  }
  return shares;
}

namespace {

// The y values at `x` of the polynomials through `points` (distinct x >= 1, values checked):
// Lagrange interpolation, l_i(x) = prod_{j != i} (x - x_j) / (x_i - x_j).
std::array<uint64_t, kShamirChunks> interpolate_at(const std::vector<const ShamirShare*>& points,
                                                   uint64_t x) {
  std::array<uint64_t, kShamirChunks> out{};
  for (size_t i = 0; i < points.size(); ++i) {
    uint64_t num = 1, den = 1;
    for (size_t j = 0; j < points.size(); ++j) {
      if (j == i) continue;
      num = mul(num, sub(x, points[j]->x));
      den = mul(den, sub(points[i]->x, points[j]->x));
    }
    const uint64_t weight = mul(num, inverse(den));
    for (size_t c = 0; c < kShamirChunks; ++c) out[c] = add(out[c], mul(weight, points[i]->y[c]));
  }
  return out;
}

// Every share has x >= 1, no x twice, and its values in the field.
Status check_shares(const std::vector<ShamirShare>& shares) {
  std::set<uint32_t> seen;
  for (const ShamirShare& share : shares) {
    if (share.x == 0 || !seen.insert(share.x).second) {
      return invalid_argument("shares must have distinct x coordinates >= 1");
    }
    for (uint64_t y : share.y) {
      if (y >= kP) return invalid_argument("a share holds a value outside the field");
    }
  }
  return ok_status();
}

// The secret whose chunks are `values` (the polynomials at 0); kInvalidArgument when a value
// is not a chunk (shares of different secrets or of another threshold).
Result<Bytes32> secret_of(const std::array<uint64_t, kShamirChunks>& values) {
  Bytes32 secret{};
  for (size_t c = 0; c < kShamirChunks; ++c) {
    const size_t first = c * kChunkBytes;
    const size_t bytes = std::min(kChunkBytes, secret.size() - first);
    if ((values[c] >> (8 * bytes)) != 0) {
      return invalid_argument("the shares do not interpolate to a secret");
    }
    for (size_t b = 0; b < bytes; ++b) {
      secret[first + b] = static_cast<uint8_t>(values[c] >> (8 * b));
    }
  }
  return secret;
}

}  // namespace

Result<Recovered> shamir_recover(const std::vector<ShamirShare>& shares, uint32_t threshold,
                                 const std::function<bool(const Bytes32&)>& accept,
                                 size_t max_tries) {
  if (threshold == 0 || shares.size() < threshold) {
    return invalid_argument("reconstruction needs " + std::to_string(threshold) + " shares, got " +
                            std::to_string(shares.size()));
  }
  FEDCASE_RETURN_IF_ERROR(check_shares(shares));
  const size_t n = shares.size();
  size_t tries = 0;
  // Leave out e shares (e = 0, 1, ... up to n - threshold), each set of them in turn, and
  // interpolate through the first `threshold` of the others: e wrong shares are outvoted once
  // the set left out holds them all.
  for (size_t e = 0; e + threshold <= n; ++e) {
    std::vector<size_t> out(e);  // the indexes left out, increasing
    for (size_t i = 0; i < e; ++i) out[i] = i;
    while (true) {
      if (tries++ == max_tries) {
        return invalid_argument("no " + std::to_string(threshold) + " of the " +
                                std::to_string(n) + " shares give the committed secret within " +
                                std::to_string(max_tries) + " tries");
      }
      std::vector<const ShamirShare*> points;
      for (size_t i = 0, k = 0; i < n && points.size() < threshold; ++i) {
        if (k < e && out[k] == i) {
          ++k;
          continue;
        }
        points.push_back(&shares[i]);
      }
      Result<Bytes32> secret = secret_of(interpolate_at(points, 0));
      if (secret.ok() && accept(*secret)) {
        Recovered found{*secret, {}};
        for (size_t i = 0; i < n; ++i) {
          if (interpolate_at(points, shares[i].x) != shares[i].y) found.wrong.push_back(i);
        }
        return found;
      }
      // The next set of e indexes, in lexicographic order.
      size_t k = e;
      while (k > 0 && out[k - 1] == n - e + k - 1) --k;
      if (k == 0) break;
      ++out[k - 1];
      for (size_t j = k; j < e; ++j) out[j] = out[j - 1] + 1;
    }
  }
  return invalid_argument("no " + std::to_string(threshold) + " of the " + std::to_string(n) +
                          " shares give the committed secret");
}

std::string encode_share(const ShamirShare& share) {
  std::string out;
  out.reserve(kShareBytes);
  for (int i = 0; i < 4; ++i) out += static_cast<char>((share.x >> (8 * i)) & 0xff);
  for (uint64_t y : share.y) append_u64(out, y);
  return out;
}

Result<ShamirShare> decode_share(std::string_view bytes) {
  if (bytes.size() != kShareBytes) {
    return invalid_argument("a share holds " + std::to_string(kShareBytes) + " bytes");
  }
  ShamirShare share;
  const auto byte = [&](size_t i) { return uint64_t(static_cast<uint8_t>(bytes[i])); };
  for (size_t i = 0; i < 4; ++i) share.x |= static_cast<uint32_t>(byte(i) << (8 * i));
  for (size_t c = 0; c < kShamirChunks; ++c) {
    for (size_t i = 0; i < 8; ++i) share.y[c] |= byte(4 + 8 * c + i) << (8 * i);
    if (share.y[c] >= kP) return invalid_argument("a share holds a value outside the field");
  }
  if (share.x == 0) return invalid_argument("a share's x coordinate must be >= 1");
  return share;
}

}  // namespace fedcase::secagg
