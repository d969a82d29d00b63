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
#include "kernels/mmabwd/tiles.h"
#include "kernels/mmabwd/workspace.h"
#include "kernels/numeric.h"

namespace fmha {
namespace mmabwd {

// Starts copying rows [row0, row0 + kRows) of a [rows, head_dim] tensor into shared memory
// (stride kRow), 16 bytes a lane; rows at or past `valid` become zeros (common/memory.h).
template <class T, int kRows>
__device__ inline void load_rows(uint16_t* shared, const uint16_t* base, int64_t row_stride, int row0, int valid) {
    constexpr int kVectors = T::kHeadDim / 8;
    for (int i = threadIdx.x; i < kRows * kVectors; i += T::kThreads) {
        const int row = i / kVectors, column = (i % kVectors) * 8;
        const bool inside = row0 + row < valid;
        copy_async_16(shared + row * T::kRow + column, base + (inside ? (row0 + row) * row_stride + column : 0), inside);
    }
}

// A warp's 16 rows of an accumulator [16, head_dim] in mma C layout, times `scale`, to rows
// row0.. of a tensor; rows at or past `rows` are not written.
template <class Numeric, int kTiles>
__device__ inline void store_rows(uint16_t* base, int64_t row_stride, const float (&acc)[kTiles][4], float scale,
                                  int row0, int rows, int lane) {
    const int g = lane / 4, t = lane % 4;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = row0 + g + 8 * half;
        if (row >= rows) continue;
#pragma unroll
        for (int n = 0; n < kTiles; ++n)
            *reinterpret_cast<uint32_t*>(base + row * row_stride + n * 8 + 2 * t) =
                pack2<Numeric>(acc[n][2 * half] * scale, acc[n][2 * half + 1] * scale);
    }
}

template <class Config>
__global__ void __launch_bounds__(Tiles<Config>::kThreads) mma_sync_kernel(const BwdParams p) {
    using T = Tiles<Config>;
    using Numeric = DTypeTraits<Config::dtype>;
    constexpr DType kDType = Config::dtype;
    constexpr bool kMasked = Config::mask == Mask::causal;
    constexpr int kDimTiles = T::kHeadDim / 8;     // n tiles of a [16, head_dim] accumulator
    constexpr int kQueryTiles8 = T::kQueries / 8;  // n tiles of the transposed scores
    constexpr float kLog2e = 1.4426950408889634f;

    extern __shared__ __align__(16) uint8_t shared[];
    uint16_t* const s_k = reinterpret_cast<uint16_t*>(shared + T::kKOffset);
    uint16_t* const s_v = reinterpret_cast<uint16_t*>(shared + T::kVOffset);
    uint16_t* const s_ds = reinterpret_cast<uint16_t*>(shared + T::kDsOffset);
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
    const int key0 = blockIdx.x * T::kKeys, head_kv = blockIdx.y, batch = blockIdx.z;
    const int len_q = sequence_length(p.seqlens_q, nullptr, batch, p.seqlen_q);
    const int len_kv = sequence_length(p.seqlens_kv, nullptr, batch, p.seqlen_kv);
    const KeyMask<kMasked> mask = KeyMask<kMasked>::of(len_q, len_kv, p.window);
    const float scale_log2 = p.scale * kLog2e;
    const bool dropping = p.dropout.p != 0.f;
    const Dropout dropout = dropping ? Dropout::of(p.dropout) : Dropout{};

    // The query rows that see some key of the block (mask.h: row i sees key j iff
    // i + offset - left <= j <= i + offset + right), [q_lo, q_hi).
    int q_lo = 0, q_hi = key0 < len_kv ? len_q : 0;
    if constexpr (kMasked) {
        q_lo = max(0, key0 - mask.offset - p.window.right);
        q_hi = min(q_hi, key0 + T::kKeys - 1 - mask.offset + p.window.left + 1);
    }

    float dk[kDimTiles][4] = {}, dv[kDimTiles][4] = {};
    const int group = p.heads_q / p.heads_kv;
    const Workspace ws = Workspace::of(p);
    // The steps: each query head of the group, and in it each block of kQueries rows from q_first.
    const int q_first = q_lo / T::kQueries * T::kQueries;
    const int head_steps = q_hi > q_first ? (q_hi - q_first + T::kQueries - 1) / T::kQueries : 0;
    const int steps = group * head_steps;
    struct Step {
        int head, q0;
        int64_t rows;  // the head's first workspace (and LSE) row
    };
    const auto step_of = [&](int s) {
        const int head = head_kv * group + s / max(head_steps, 1);
        return Step{head, q_first + s % max(head_steps, 1) * T::kQueries, (int64_t(batch) * p.heads_q + head) * p.seqlen_q};
    };
    // Starts loading a step's Q and dO (asynchronous) and its LSE and D into stage `stage`.
    const auto load_step = [&](int s, int stage) {
        const Step st = step_of(s);
        load_rows<T, T::kQueries>(reinterpret_cast<uint16_t*>(shared + T::kQOffset) + stage * T::kQueries * T::kRow,
                                  static_cast<const uint16_t*>(p.q) + batch * p.q_strides.batch + st.head * p.q_strides.head,
                                  p.q_strides.row, st.q0, len_q);
        load_rows<T, T::kQueries>(reinterpret_cast<uint16_t*>(shared + T::kDoOffset) + stage * T::kQueries * T::kRow,
                                  static_cast<const uint16_t*>(p.d_o) + batch * p.d_o_strides.batch +
                                      st.head * p.d_o_strides.head,
                                  p.d_o_strides.row, st.q0, len_q);
        float* const lse = reinterpret_cast<float*>(shared + T::kLseOffset) + stage * T::kQueries;
        float* const d = reinterpret_cast<float*>(shared + T::kDOffset) + stage * T::kQueries;
        for (int i = threadIdx.x; i < T::kQueries; i += T::kThreads) {
            const bool valid = st.q0 + i < len_q;
            const float row_lse = valid ? p.lse[st.rows + st.q0 + i] : INFINITY;
            lse[i] = row_lse == -INFINITY ? INFINITY : row_lse * kLog2e;  // a row that sees no key: P = 0
            d[i] = valid ? ws.d[st.rows + st.q0 + i] : 0.f;
        }
    };
    if (steps > 0) {  // (no copies left in flight by a block without steps)
        const uint16_t* k = static_cast<const uint16_t*>(p.k) + batch * p.k_strides.batch + head_kv * p.k_strides.head;
        const uint16_t* v = static_cast<const uint16_t*>(p.v) + batch * p.v_strides.batch + head_kv * p.v_strides.head;
        load_rows<T, T::kKeys>(s_k, k, p.k_strides.row, key0, len_kv);
        load_rows<T, T::kKeys>(s_v, v, p.v_strides.row, key0, len_kv);
        load_step(0, 0);
    }
    for (int step = 0; step < steps; ++step) {
        const int stage = step % T::kStages;
        const Step st = step_of(step);
        const int q0 = st.q0;
        const int64_t rows = st.rows;
        copy_async_wait_all();
        __syncthreads();  // this step's stage has landed; the previous step is done with the other
        if (step + 1 < steps) load_step(step + 1, stage ^ 1);
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

        // Dropout's keep bits, bit 4n + c for element [n][c]: query row q0 + 8n + 2t + c % 2's
        // Philox call for the warp's 16-key block holds keys g and g + 8 (words 2 (c / 2) + g % 2).
        uint64_t kept = ~uint64_t(0);
        if (dropping) {
            static_assert(kQueryTiles8 * 4 <= 64, "dropout's keep bits: one 64-bit word per step");
            kept = 0;
            const int64_t stream = int64_t(batch) * p.heads_q + st.head;
#pragma unroll
            for (int n = 0; n < kQueryTiles8; ++n)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const PhiloxWords words = dropout.randoms(dropout.row(stream, q0 + 8 * n + 2 * t + e), key0 + 16 * warp + 2 * (g / 2));
#pragma unroll
                    for (int half = 0; half < 2; ++half)
                        kept |= uint64_t(dropout.keeps(words.w[2 * half + g % 2])) << (4 * n + 2 * half + e);
                }
        }
        const float keep_scale = dropping ? dropout.keep_scale : 1.f;

        // P_d^T and dS^T in place of S^T and dP^T (C layout: key g (+8), queries 2t, 2t + 1).
#pragma unroll
        for (int n = 0; n < kQueryTiles8; ++n) {
#pragma unroll
            for (int c = 0; c < 4; ++c) {
                const int key = key0 + 16 * warp + g + 8 * (c / 2), row = n * 8 + 2 * t + c % 2;
                const bool seen = key < len_kv && (!kMasked || mask.sees(q0 + row, key));
                const float prob = seen ? exp2f(s[n][c] * scale_log2 - s_lse[row]) : 0.f;
                const float keep = (kept >> (4 * n + c)) & 1u ? keep_scale : 0.f;  // Z / (1 - p)
                s[n][c] = prob * keep;
                dp[n][c] = prob * (dp[n][c] * keep - s_d[row]);
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
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = q0 + 16 * tile + g + 8 * half;
            if (row >= len_q) continue;
            float* accum = ws.dq_accum + (rows + row) * T::kHeadDim + column0 + 2 * t;
#pragma unroll
            for (int d = 0; d < T::kDqColumns / 8; ++d)
                atomicAdd(reinterpret_cast<float2*>(accum + 8 * d), make_float2(dq[d][2 * half], dq[d][2 * half + 1]));
        }
    }

    // Rows past the sequence's keys (inside seqlen_kv) get the zeros they hold.
    uint16_t* dk_out = static_cast<uint16_t*>(p.dk) + batch * p.dk_strides.batch + head_kv * p.dk_strides.head;
    uint16_t* dv_out = static_cast<uint16_t*>(p.dv) + batch * p.dv_strides.batch + head_kv * p.dv_strides.head;
    store_rows<Numeric>(dk_out, p.dk_strides.row, dk, p.scale, key0 + 16 * warp, p.seqlen_kv, lane);
    store_rows<Numeric>(dv_out, p.dv_strides.row, dv, 1.f, key0 + 16 * warp, p.seqlen_kv, lane);
}

}  // namespace mmabwd
}  // namespace fmha
