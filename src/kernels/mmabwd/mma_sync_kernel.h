// The backward main loop on mma.sync (FlashAttention-2's order). A block owns kKeys keys of one
// KV head; each warp 16 of them. For each query head of the KV head's group and each step of
// kQueries query rows that see some of its keys, every warp recomputes its transposed scores
// and probabilities from the forward's LSE, then
//   dV += P^T dO,  dP^T = V dO^T,  dS^T = P^T (dP^T - D),  dK += dS^T Q
// with dK and dV in registers across the whole loop (a GQA group's heads sum there, so dK and dV
// need no atomics), and the block's dQ += dS K is added into the fp32 workspace. The scale is
// applied to dK at its store and to dQ by the convert kernel. A step's Q, dO, LSE and D sit in
// one of two shared-memory stages: the next step's are copied while this one computes.
// Dropout regenerates the forward's mask Z (common/dropout.h) and follows FlashAttention-2's
// backward: with P_d = P Z / (1 - p) what multiplied V, dV += P_d^T dO and
// dS^T = P^T (Z dP^T / (1 - p) - D), D = rowsum(dO * O) as without it.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/bwd_params.h"
#include "kernels/common/dropout.h"
#include "kernels/common/mask.h"
#include "kernels/common/memory.h"
#include "kernels/common/sequence.h"
#include "kernels/config.h"
#include "kernels/mma/mma_sync.h"
#include "kernels/mmabwd/block_steps.h"
#include "kernels/mmabwd/dq_turns.h"
#include "kernels/mmabwd/step_scoring.h"
#include "kernels/mmabwd/tiles.h"
#include "kernels/mmabwd/workspace.h"
#include "kernels/numeric.h"

namespace fmha {
namespace mmabwd {

// A warp's 16 rows of an accumulator [16, head_dim] in mma C layout, times `scale`, to rows
// row0.. of a tensor; rows at or past `rows` and columns at or past `columns` are not written.
template <class Numeric, int kTiles>
__device__ inline void store_rows(uint16_t* base, int64_t row_stride, const float (&acc)[kTiles][4], float scale,
                                  int row0, int rows, int columns, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = row0 + g + 8 * half;
        if (row >= rows) continue;
#pragma unroll
        for (int n = 0; n < kTiles; ++n)
            if (8 * n < columns)
                *reinterpret_cast<uint32_t*>(base + row * row_stride + n * 8 + 2 * t) =
                    pack2<Numeric>(acc[n][2 * half] * scale, acc[n][2 * half + 1] * scale);
    }
}

// kDeterministic, kOptions: as wgmma_kernel's.
template <class Config, bool kDeterministic, bool kOptions>
__global__ void __launch_bounds__(Tiles<Config>::kThreads) mma_sync_kernel(const BwdParams p) {
    using T = Tiles<Config>;
    using Numeric = DTypeTraits<Config::dtype>;
    constexpr DType kDType = Config::dtype;
    constexpr bool kMasked = Config::mask == Mask::causal;
    constexpr int kDimTiles = T::kHeadDim / 8;     // n tiles of a [16, head_dim] accumulator
    constexpr int kQueryTiles8 = T::kQueries / 8;  // n tiles of the transposed scores

    extern __shared__ __align__(16) uint8_t shared[];
    uint16_t* const s_k = reinterpret_cast<uint16_t*>(shared + T::kKOffset);
    uint16_t* const s_v = reinterpret_cast<uint16_t*>(shared + T::kVOffset);
    uint16_t* const s_ds = reinterpret_cast<uint16_t*>(shared + T::kDsOffset);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const KeyTile tile = KeyTile::of(blockIdx.x, p, T::kKeys);
    const int key0 = tile.index * T::kKeys, head_kv = tile.head_kv, batch = tile.batch;
    const BlockSequence seq = BlockSequence::of(p, batch);
    const int len_q = seq.len_q, len_kv = seq.len_kv;
    const KeyMask<kMasked> mask = KeyMask<kMasked>::of(len_q, len_kv, p.window);
    const float scale_log2 = p.scale * kLog2e;
    const bool dropping = p.dropout.p != 0.f;
    const Dropout dropout = dropping ? Dropout::of(p.dropout) : Dropout{};

    float dk[kDimTiles][4] = {}, dv[kDimTiles][4] = {};
    const Workspace ws = Workspace::of(p);
    const auto steps_of = BlockSteps<T::kQueries, kDeterministic>::of(p, mask, key0, T::kKeys, head_kv, batch, len_q);
    const int steps = steps_of.steps;
    // Where row r, column c of a tile (of a stage) goes: rows of kRow elements.
    const StepCopies<T> copies{p, seq, shared};
    if (steps > 0) {  // (no copies left in flight by a block without steps)
        copies.keys(head_kv, key0);
        copies.step(steps_of.at(0, p), 0);
    }
    for (int step = 0; step < steps; ++step) {
        const int stage = step % T::kStages;
        const auto st = steps_of.at(step, p);
        const int q0 = st.q0;
        const int64_t rows = st.rows;
        copy_async_wait_all();
        __syncthreads();  // this step's stage has landed; the previous step is done with the other
        if (step + 1 < steps) copies.step(steps_of.next(st, p), stage ^ 1);
        const uint16_t* const s_q = reinterpret_cast<const uint16_t*>(shared + T::kQOffset) + stage * T::kQueries * T::kRow;
        const uint16_t* const s_do = reinterpret_cast<const uint16_t*>(shared + T::kDoOffset) + stage * T::kQueries * T::kRow;
        const float* const s_lse = reinterpret_cast<const float*>(shared + T::kLseOffset) + stage * T::kQueries;
        const float* const s_d = reinterpret_cast<const float*>(shared + T::kDOffset) + stage * T::kQueries;
        // S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys.
        float s[kQueryTiles8][4] = {}, dp[kQueryTiles8][4] = {};
#pragma unroll
        for (int kk = 0; kk < T::kHeadDim; kk += 16) {
            uint32_t a_k[4], a_v[4];
            load_a<false>(a_k, s_k, T::kRow, 16 * warp, kk, lane);
            load_a<false>(a_v, s_v, T::kRow, 16 * warp, kk, lane);
#pragma unroll
            for (int n = 0; n < kQueryTiles8; n += 2) {
                uint32_t b[4];
                load_b_pair<false>(b, s_q, T::kRow, 8 * n, kk, lane);
                mma_16x16x16<kDType>(s[n], s[n + 1], a_k, b);
                load_b_pair<false>(b, s_do, T::kRow, 8 * n, kk, lane);
                mma_16x16x16<kDType>(dp[n], dp[n + 1], a_v, b);
            }
        }

        const float keep_scale = dropping ? dropout.keep_scale : 1.f;
        StepScoring scoring{};
        if constexpr (kOptions)
            scoring = StepScoring::of(p.scale, p.softcap, sequence_slopes(p.alibi_slopes, p.alibi_batch_stride, batch), st.head,
                                      mask.diagonal(q0 + 2 * t) - (key0 + 16 * warp + g));

        // P_d^T and dS^T in place of S^T and dP^T (C layout: key g (+8), queries 2t, 2t + 1);
        // with softcapping, dS^T times 1 - tanh^2 (StepScoring).
#pragma unroll
        for (int n = 0; n < kQueryTiles8; ++n) {
            // Dropout's keep bits of the tile (block_steps.h), bit c for element c.
            const unsigned kept = dropping ? transposed_keep_bits(dropout, int64_t(batch) * p.heads_q + st.head,
                                                                  q0 + 8 * n, key0 + 16 * warp, lane)
                                           : 0xFu;
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int key = key0 + 16 * warp + g + 8 * (c / 2), row = n * 8 + 2 * t + c % 2;
                const bool seen = key < len_kv && (!kMasked || mask.sees(q0 + row, key));
                float score_grad = 1.f, prob = 0.f;
                if (seen && kOptions) {
                    const float score =
                        scoring.capped() ? scoring.capped_score(scoring.tanh(s[n][c]), &score_grad) : scoring.score(s[n][c]);
                    prob = scoring.probability(score, s_lse[row], 8 * n + c % 2 - 8 * (c / 2));
                } else if (seen) {
                    prob = exp2_approx(s[n][c] * scale_log2 - s_lse[row]);
                }
                const float keep = (kept >> c) & 1u ? keep_scale : 0.f;  // Z / (1 - p)
                s[n][c] = prob * keep;
                dp[n][c] = prob * (dp[n][c] * keep - s_d[row]) * score_grad;
            }
        }

        // dV += P^T dO and dK += dS^T Q: two adjacent C tiles of 8 queries are one A operand
        // of a k step of 16; B from the row-major dO and Q, transposed by ldmatrix.
#pragma unroll
        for (int n = 0; n < kQueryTiles8; n += 2) {
            const uint32_t a_p[4] = {pack2<Numeric>(s[n][0], s[n][1]), pack2<Numeric>(s[n][2], s[n][3]),
                                     pack2<Numeric>(s[n + 1][0], s[n + 1][1]), pack2<Numeric>(s[n + 1][2], s[n + 1][3])};
            const uint32_t a_ds[4] = {pack2<Numeric>(dp[n][0], dp[n][1]), pack2<Numeric>(dp[n][2], dp[n][3]),
                                      pack2<Numeric>(dp[n + 1][0], dp[n + 1][1]),
                                      pack2<Numeric>(dp[n + 1][2], dp[n + 1][3])};
#pragma unroll
            for (int d = 0; d < kDimTiles; d += 2) {
                uint32_t b[4];
                load_b_pair<true>(b, s_do, T::kRow, 8 * n, 8 * d, lane);
                mma_16x16x16<kDType>(dv[d], dv[d + 1], a_p, b);
                load_b_pair<true>(b, s_q, T::kRow, 8 * n, 8 * d, lane);
                mma_16x16x16<kDType>(dk[d], dk[d + 1], a_ds, b);
            }
            // dS^T to shared memory, [key][query], for the block's dQ.
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                uint16_t* row = s_ds + (16 * warp + g + 8 * half) * T::kDsRow + 2 * t;
                *reinterpret_cast<uint32_t*>(row + 8 * n) = a_ds[half];
                *reinterpret_cast<uint32_t*>(row + 8 * n + 8) = a_ds[2 + half];
            }
        }
        __syncthreads();

        // dQ += dS K over the block's keys: warp w takes query tile w % kQueryTiles and
        // kDqColumns columns; A = dS from dS^T, B = K, both transposed by ldmatrix.
        const int tile = warp % T::kQueryTiles, column0 = warp / T::kQueryTiles * T::kDqColumns;
        float dq[T::kDqColumns / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < T::kKeys; kk += 16) {
            uint32_t a[4];
            load_a<true>(a, s_ds, T::kDsRow, kk, 16 * tile, lane);
#pragma unroll
            for (int d = 0; d < T::kDqColumns / 8; d += 2) {
                uint32_t b[4];
                load_b_pair<true>(b, s_k, T::kRow, kk, column0 + 8 * d, lane);
                mma_16x16x16<kDType>(dq[d], dq[d + 1], a, b);
            }
        }
        const auto turn = [&] { return DqTurn::of(p, mask, key0 / T::kKeys, T::kKeys, rows, q0, 0); };
        if constexpr (kDeterministic) {
            if (threadIdx.x == 0) turn().wait();
            __syncthreads();
        }
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = q0 + 16 * tile + g + 8 * half;
            if (row >= len_q) continue;
            float* accum = ws.dq_accum + (rows + row) * T::kHeadDim + column0 + 2 * t;
#pragma unroll
            for (int d = 0; d < T::kDqColumns / 8; ++d)
                atomicAdd(reinterpret_cast<float2*>(accum + 8 * d), make_float2(dq[d][2 * half], dq[d][2 * half + 1]));
        }
        if constexpr (kDeterministic) {
            __threadfence();  // each thread's adds done before the block passes the turn
            __syncthreads();
            if (threadIdx.x == 0) DqTurn::pass(turn().counter);
        }
    }

    uint16_t* dk_out = static_cast<uint16_t*>(p.dk) + seq.kv_index * p.dk_strides.batch + head_kv * p.dk_strides.head;
    uint16_t* dv_out = static_cast<uint16_t*>(p.dv) + seq.kv_index * p.dv_strides.batch + head_kv * p.dv_strides.head;
    store_rows<Numeric>(dk_out, p.dk_strides.row, dk, p.scale, key0 + 16 * warp, seq.written_kv, p.head_dim, lane);
    store_rows<Numeric>(dv_out, p.dv_strides.row, dv, 1.f, key0 + 16 * warp, seq.written_kv, p.head_dim, lane);
}

}  // namespace mmabwd
}  // namespace fmha
