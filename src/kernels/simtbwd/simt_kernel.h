// The backward main loop on the CUDA cores (SIMT: any arch; the fallback where no matrix-core
// loop serves, and AMD's backward until its MFMA loop exists). The mmabwd family's order, steps
// and workspace (mmabwd/block_steps.h, mmabwd/workspace.h): a block owns kKeys keys of one KV
// head and walks the steps of kQueries query rows of its group's heads that see them. In a step
// thread (i, j) computes element (query i, key j) of S and dP from shared memory and turns them
// into P_d and dS there (dropout and the scoring options as mma_sync_kernel.h); then each thread
// adds to its columns of one key's dK and dV (registers across the loop, so a GQA group's heads
// sum there) and computes its columns of one query row's dQ, added into the fp32 workspace.
// Only barriers and atomics: no warp or wave width is assumed.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/bwd_params.h"
#include "kernels/common/dropout.h"
#include "kernels/common/mask.h"
#include "kernels/common/scoring.h"
#include "kernels/common/sequence.h"
#include "kernels/config.h"
#include "kernels/mmabwd/block_steps.h"
#include "kernels/mmabwd/step_scoring.h"
#include "kernels/mmabwd/workspace.h"
#include "kernels/numeric.h"

namespace fmha {
namespace simtbwd {

using mmabwd::BlockSequence;
using mmabwd::BlockSteps;
using mmabwd::KeyTile;
using mmabwd::StepScoring;
using mmabwd::Workspace;

template <class Config>
struct SimtTiles {
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kKeys = 16, kQueries = 16;
    static constexpr int kThreads = kKeys * kQueries;  // a step's elements, one a thread
    // A thread's columns of one key's dK and dV, or of one query row's dQ: pairs 2 l + 32 m
    // for its lane l of 16 in the row.
    static constexpr int kPairs = kHeadDim / 32;
    // 16-bit rows padded by 4 bytes: the 16 keys a step's threads read one 4-byte column of at
    // once fall in distinct banks.
    static constexpr int kRow = kHeadDim + 2;
    static constexpr int kScoreRow = kKeys + 1;  // P_d and dS rows, fp32
    static constexpr int kKOffset = 0;
    static constexpr int kVOffset = kKOffset + kKeys * kRow * 2;
    static constexpr int kQOffset = kVOffset + kKeys * kRow * 2;
    static constexpr int kDoOffset = kQOffset + kQueries * kRow * 2;
    static constexpr int kPOffset = kDoOffset + kQueries * kRow * 2;  // P_d [kQueries][kScoreRow]
    static constexpr int kDsOffset = kPOffset + kQueries * kScoreRow * 4;
    static constexpr int kLseOffset = kDsOffset + kQueries * kScoreRow * 4;
    static constexpr int kDOffset = kLseOffset + kQueries * 4;
    static constexpr int kSharedBytes = kDOffset + kQueries * 4;
    static_assert(kHeadDim % 32 == 0 && kRow % 2 == 0, "generator/catalogue.py: simtbwd's head dims");
};

// Rows [row0, row0 + kRows) of a [rows, kHeadDim] tensor into shared memory rows of kRow
// elements, zeros at or past row `valid` and column `columns` (the problem's head_dim).
template <class T, int kRows>
__device__ inline void load_tile(uint16_t* tile, const uint16_t* base, int64_t row_stride, int row0, int valid, int columns) {
    for (int i = threadIdx.x; i < kRows * T::kHeadDim / 2; i += T::kThreads) {
        const int row = i / (T::kHeadDim / 2), column = i % (T::kHeadDim / 2) * 2;
        const bool inside = row0 + row < valid && column < columns;
        *reinterpret_cast<uint32_t*>(tile + row * T::kRow + column) =
            inside ? *reinterpret_cast<const uint32_t*>(base + (row0 + row) * row_stride + column) : 0u;
    }
}

// Two 16-bit elements of a shared-memory row as floats.
template <class Numeric>
__device__ inline float2 pair_of(const uint16_t* row, int column) {
    return Numeric::unpack2(*reinterpret_cast<const uint32_t*>(row + column));
}

// kOptions: softcapping and ALiBi (mmabwd/step_scoring.h), its own instance as in mmabwd.
template <class Config, bool kOptions>
__global__ void __launch_bounds__(SimtTiles<Config>::kThreads) simt_kernel(const BwdParams p) {
    using T = SimtTiles<Config>;
    using Numeric = DTypeTraits<Config::dtype>;
    constexpr bool kMasked = Config::mask == Mask::causal;

    extern __shared__ __align__(16) uint8_t shared[];
    uint16_t* const s_k = reinterpret_cast<uint16_t*>(shared + T::kKOffset);
    uint16_t* const s_v = reinterpret_cast<uint16_t*>(shared + T::kVOffset);
    uint16_t* const s_q = reinterpret_cast<uint16_t*>(shared + T::kQOffset);
    uint16_t* const s_do = reinterpret_cast<uint16_t*>(shared + T::kDoOffset);
    float* const s_p = reinterpret_cast<float*>(shared + T::kPOffset);
    float* const s_ds = reinterpret_cast<float*>(shared + T::kDsOffset);
    float* const s_lse = reinterpret_cast<float*>(shared + T::kLseOffset);
    float* const s_d = reinterpret_cast<float*>(shared + T::kDOffset);

    const KeyTile tile = KeyTile::of(blockIdx.x, p, T::kKeys);
    const int key0 = tile.index * T::kKeys, head_kv = tile.head_kv, batch = tile.batch;
    const BlockSequence seq = BlockSequence::of(p, batch);
    const int len_q = seq.len_q, len_kv = seq.len_kv;
    const KeyMask<kMasked> mask = KeyMask<kMasked>::of(len_q, len_kv, p.window);
    const float scale_log2 = p.scale * kLog2e;
    const bool dropping = p.dropout.p != 0.f;
    const Dropout dropout = dropping ? Dropout::of(p.dropout) : Dropout{};
    const float keep_scale = dropping ? dropout.keep_scale : 1.f;
    const float* const slopes = kOptions ? sequence_slopes(p.alibi_slopes, p.alibi_batch_stride, batch) : nullptr;
    const Workspace ws = Workspace::of(p);
    const auto walk = BlockSteps<T::kQueries>::of(p, mask, key0, T::kKeys, head_kv, batch, len_q);

    // A step's element of this thread (S, dP), and its row of 16 lanes (dK, dV: a key; dQ: a query).
    const int ei = threadIdx.x / T::kKeys, ej = threadIdx.x % T::kKeys;
    const int row16 = threadIdx.x / 16, lane16 = threadIdx.x % 16;
    float dk[T::kPairs][2] = {}, dv[T::kPairs][2] = {};

    if (walk.steps > 0) {
        load_tile<T, T::kKeys>(s_k, static_cast<const uint16_t*>(p.k) + seq.kv_index * p.k_strides.batch + head_kv * p.k_strides.head,
                               p.k_strides.row, key0, len_kv, p.head_dim);
        load_tile<T, T::kKeys>(s_v, static_cast<const uint16_t*>(p.v) + seq.kv_index * p.v_strides.batch + head_kv * p.v_strides.head,
                               p.v_strides.row, key0, len_kv, p.head_dim);
    }
    for (int step = 0; step < walk.steps; ++step) {
        const auto st = walk.at(step, p);
        __syncthreads();  // the previous step is done with Q, dO, P_d and dS
        load_tile<T, T::kQueries>(s_q, static_cast<const uint16_t*>(p.q) + seq.q_index * p.q_strides.batch + st.head * p.q_strides.head,
                                  p.q_strides.row, st.q0, len_q, p.head_dim);
        load_tile<T, T::kQueries>(s_do, static_cast<const uint16_t*>(p.d_o) + seq.q_index * p.d_o_strides.batch +
                                            st.head * p.d_o_strides.head,
                                  p.d_o_strides.row, st.q0, len_q, p.head_dim);
        if (threadIdx.x < T::kQueries) {  // rows past the sequence: none of their elements is seen
            const bool inside = st.q0 + threadIdx.x < len_q;
            s_lse[threadIdx.x] = inside ? ws.lse_log2[st.rows + st.q0 + threadIdx.x] : 0.f;
            s_d[threadIdx.x] = inside ? ws.d[st.rows + st.q0 + threadIdx.x] : 0.f;
        }
        __syncthreads();

        {  // Element (ei, ej): S and dP, then P_d and dS.
            const uint16_t *q = s_q + ei * T::kRow, *d_o = s_do + ei * T::kRow, *k = s_k + ej * T::kRow, *v = s_v + ej * T::kRow;
            float s = 0.f, dp = 0.f;
            for (int c = 0; c < T::kHeadDim; c += 2) {
                const float2 qc = pair_of<Numeric>(q, c), kc = pair_of<Numeric>(k, c);
                const float2 oc = pair_of<Numeric>(d_o, c), vc = pair_of<Numeric>(v, c);
                s += qc.x * kc.x + qc.y * kc.y;
                dp += oc.x * vc.x + oc.y * vc.y;
            }
            const int row = st.q0 + ei, key = key0 + ej;
            const bool seen = row < len_q && key < len_kv && (!kMasked || mask.sees(row, key));
            float prob = 0.f, score_grad = 1.f;
            if (seen && kOptions) {
                const StepScoring scoring = StepScoring::of(p.scale, p.softcap, slopes, st.head, mask.diagonal(row) - key);
                const float score = scoring.capped() ? scoring.capped_score(scoring.tanh(s), &score_grad) : scoring.score(s);
                prob = scoring.probability(score, s_lse[ei], 0);
            } else if (seen) {
                prob = exp2_approx(s * scale_log2 - s_lse[ei]);
            }
            const float keep = !dropping || dropout.keeps(dropout.row(int64_t(batch) * p.heads_q + st.head, row), key) ? keep_scale : 0.f;
            s_p[ei * T::kScoreRow + ej] = prob * keep;  // P_d = P Z / (1 - p)
            s_ds[ei * T::kScoreRow + ej] = prob * (dp * keep - s_d[ei]) * score_grad;
        }
        __syncthreads();

        // dV += P_d^T dO and dK += dS^T Q for key row16; dQ += dS K for query row16.
        float dq[T::kPairs][2] = {};
        for (int i = 0; i < T::kQueries; ++i) {
            const float pd = s_p[i * T::kScoreRow + row16], ds = s_ds[i * T::kScoreRow + row16];
#pragma unroll
            for (int m = 0; m < T::kPairs; ++m) {
                const int c = 2 * lane16 + 32 * m;
                const float2 oc = pair_of<Numeric>(s_do + i * T::kRow, c), qc = pair_of<Numeric>(s_q + i * T::kRow, c);
                dv[m][0] += pd * oc.x, dv[m][1] += pd * oc.y;
                dk[m][0] += ds * qc.x, dk[m][1] += ds * qc.y;
            }
        }
        for (int j = 0; j < T::kKeys; ++j) {
            const float ds = s_ds[row16 * T::kScoreRow + j];
#pragma unroll
            for (int m = 0; m < T::kPairs; ++m) {
                const float2 kc = pair_of<Numeric>(s_k + j * T::kRow, 2 * lane16 + 32 * m);
                dq[m][0] += ds * kc.x, dq[m][1] += ds * kc.y;
            }
        }
        if (st.q0 + row16 < len_q) {
            float* const accum = ws.dq_accum + (st.rows + st.q0 + row16) * T::kHeadDim + 2 * lane16;
#pragma unroll
            for (int m = 0; m < T::kPairs; ++m) {
                atomicAdd(accum + 32 * m, dq[m][0]);
                atomicAdd(accum + 32 * m + 1, dq[m][1]);
            }
        }
    }

    // dK (times the scale) and dV of key row16 to its rows (a padded batch's past the length
    // get the zeros they hold; a packed batch's are the next sequence's: BlockSequence).
    const int key = key0 + row16;
    if (key >= seq.written_kv) return;
    uint16_t* const dk_row = static_cast<uint16_t*>(p.dk) + seq.kv_index * p.dk_strides.batch + head_kv * p.dk_strides.head +
                             key * p.dk_strides.row;
    uint16_t* const dv_row = static_cast<uint16_t*>(p.dv) + seq.kv_index * p.dv_strides.batch + head_kv * p.dv_strides.head +
                             key * p.dv_strides.row;
#pragma unroll
    for (int m = 0; m < T::kPairs; ++m) {
        const int c = 2 * lane16 + 32 * m;
        if (c >= p.head_dim) continue;
        *reinterpret_cast<uint32_t*>(dk_row + c) = pack2<Numeric>(dk[m][0] * p.scale, dk[m][1] * p.scale);
        *reinterpret_cast<uint32_t*>(dv_row + c) = pack2<Numeric>(dv[m][0], dv[m][1]);
    }
}

}  // namespace simtbwd
}  // namespace fmha
