// The staged one-step items of 16 rows (MmaTraits<.., 2, true, 4, 1, true>: 9-16 query rows per KV
// head, or tiles of 2 or 4 KV heads' few rows and keys, MmaTraits<.., 2, true, 4, heads>) with the
// rows as the MMAs' M dimension: S = Q K^T and O = P V in m16n8k16 tiles of 16 rows, so that
// a lane holds two rows (not four), P's A fragments are S's accumulators packed (no transpose) and
// V's B fragments come by ldmatrix .trans (no register moves); the finished rows go through
// shared memory (stmatrix) and leave as 16-byte stores, two lanes a row, each lane locating one
// row (docs/decisions.md, "Staged items of 16 rows with the rows as M; staged tiles of several
// KV heads").
#pragma once

#include "kernels/decode/tensor_core.h"

namespace fmha {
namespace decode {

// Head dim 256 computes O in two parts of 128 head dims (16 rows of all 256 would hold 128
// accumulators a lane), each part's V fragments loaded for it; so the next item's V copies wait
// for the last part (its Q and K copies go out after S as elsewhere).
template <class T>
inline constexpr int kOutputParts = T::kHeadDim > 128 ? 2 : 1;

// A warp's tiles, [row][16-byte chunk] (swizzled as staged_chunk): Q's 16 rows, K's and V's 16
// keys, and one output part's 16 rows on their way out.
template <class T>
struct RowsAsMTiles {
    static constexpr int kChunks = T::kHeadDim / 8, kPartChunks = kChunks / kOutputParts<T>;
    uint4 q[16 * kChunks], k[16 * kChunks], v[16 * kChunks], o[16 * kPartChunks];
};

template <class T, class Config>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) staged_rows_kernel(const FwdParams p, const Plan plan) {
    constexpr DType kDType = Config::dtype;
    using Numeric = DTypeTraits<kDType>;
    using Tiles = RowsAsMTiles<T>;
    constexpr int kChunks = Tiles::kChunks, kPartChunks = Tiles::kPartChunks;
    constexpr bool kLateValues = kOutputParts<T> > 1;
    constexpr bool kMasked = Config::mask == Mask::causal;
    static_assert(T::kRowsAsM && T::kTileRows == 16 && T::kKeysPerStep == 16 && !T::kOptions, "16 rows at up to 16 keys");

    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int warp_in_block = threadIdx.x / 32;
    const float scale_log2 = p.scale * kLog2e;
    extern __shared__ float4 block_shared[];
    Tiles& tiles = reinterpret_cast<Tiles*>(block_shared)[warp_in_block];
    // This lane's matrix row for ldmatrix / stmatrix over 16 rows and two chunks: lane l gives
    // row l % 8 + 8 ((l / 8) % 2) of chunk l / 16 (the A operand's and C's order).
    const int m_row = lane % 8 + 8 * (lane / 8 % 2), m_chunk = lane / 16;
    auto stage = [&](int64_t index) { return stage_item<T, kMasked>(p, plan, index, tiles.q, tiles.k, kLateValues ? nullptr : tiles.v, lane); };

    ItemKeys next = stage(int64_t(blockIdx.x) * T::kGroups + warp_in_block);
    if constexpr (kLateValues) copy_key_rows<T>(p, next, p.v, p.v_strides, tiles.v, lane);
    for (int64_t first = int64_t(blockIdx.x) * T::kGroups; first < plan.items; first += int64_t(gridDim.x) * T::kGroups) {
        const WorkItem item = next.item;
        const int kv_lo = next.kv_lo, kv_hi = next.kv_hi;
        auto tile_row = [&](int r, WorkItem& of_head) { return tile_query_row<T>(p, plan, item, r, of_head); };
        WorkItem heads[2];
        const QueryRow mine[2] = {tile_row(g, heads[0]), tile_row(g + 8, heads[1])};
        copy_async_wait_all();
        sync_warp();

        // S = Q K^T: s[n] holds rows g (0, 1) and g + 8 (2, 3), keys kv_lo + 8 n + 2t (+1).
        float s[2][4] = {};
#pragma unroll
        for (int i = 0; i < kChunks / 2; ++i) {
            uint32_t a[4], b[4];
            load_matrices_x4<false>(a, &tiles.q[staged_chunk<T>(m_row, 2 * i + m_chunk)]);
            // B[k][n] = K[n][k]: matrices (keys 0-7 | 8-15) x (chunk 2i | 2i + 1), the first n tile's two first.
            load_matrices_x4<false>(b, &tiles.k[staged_chunk<T>(lane % 8 + 8 * (lane / 16), 2 * i + lane / 8 % 2)]);
            mma_16x16x16<kDType>(s[0], s[1], a, b);
        }
        // V's B fragments (B[k][n] = V[k][n], read transposed), two n tiles of 8 head dims each;
        // with late values each part loads its own.
        [[maybe_unused]] uint32_t vb[kLateValues ? 1 : kChunks / 2][4];
        if constexpr (!kLateValues) {
#pragma unroll
            for (int c = 0; c < kChunks / 2; ++c) load_matrices_x4<true>(vb[c], &tiles.v[staged_chunk<T>(m_row, 2 * c + m_chunk)]);
        }
        // Every tile the next item's copies write is read: they may go out.
        sync_warp();
        next = stage(first + int64_t(gridDim.x) * T::kGroups + warp_in_block);

        // The one-step softmax per row; a row's 16 scores are spread over the 4 lanes of its g.
        float row_max[2], row_sum[2], inv[2];
        uint32_t pa[4];  // P as A: rows g | g + 8, keys 2t | 8 + 2t
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            float score[2][2];
            float step_max = -INFINITY;
#pragma unroll
            for (int n = 0; n < 2; ++n) {
#pragma unroll
                for (int c = 0; c < 2; ++c) {
                    // Key slot 8n + 2t + c: key slot % T::kKeySlots of the tile's head slot / T::kKeySlots.
                    const int slot = 8 * n + 2 * t + c, key = kv_lo + slot % T::kKeySlots;
                    const bool own_head = T::kHeadsPerTile == 1 || slot / T::kKeySlots == (g + 8 * e) / T::kRows;
                    score[n][c] = own_head && key < kv_hi && mine[e].template sees<kMasked>(key, p.window) ? s[n][2 * e + c] * scale_log2
                                                                                                            : -INFINITY;
                    step_max = fmaxf(step_max, score[n][c]);
                }
            }
#pragma unroll
            for (int offset = 1; offset < 4; offset *= 2) step_max = fmaxf(step_max, __shfl_xor(step_max, offset));
            row_max[e] = -INFINITY;
            float reference;
            raise_max<true>(row_max[e], step_max, reference);
            float prob[2][2];
#pragma unroll
            for (int n = 0; n < 2; ++n)
                for (int c = 0; c < 2; ++c) prob[n][c] = exp2_approx(score[n][c] - reference);
            float sum = prob[0][0] + prob[0][1] + prob[1][0] + prob[1][1];
#pragma unroll
            for (int offset = 1; offset < 4; offset *= 2) sum += __shfl_xor(sum, offset);
            row_sum[e] = sum;
            inv[e] = sum > 0.f ? __fdividef(1.f, sum) : 0.f;  // zeros for a row that saw no key
            pa[e] = pack2<Numeric>(prob[0][0], prob[0][1]);
            pa[2 + e] = pack2<Numeric>(prob[1][0], prob[1][1]);
        }
        if (t == 0) {
#pragma unroll
            for (int e = 0; e < 2; ++e)
                if (mine[e].valid) store_lse<false>(p, heads[e].batch, mine[e].head, mine[e].position, row_max[e], row_sum[e]);
        }

        // O = P V: acc[n] holds rows g (0, 1) and g + 8 (2, 3), head dims 8n + 2t (+1); times
        // 1 / sum into tiles.o by stmatrix, then two lanes a row store it.
        const int r = lane / 2;
        WorkItem of_head;
        const QueryRow row = tile_row(r, of_head);
        uint4* const out = reinterpret_cast<uint4*>(row_start(static_cast<uint16_t*>(p.o), p.o_strides, nullptr, of_head.batch, row.head, row.position));
#pragma unroll
        for (int part = 0; part < kOutputParts<T>; ++part) {
            float acc[kPartChunks][4] = {};
#pragma unroll
            for (int c = 0; c < kPartChunks / 2; ++c) {
                if constexpr (kLateValues) {
                    uint32_t b[4];
                    load_matrices_x4<true>(b, &tiles.v[staged_chunk<T>(m_row, part * kPartChunks + 2 * c + m_chunk)]);
                    mma_16x16x16<kDType>(acc[2 * c], acc[2 * c + 1], pa, b);
                } else {
                    mma_16x16x16<kDType>(acc[2 * c], acc[2 * c + 1], pa, vb[c]);
                }
            }
            if (part > 0) sync_warp();  // the previous part's rows are out of tiles.o
#pragma unroll
            for (int c = 0; c < kPartChunks / 2; ++c) {
                const uint32_t words[4] = {
                    pack2<Numeric>(acc[2 * c][0] * inv[0], acc[2 * c][1] * inv[0]), pack2<Numeric>(acc[2 * c][2] * inv[1], acc[2 * c][3] * inv[1]),
                    pack2<Numeric>(acc[2 * c + 1][0] * inv[0], acc[2 * c + 1][1] * inv[0]),
                    pack2<Numeric>(acc[2 * c + 1][2] * inv[1], acc[2 * c + 1][3] * inv[1])};
                store_matrices_x4<kDType>(words, &tiles.o[staged_chunk<T, kPartChunks>(m_row, 2 * c + m_chunk)]);
            }
            sync_warp();  // tiles.o written (and, the last part, every V read done)
            if (row.valid) {
#pragma unroll
                for (int c = lane % 2; c < kPartChunks; c += 2) out[part * kPartChunks + c] = tiles.o[staged_chunk<T, kPartChunks>(r, c)];
            }
        }
        if constexpr (kLateValues) copy_key_rows<T>(p, next, p.v, p.v_strides, tiles.v, lane);
    }
    copy_async_wait_all();  // the copies past the last item land before the block ends
}

}  // namespace decode
}  // namespace fmha
