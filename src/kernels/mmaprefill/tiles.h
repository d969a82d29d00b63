// The tensor-core prefill family's tile table: one constexpr function per matrix instruction
// set, the single place where tile sizes are chosen (the reasons and measurements are in
// docs/mmaprefill.md).
#pragma once

#include "fmha_catalogue.h"

namespace fmha {
namespace mmaprefill {

struct TileShape {
    int consumers;           // warpgroups (wgmma) of 64 query rows each, sharing every K/V tile
    int block_keys;          // keys per K/V tile
    int stages;              // K/V tiles in flight (shared-memory ring)
    int producer_registers;  // per thread, after reallocation (setmaxnreg)
    int consumer_registers;
};

template <MatrixCore kCore>
constexpr TileShape tile_shape(int head_dim, bool causal, DType dtype);

// Hopper: the consumers' registers hold the 64 x head_dim output accumulator and a 64 x
// block_keys score tile beside the previous tile's probabilities; shared memory (227 KB) holds
// Q, two stages of K and V and the output's staging rows. Small head dims are softmax-bound,
// so a third consumer's softmax hides under the other two's GEMMs there; its 160 registers
// hold 112-key tiles beside the causal mask's bookkeeping.
template <>
constexpr TileShape tile_shape<MatrixCore::wgmma>(int head_dim, bool causal, DType dtype) {
    (void)dtype;
    if (head_dim <= 64) return {3, causal ? 112 : 128, 2, 24, 160};
    if (head_dim <= 128) return {2, 128, 2, 24, 240};
    return {2, 80, 2, 24, 240};
}

}  // namespace mmaprefill
}  // namespace fmha
