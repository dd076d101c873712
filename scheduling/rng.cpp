#include "scheduling/rng.h"

namespace fedcase::scheduling {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  for (uint64_t& word : s_) word = splitmix64(seed);
}

uint64_t Rng::next() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

uint64_t Rng::below(uint64_t n) {
  // Lemire's multiply-and-reject: unbiased, one multiplication in the common case.
  unsigned __int128 m = static_cast<unsigned __int128>(next()) * n;
  uint64_t low = static_cast<uint64_t>(m);
  if (low < n) {
    const uint64_t threshold = -n % n;
    while (low < threshold) {
      m = static_cast<unsigned __int128>(next()) * n;
      low = static_cast<uint64_t>(m);
    }
  }
  return static_cast<uint64_t>(m >> 64);
}

double Rng::unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

nlohmann::json Rng::save() const { return nlohmann::json::array({s_[0], s_[1], s_[2], s_[3]}); }

Status Rng::load(const nlohmann::json& state) {
  if (!state.is_array() || state.size() != 4) {
    return invalid_argument("rng state must be an array of four unsigned integers");
  }
  uint64_t words[4];
  bool any_nonzero = false;
  for (size_t i = 0; i < 4; ++i) {
    if (!state[i].is_number_unsigned()) {
      return invalid_argument("rng state must be an array of four unsigned integers");
    }
    words[i] = state[i].get<uint64_t>();
    any_nonzero = any_nonzero || words[i] != 0;
  }
  if (!any_nonzero) return invalid_argument("rng state must not be all zero");
  for (size_t i = 0; i < 4; ++i) s_[i] = words[i];
  return ok_status();
}

}  // namespace fedcase::scheduling
