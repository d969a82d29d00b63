// The backward main loop on CDNA's MFMA (32x32x8, wave64: gfx908, gfx90a, gfx942), in the
// order of mma_sync_kernel.h. A block owns kKeys keys of one KV head, each wave 32 of them. For
// each query head of the KV head's group and each step of 32 query rows that see some of its
// keys, a wave computes S = Q K^T and dP = dO V^T for its keys (A: Q's and dO's rows, B: K's and
// V's rows, 8-byte LDS reads). In D's layout a lane holds one key's column of 16 query rows,
// which is exactly the B operand of k steps over those rows (kernels/mma/mfma.h), so P_d and dS
// feed dV^T += dO^T P_d and dK^T += Q^T dS where they are (A: four 2-byte reads down a column of
// dO or Q), with dV^T and dK^T in registers across the loop. dS goes through LDS for the
// block's dQ = dS K, added into the fp32 workspace (scalar atomics: a lane holds one column).
// Dropout, the scoring options, the deterministic loop and the workspace are mma_sync_kernel.h's.
// Head dims 64 and 128: at 256, dK^T and dV^T alone fill a lane's 256 AGPRs.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/bwd_params.h"
#include "kernels/common/dropout.h"
#include "kernels/common/mask.h"
#include "kernels/common/memory.h"
#include "kernels/common/sequence.h"
#include "kernels/config.h"
#include "kernels/mma/mfma.h"
#include "kernels/mmabwd/block_steps.h"
#include "kernels/mmabwd/dq_turns.h"
#include "kernels/mmabwd/step_scoring.h"
#include "kernels/mmabwd/workspace.h"
#include "kernels/numeric.h"

namespace fmha {
namespace mmabwd {

// Tile sizes and the LDS layout (64 KiB a workgroup).
template <class Config>
struct MfmaTiles {
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kWaves = 2;
    static constexpr int kThreads = kWaves * mfma::kWaveLanes;
    static constexpr int kKeys = kWaves * mfma::kBlock;       // a wave's 32 keys each
    static constexpr int kQueries = mfma::kBlock;             // query rows a step
    static constexpr int kDimBlocks = kHeadDim / mfma::kBlock;  // 32-row blocks of dK^T, dV^T and dQ
    static_assert(kHeadDim == 64 || kHeadDim == 128, "generator/catalogue.py: mmabwd's head dims on MFMA");

    // 16-bit rows padded: K, V, Q and dO by 16 bytes (load_rows' 16-byte stores), dS by 8 (its
    // 8-byte reads), so that the rows a half-wave reads do not all start in one bank.
    static constexpr int kRow = kHeadDim + 8;
    static constexpr int kDsRow = kKeys + 4;  // one per query
    static constexpr int kTileBytes = kQueries * kRow * 2;
    static constexpr int bytes(int stages) {
        return 2 * kKeys * kRow * 2 + stages * (2 * kTileBytes + 2 * kQueries * 4) + kQueries * kDsRow * 2;
    }
    // Two stages of a step's Q, dO, LSE and D where they fit (the next step's loads issued before
    // this one computes), else one.
    static constexpr int kStages = bytes(2) <= 64 * 1024 ? 2 : 1;
    static constexpr int kKOffset = 0;
    static constexpr int kVOffset = kKOffset + kKeys * kRow * 2;
    static constexpr int kQOffset = kVOffset + kKeys * kRow * 2;      // [kStages][kQueries][kRow]
    static constexpr int kDoOffset = kQOffset + kStages * kTileBytes;  // likewise
    static constexpr int kDsOffset = kDoOffset + kStages * kTileBytes;
    static constexpr int kLseOffset = kDsOffset + kQueries * kDsRow * 2;  // [kStages][kQueries] fp32
    static constexpr int kDOffset = kLseOffset + kStages * kQueries * 4;
    static constexpr int kSharedBytes = kDOffset + kStages * kQueries * 4;
    static_assert(kSharedBytes == bytes(kStages) && kSharedBytes <= 64 * 1024, "CDNA's LDS per workgroup");
};

// An operand of one k step read down a column of row-major 16-bit rows (four 2-byte reads):
// A[i][k] (or B[k][i]) = rows[k][i], i = lane % 32 and k = 4 (lane / 32) + item.
__device__ inline mfma::Operand column_operand(const uint16_t* rows, int row_stride, int lane) {
    const uint16_t* const column = rows + 4 * (lane / 32) * row_stride + lane % 32;
    return mfma::Operand{uint32_t(column[0]) | uint32_t(column[row_stride]) << 16,
                         uint32_t(column[2 * row_stride]) | uint32_t(column[3 * row_stride]) << 16};
}

// kDeterministic, kOptions: as mma_sync_kernel's.
template <class Config, bool kDeterministic, bool kOptions>
__global__ void __launch_bounds__(MfmaTiles<Config>::kThreads) mfma_kernel(const BwdParams p) {
    using T = MfmaTiles<Config>;
    using Numeric = DTypeTraits<Config::dtype>;
    constexpr DType kDType = Config::dtype;
    constexpr Arch kArch = Config::arch;
    constexpr bool kMasked = Config::mask == Mask::causal;
    constexpr int kAcc = mfma::kAccumulators;

    extern __shared__ __align__(16) uint8_t shared[];
    const uint16_t* const s_k = reinterpret_cast<const uint16_t*>(shared + T::kKOffset);
    const uint16_t* const s_v = reinterpret_cast<const uint16_t*>(shared + T::kVOffset);
    uint16_t* const s_ds = reinterpret_cast<uint16_t*>(shared + T::kDsOffset);
    const int lane = threadIdx.x % mfma::kWaveLanes, wave = threadIdx.x / mfma::kWaveLanes;
    const int column = lane % 32, half = lane / 32;  // D's column; its rows 8 (r / 4) + 4 half + r % 4
    const KeyTile tile = KeyTile::of(blockIdx.x, p, T::kKeys);
    const int key0 = tile.index * T::kKeys, head_kv = tile.head_kv, batch = tile.batch;
    const int key = key0 + mfma::kBlock * wave + column;  // this lane's key in S, dP, dK^T and dV^T
    const BlockSequence seq = BlockSequence::of(p, batch);
    const int len_q = seq.len_q, len_kv = seq.len_kv;
    const KeyMask<kMasked> mask = KeyMask<kMasked>::of(len_q, len_kv, p.window);
    const float scale_log2 = p.scale * kLog2e;
    const bool dropping = p.dropout.p != 0.f;
    const Dropout dropout = dropping ? Dropout::of(p.dropout) : Dropout{};
    const float keep_scale = dropping ? dropout.keep_scale : 1.f;

    mfma::Accumulator dk[T::kDimBlocks], dv[T::kDimBlocks];  // dK^T, dV^T: 32 head-dim rows x the wave's keys each
#pragma unroll
    for (int c = 0; c < T::kDimBlocks; ++c) dk[c] = dv[c] = mfma::Accumulator{};
    const Workspace ws = Workspace::of(p);
    const auto steps_of = BlockSteps<T::kQueries, kDeterministic>::of(p, mask, key0, T::kKeys, head_kv, batch, len_q);
    const int steps = steps_of.steps;
    const StepCopies<T> copies{p, seq, shared};
    if (steps > 0) {
        copies.keys(head_kv, key0);
        if (T::kStages == 2) copies.step(steps_of.at(0, p), 0);
    }
    for (int step = 0; step < steps; ++step) {
        const int stage = step % T::kStages;
        const auto st = steps_of.at(step, p);
        const int q0 = st.q0;
        if (T::kStages == 1) {
            if (step > 0) __syncthreads();  // the previous step is done with the stage and dS
            copies.step(st, 0);
        }
        copy_async_wait_all();
        __syncthreads();  // this step's stage has landed; the previous step is done with the other
        if (T::kStages == 2 && step + 1 < steps) copies.step(steps_of.next(st, p), stage ^ 1);
        const uint16_t* const s_q = reinterpret_cast<const uint16_t*>(shared + T::kQOffset) + stage * T::kQueries * T::kRow;
        const uint16_t* const s_do = reinterpret_cast<const uint16_t*>(shared + T::kDoOffset) + stage * T::kQueries * T::kRow;
        const float* const s_lse = reinterpret_cast<const float*>(shared + T::kLseOffset) + stage * T::kQueries;
        const float* const s_d = reinterpret_cast<const float*>(shared + T::kDOffset) + stage * T::kQueries;

        // S = Q K^T and dP = dO V^T: the step's 32 query rows x the wave's 32 keys.
        mfma::Accumulator s{}, dp{};
        {
            const int a_row = column * T::kRow + 4 * half, b_row = (mfma::kBlock * wave + column) * T::kRow + 4 * half;
#pragma unroll
            for (int kk = 0; kk < T::kHeadDim; kk += mfma::kK) {
                mfma::mma_32x32x8<kDType, kArch>(s, *reinterpret_cast<const mfma::Operand*>(s_q + a_row + kk),
                                                 *reinterpret_cast<const mfma::Operand*>(s_k + b_row + kk));
                mfma::mma_32x32x8<kDType, kArch>(dp, *reinterpret_cast<const mfma::Operand*>(s_do + a_row + kk),
                                                 *reinterpret_cast<const mfma::Operand*>(s_v + b_row + kk));
            }
        }

        // P_d and dS in place of S and dP (register r: query row 8 (r / 4) + 4 half + r % 4 of
        // the lane's key); with softcapping, dS times 1 - tanh^2 (StepScoring).
        StepScoring scoring{};
        if constexpr (kOptions)
            scoring = StepScoring::of(p.scale, p.softcap, sequence_slopes(p.alibi_slopes, p.alibi_batch_stride, batch), st.head,
                                      mask.diagonal(q0 + 4 * half) - key);
        float pd[kAcc], ds[kAcc];
#pragma unroll
        for (int r = 0; r < kAcc; ++r) {
            const int row = mfma::d_element(lane, r).row;
            const bool seen = key < len_kv && (!kMasked || mask.sees(q0 + row, key));
            float score_grad = 1.f, prob = 0.f;
            if (seen && kOptions) {
                const float score = scoring.capped() ? scoring.capped_score(scoring.tanh(s[r]), &score_grad) : scoring.score(s[r]);
                prob = scoring.probability(score, s_lse[row], row - 4 * half);
            } else if (seen) {
                prob = exp2_approx(s[r] * scale_log2 - s_lse[row]);
            }
            const float keep = !dropping || dropout.keeps(dropout.row(int64_t(batch) * p.heads_q + st.head, q0 + row), key)
                                   ? keep_scale : 0.f;  // Z / (1 - p)
            pd[r] = prob * keep;
            ds[r] = prob * (dp[r] * keep - s_d[row]) * score_grad;
        }

        // dV^T += dO^T P_d and dK^T += Q^T dS: D's registers 4j .. 4j + 3 are the B operand of
        // the k step over query rows 8j .. 8j + 7; dS to LDS, [query][key], for the block's dQ.
#pragma unroll
        for (int j = 0; j < mfma::kBlock / mfma::kK; ++j) {
            const mfma::Operand b_p{pack2<Numeric>(pd[4 * j], pd[4 * j + 1]), pack2<Numeric>(pd[4 * j + 2], pd[4 * j + 3])};
            const mfma::Operand b_ds{pack2<Numeric>(ds[4 * j], ds[4 * j + 1]), pack2<Numeric>(ds[4 * j + 2], ds[4 * j + 3])};
#pragma unroll
            for (int c = 0; c < T::kDimBlocks; ++c) {
                const int rows = mfma::kK * j * T::kRow + mfma::kBlock * c;
                mfma::mma_32x32x8<kDType, kArch>(dv[c], column_operand(s_do + rows, T::kRow, lane), b_p);
                mfma::mma_32x32x8<kDType, kArch>(dk[c], column_operand(s_q + rows, T::kRow, lane), b_ds);
            }
#pragma unroll
            for (int x = 0; x < 4; ++x) {
                const uint32_t word = b_ds[x / 2];
                s_ds[(mfma::kK * j + 4 * half + x) * T::kDsRow + mfma::kBlock * wave + column] = uint16_t(x % 2 ? word >> 16 : word);
            }
        }
        __syncthreads();

        // dQ += dS K over the block's keys, wave w taking head-dim blocks w, w + kWaves, ...:
        // A = dS's rows (8-byte reads), B = K's columns (2-byte reads down them).
        const auto turn = [&] { return DqTurn::of(p, mask, key0 / T::kKeys, T::kKeys, st.rows, q0, 0); };
        if constexpr (kDeterministic) {
            if (threadIdx.x == 0) turn().wait();
            __syncthreads();
        }
        static_assert(T::kDimBlocks % T::kWaves == 0, "every wave the same blocks of dQ");
#pragma unroll
        for (int i = 0; i < T::kDimBlocks / T::kWaves; ++i) {
            const int c = wave + i * T::kWaves;
            mfma::Accumulator dq{};
#pragma unroll
            for (int kk = 0; kk < T::kKeys; kk += mfma::kK) {
                const mfma::Operand a = *reinterpret_cast<const mfma::Operand*>(s_ds + column * T::kDsRow + kk + 4 * half);
                mfma::mma_32x32x8<kDType, kArch>(dq, a, column_operand(s_k + kk * T::kRow + mfma::kBlock * c, T::kRow, lane));
            }
#pragma unroll
            for (int r = 0; r < kAcc; ++r) {
                const int row = q0 + mfma::d_element(lane, r).row;
                if (row < len_q) atomicAdd(ws.dq_accum + (st.rows + row) * T::kHeadDim + mfma::kBlock * c + column, dq[r]);
            }
        }
        if constexpr (kDeterministic) {
            __threadfence();  // each thread's adds done before the block passes the turn
            __syncthreads();
            if (threadIdx.x == 0) DqTurn::pass(turn().counter);
        }
    }

    // dK^T's and dV^T's column of the lane's key: 4 consecutive head-dim values a register group.
    if (key >= seq.written_kv) return;
    uint16_t* dk_row = static_cast<uint16_t*>(p.dk) + seq.kv_index * p.dk_strides.batch + head_kv * p.dk_strides.head +
                       int64_t(key) * p.dk_strides.row;
    uint16_t* dv_row = static_cast<uint16_t*>(p.dv) + seq.kv_index * p.dv_strides.batch + head_kv * p.dv_strides.head +
                       int64_t(key) * p.dv_strides.row;
#pragma unroll
    for (int c = 0; c < T::kDimBlocks; ++c)
#pragma unroll
        for (int g = 0; g < kAcc / 4; ++g) {
            const int col = mfma::kBlock * c + mfma::d_element(lane, 4 * g).row;
            if (col >= p.head_dim) continue;
            *reinterpret_cast<uint2*>(dk_row + col) =
                make_uint2(pack2<Numeric>(dk[c][4 * g] * p.scale, dk[c][4 * g + 1] * p.scale),
                           pack2<Numeric>(dk[c][4 * g + 2] * p.scale, dk[c][4 * g + 3] * p.scale));
            *reinterpret_cast<uint2*>(dv_row + col) = make_uint2(pack2<Numeric>(dv[c][4 * g], dv[c][4 * g + 1]),
                                                                 pack2<Numeric>(dv[c][4 * g + 2], dv[c][4 * g + 3]));
        }
}

}  // namespace mmabwd
}  // namespace fmha
