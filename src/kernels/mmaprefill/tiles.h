// The tensor-core prefill family's tile table: one constexpr function per matrix instruction
// set, the single place where tile sizes are chosen (the reasons and measurements are in
// docs/mmaprefill.md).
#pragma once

#include "fmha_catalogue.h"

namespace fmha {
namespace mmaprefill {

struct TileShape {
    int consumers;           // warpgroups (wgmma) of 64 query rows or waves (MFMA) of 32, sharing every K/V tile
    int block_keys;          // keys per K/V tile
    int stages;              // K/V tiles in shared memory (wgmma: the TMA ring; MFMA: V^T's, K has two)
    int producer_registers;  // per thread, after reallocation (setmaxnreg); 0: none (MFMA)
    int consumer_registers;
};

// The family's kernels of one tuple: plain (launches with no run-time option), options (packed
// batches, softcapping, ALiBi, dropout: their state takes registers), paged (a paged KV cache,
// whose boxes several producer warps issue, and packed batches, but no scoring option nor
// dropout: where has_paged_kernel()), and copies (all of those, and element rows, which the
// producer warpgroup copies: registers of their own). A launch takes the first that serves it;
// where options and copies have one tile shape, one kernel is built for both (mmaprefill.h:
// with_traits). And packed: packed batches alone (no pages, no other option), whose producer
// claims the tiles (mmaprefill.h: launch_blocks): registers the options' producer does not have;
// packed_options: the same claims beside the scoring options and dropout (the options' code and
// tiles, the packed kernel's registers).
enum class Variant { plain, options, paged, copies, packed, packed_options };

// short_keys: the launch's rows see few keys (the launcher's rule), where a tile's share of
// keys crossing the causal diagonal is large.
template <MatrixCore kCore>
constexpr TileShape tile_shape(int head_dim, bool causal, DType dtype, bool short_keys, Variant variant);

constexpr bool operator==(const TileShape& a, const TileShape& b) {
    return a.consumers == b.consumers && a.block_keys == b.block_keys && a.stages == b.stages &&
           a.producer_registers == b.producer_registers && a.consumer_registers == b.consumer_registers;
}

// Hopper: the consumers' registers hold the 64 x head_dim output accumulator and a 64 x
// block_keys score tile beside the previous tile's probabilities; shared memory (227 KB) holds
// Q, two stages of K and V and the output's staging rows. Small head dims are softmax-bound,
// so a third consumer's softmax hides under the other two's GEMMs there; its 160 registers
// hold 112-key tiles beside the causal mask's bookkeeping. Causal launches on short key ranges
// take 64-key tiles at d64 and d256, as wide as a consumer's rows: the tiles crossing the
// diagonal are then each consumer's own 64 x 64 triangle, not wider tiles it sees in part,
// which outweighs the narrower tiles' dearer steps there (d128's 128-key tiles already are two
// consumers' rows; 64 is slower there). The options spill with d64's 112- and 128-key tiles:
// they take 96, and 64 at d256 (80 spill at 240). The copies' producer loads a paged cache by
// TMA boxes and copies element rows (paged_tiles.h): in 56 registers at d64 (48 spilled its
// walks), its three consumers then keeping 152 (the options alone keep 160); in 56 at d128 (48
// spilled), its two consumers keeping 224; in 40 at d256, whose consumers spill at 224 and keep
// 232 (setmaxnreg's pool, WgmmaTraits; docs/mmaprefill.md, "Paged KV"). The paged kernel's
// producer, which copies nothing, fits 40 at d128 too (consumers 232; at 24 it spilled), and
// its consumers' code lacks the options': 2-4% faster than the copies' kernel at pages of 64 and
// up. At d64 it keeps the copies' 56 / 152 but fits the plain kernel's 112-key causal tiles,
// which the options' code did not. The options alone keep the plain kernel's registers. The
// packed kernel's producer claims tiles in 32 (at 24 it spilled; the options' kernel with it, its
// consumers at 232, ran option launches 1-8% slower), its consumers keeping the plain kernel's
// 160 at d64 (112-key tiles: 128 spilled) and the paged kernel's 232 and 64-key tiles at d256
// (80 spilled); packed_options keeps the options' tiles with that producer (d64: 96 keys at 160)
// (docs/decisions.md, "The serving options without the producer's copies", "A
// paged kernel without the options", "d64's paged kernel on the plain kernel's key tiles",
// "Packed batches on claimed tiles", "Packed launches with options claim too").
template <>
constexpr TileShape tile_shape<MatrixCore::wgmma>(int head_dim, bool causal, DType dtype, bool short_keys, Variant variant) {
    (void)dtype;
    const bool short_causal = causal && short_keys;
    const bool copies = variant == Variant::copies, paged = variant == Variant::paged;
    const bool walks_pages = copies || paged;  // the producer's registers for a paged cache's walks
    const bool claims = variant == Variant::packed || variant == Variant::packed_options;  // the producer's registers for claiming tiles
    if (head_dim <= 64) {
        if (short_causal) return {3, 64, 3, walks_pages ? 56 : claims ? 32 : 24, walks_pages ? 152 : 160};
        if (variant == Variant::packed) return {3, 112, 2, 32, 160};
        if (paged) return {3, 112, 2, 56, 152};  // causal only (has_paged_kernel)
        if (variant != Variant::plain) return {3, 96, 2, copies ? 56 : claims ? 32 : 24, copies ? 152 : 160};
        return {3, causal ? 112 : 128, 2, 24, 160};
    }
    if (head_dim <= 128) return {2, 128, 2, copies ? 56 : paged ? 40 : claims ? 32 : 24, copies ? 224 : paged || claims ? 232 : 240};
    if (walks_pages) return {2, 64, 2, 40, 232};
    if (claims) return {2, 64, 2, 32, 232};
    if (variant == Variant::options || short_causal) return {2, 64, 2, 24, 240};
    return {2, 80, 2, 24, 240};
}

// Whether paged launches without options have a kernel of their own (Variant::paged). At d64 only
// causal ones: there the paged kernel's 112-key tiles run pages of 16 up to 10% faster than the
// copies' kernel's 96, but no-mask launches ran 3% slower on them than on the copies' kernel
// (docs/decisions.md, "d64's paged kernel on the plain kernel's key tiles").
constexpr bool has_paged_kernel(int head_dim, bool causal) { return head_dim > 64 || causal; }

// CDNA (gfx908, gfx90a, gfx942 alike: 64 KiB of LDS per workgroup, 512 registers per lane of a
// wave alone on its SIMD): 4 waves of 32 query rows; in LDS two stages of K (row-major) and
// `stages` of V^T, rows padded by 16 bytes. The key tile is a multiple of 32 (the M of the score
// product). With two V^T stages one barrier per key tile serves (d <= 128: 36-37 KiB); d256's
// V^T fits once beside two K stages (53 KiB), so its V^T store waits for a second barrier.
template <>
constexpr TileShape tile_shape<MatrixCore::mfma>(int head_dim, bool causal, DType dtype, bool short_keys, Variant variant) {
    (void)causal, (void)dtype, (void)short_keys, (void)variant;
    if (head_dim <= 64) return {4, 64, 2, 0, 0};
    if (head_dim <= 128) return {4, 32, 2, 0, 0};
    return {4, 32, 1, 0, 0};
}

}  // namespace mmaprefill
}  // namespace fmha
