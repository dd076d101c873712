#pragma once
// Fixed-point encoding of a client's update for secure aggregation, and its inverse on the sum.
//
// Encoding (the client, before masking):
//  1. clip the delta to L2 norm `clip` (delta * min(1, clip / ||delta||)). L2, not per
//     coordinate: it keeps the update's direction, it is the bound central DP's sensitivity
//     needs (aggregation/dp.h clips the same way), and it also bounds every coordinate by
//     `clip`, which is what the modulus needs. The coordinator can no longer check a norm it
//     cannot see, so the client clips before it quantises;
//  2. scale by weight / max_weight (in [0, 1]: the FedAvg weight rides inside the vector, so
//     the unmasked sum is sum_i w_i delta_i up to the constant max_weight) and by `scale`;
//  3. round stochastically: x becomes floor(x) + 1 with probability x - floor(x), else floor(x),
//     with uniform draws from a PRG seeded by the caller. Unbiased (E[q] = x), so the rounding
//     errors of K clients average out instead of adding up in one direction, and |q - x| < 1;
//  4. map to Z_{2^64} (two's complement); the weight itself is the last word, unscaled.
//
// Decoding (the coordinator, on the unmasked sum mod 2^bits): each word read as a signed
// bits-bit integer, divided by `scale` and multiplied by max_weight; the last word is the total
// weight. With K clients the error of each coordinate of sum_i w_i delta_i is below
// K * max_weight / scale (each client's rounding error is below one step).
//
// Pure functions; thread-safe.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "secagg/prg.h"

namespace fedcase::secagg {

// min(1, clip / ||values||_2). kUnprocessable for a non-finite value.
Result<double> l2_clip_factor(const float* values, size_t count, double clip);

// out[i] = stochastic_round(values[i] * multiplier), as two's complement mod 2^64, for i in
// [0, count); the uniform draws are words [offset, offset + count) of `rounding`'s stream
// (4-byte words), so chunks of one vector can be encoded apart.
Status quantize(const float* values, size_t count, double multiplier, const PrgKey& rounding,
                uint64_t offset, PrgExpander& expander, uint64_t* out);

// The signed value of a bits-bit word (bits in [1, 64]).
int64_t to_signed(uint64_t word, uint32_t bits);

}  // namespace fedcase::secagg
