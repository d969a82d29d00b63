// The backward main loop on Hopper's wgmma: mma_sync_kernel.h's order and block (a key tile of
// one KV head, walking the query tiles of the group's heads that see it, dK and dV in
// registers, dQ added into the fp32 workspace), with two warpgroups of 64 keys each. A step:
//   S^T = K Q^T, dP^T = V dO^T          wgmma from shared memory (the warpgroup's 64 keys)
//   P^T, dS^T = P^T (dP^T - D)          on the accumulators (dropout as mma_sync_kernel.h)
//   dV += P^T dO                        wgmma with P^T as register A operand
//   dQ += dS K                          dS^T through shared memory read M-major; each
//                                       warpgroup takes half of dQ's columns over all 128 keys,
//                                       and adds them into the workspace by TMA (reduce-add)
//   dK += dS^T Q                        dS^T as register A operand, issued after dQ's product
//                                       so that dQ's staging for the add runs beside it
// Each step's Q, dO, LSE and D come by TMA into a ring of three stages, issued by one thread
// two steps ahead, and dS^T alternates between two buffers, so that the warpgroups meet at one
// barrier a step (dS^T written); K and V come once, by cp.async, and dK and dV leave through
// their places in shared memory (docs/decisions.md, "Backward on wgmma").
// Past head_dim 128 (kSplitColumns) both warpgroups take the same 64 keys: each computes S^T
// and dP^T for half of the step's queries, writes P^T and dS^T to shared memory, and after the
// barrier takes half of dV's, dK's and dQ's columns from there, with two stages, dQ staged in
// the step's own stage (docs/decisions.md, "d256: queries split, dQ by TMA").
#pragma once

#include <hip/hip_runtime.h>

#include <type_traits>

#include "fmha/bwd_params.h"
#include "kernels/common/dropout.h"
#include "kernels/common/mask.h"
#include "kernels/common/memory.h"
#include "kernels/common/online_softmax.h"
#include "kernels/common/sequence.h"
#include "kernels/config.h"
#include "kernels/mma/wgmma.h"
#include "kernels/mmabwd/block_steps.h"
#include "kernels/mmabwd/dq_turns.h"
#include "kernels/mmabwd/step_scoring.h"
#include "kernels/mmabwd/workspace.h"
#include "kernels/numeric.h"
#include "platform/hip_on_cuda/hopper.h"

namespace fmha {
namespace mmabwd {

// Tile sizes and shared memory: every operand in 128-byte swizzle atoms (mma/wgmma.h).
template <class Config>
struct WgmmaTiles {
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kWarpgroups = 2;
    static constexpr int kThreads = kWarpgroups * wgmma::kThreads;
    // Past head_dim 128, dK and dV of 64 keys would take 256 registers a thread: both warpgroups
    // then take the same 64 keys and split dK's and dV's columns; each computes S^T and dP^T for
    // half of a step's queries, and both read P^T and dS^T from shared memory.
    static constexpr bool kSplitColumns = kHeadDim > 128;
    static constexpr int kKeys = kSplitColumns ? wgmma::kRows : kWarpgroups * wgmma::kRows;
    static constexpr int kColumns = kSplitColumns ? kHeadDim / kWarpgroups : kHeadDim;  // of dK and dV a warpgroup holds
    // Query rows per step; a warpgroup's S^T = K Q^T covers kScoreQueries of them (its N), and
    // S^T and dP^T take kScoreQueries / 2 registers a thread each beside dK and dV.
    static constexpr int kQueries = 64;
    static constexpr int kScoreQueries = kSplitColumns ? kQueries / kWarpgroups : kQueries;
    static constexpr int kStages = kSplitColumns ? 2 : 3;
    static constexpr int kDsBuffers = 2;
    static constexpr int kDqColumns = kHeadDim / kWarpgroups;  // a warpgroup's share of dQ
    // ... computed in parts of at most 64 columns: with split columns, the first part's boxes
    // are staged while the second's product runs.
    static constexpr int kDqPartColumns = kDqColumns < 64 ? kDqColumns : 64;
    static constexpr int kDqParts = kDqColumns / kDqPartColumns;

    static constexpr int kAlignment = 1024;  // of swizzle atoms
    static constexpr int kKVBytes = wgmma::tile_bytes(kKeys, kHeadDim);
    static constexpr int kRowsBytes = wgmma::tile_bytes(kQueries, kHeadDim);  // a stage's Q or dO
    static constexpr int kKOffset = 0;
    static constexpr int kVOffset = kKOffset + kKVBytes;
    static constexpr int kQOffset = kVOffset + kKVBytes;                // [kStages]
    static constexpr int kDoOffset = kQOffset + kStages * kRowsBytes;   // [kStages]
    static constexpr int kDsBytes = wgmma::tile_bytes(kKeys, kQueries);
    static constexpr int kDsOffset = kDoOffset + kStages * kRowsBytes;  // dS^T [kDsBuffers][kKeys][kQueries]
    static constexpr int kPOffset = kDsOffset + kDsBuffers * kDsBytes;  // with split columns, P^T likewise
    // dQ's staging for its TMA add, [kQueries][kHeadDim] fp32 in boxes of 32 columns. With split
    // columns it does not fit beside the stages: it takes the step's own stage instead, each
    // warpgroup the atoms of Q and dO that only its dK and dV products read, once those are done.
    static constexpr bool kDqInStage = kSplitColumns;
    static constexpr int kDqOffset = kPOffset + (kSplitColumns ? kDsBuffers * kDsBytes : 0);
    static constexpr int kDqBoxColumns = 32;  // of 128-byte swizzled rows
    static constexpr int kDqBoxBytes = kQueries * kDqBoxColumns * 4;
    static constexpr int kStatsBytes = kQueries * 4;  // a stage's LSE or D, fp32
    static constexpr int kLseOffset = kDqOffset + (kDqInStage ? 0 : kQueries * kHeadDim * 4);  // [kStages]
    static constexpr int kDOffset = kLseOffset + kStages * kStatsBytes;        // [kStages]
    static constexpr int kBarrierOffset = kDOffset + kStages * kStatsBytes;    // [kStages]: the stage landed
    static constexpr int kSharedBytes = kBarrierOffset + kStages * 8 + kAlignment;

    static_assert((kKOffset | kVOffset | kQOffset | kDoOffset | kDsOffset | kDqOffset) % kAlignment == 0,
                  "swizzled tiles start at 1024-byte boundaries (the swizzle follows address bits)");
    static_assert(kHeadDim % 64 == 0 && kHeadDim <= 256, "generator/catalogue.py: mmabwd's head dims");
    static_assert(kSharedBytes <= shared_bytes(Config::arch), "the arch's shared memory per block");

    // Where a warpgroup's dQ box `box` (of its kDqBoxes, kDqBoxColumns columns each) is staged
    // for a step at `stage`.
    static constexpr int kDqBoxes = kDqColumns / kDqBoxColumns;
    static constexpr int kOwnAtoms = kColumns / wgmma::kAtomColumns;  // of Q's and dO's, a warpgroup's
    static_assert(!kDqInStage || (kDqColumns == kColumns && kDqBoxBytes == kQueries * wgmma::kRowBytes && kDqBoxes == 2 * kOwnAtoms),
                  "a warpgroup's dQ boxes fill its atoms of Q and dO");
    __device__ static constexpr int dq_box(int stage, int warpgroup, int box) {
        if (!kDqInStage) return kDqOffset + (warpgroup * kDqBoxes + box) * kDqBoxBytes;
        return (box < kOwnAtoms ? kQOffset : kDoOffset) + stage * kRowsBytes + (warpgroup * kOwnAtoms + box % kOwnAtoms) * kDqBoxBytes;
    }
};

// Q and dO as TMA maps, boxes of 64 columns of kQueries rows, and the workspace's dQ
// accumulator, boxes of 32 columns of kQueries rows; a __grid_constant__ kernel parameter, so
// TMA reads them in place.
struct StepMaps {
    CUtensorMap q, d_o, dq_accum;
};

// kDeterministic: dQ's adds in turns (dq_turns.h); kOptions: softcapping and ALiBi
// (step_scoring.h). Each its own instance, so that the default loop's code stays
// as it is (docs/decisions.md, "Deterministic backward").
template <class Config, bool kDeterministic, bool kOptions>
__global__ void __launch_bounds__(WgmmaTiles<Config>::kThreads, 1)
    wgmma_kernel(const BwdParams p, const __grid_constant__ StepMaps maps) {
    using T = WgmmaTiles<Config>;
    using Numeric = DTypeTraits<Config::dtype>;
    constexpr DType kDType = Config::dtype;
    constexpr bool kMasked = Config::mask == Mask::causal;
    constexpr int kScores = T::kScoreQueries / 2;          // a thread's elements of S^T, of dP^T
    constexpr int kScoreSteps = T::kScoreQueries / wgmma::kK;  // their 16-column steps (A operands)
    constexpr int kQuerySteps = T::kQueries / wgmma::kK;       // k steps of dV += P^T dO
    constexpr bool kOverlappedDropout = T::kColumns <= 64;  // see keep_bits below

    // Aligned by an offset from the shared array (not through an integer), so that the compiler
    // still knows accesses through it as shared-memory ones.
    extern __shared__ uint8_t shared_raw[];
    uint8_t* const shared =
        shared_raw + (T::kAlignment - hopper::shared_address(shared_raw) % T::kAlignment) % T::kAlignment;
    const uint32_t base = hopper::shared_address(shared);
    // Descriptors start from addresses the compiler cannot precompute, so that it derives each
    // step's descriptor when issuing rather than holding them all in registers.
    const auto at = [&](int offset) { return uint32_t(hopper::opaque(int(base + offset))); };
    const int warpgroup = threadIdx.x / wgmma::kThreads, warp = threadIdx.x % wgmma::kThreads / 32;
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const KeyTile tile = KeyTile::of(blockIdx.x, p, T::kKeys);
    const int key0 = tile.index * T::kKeys, head_kv = tile.head_kv, batch = tile.batch;
    const int own_keys = T::kSplitColumns ? 0 : wgmma::kRows * warpgroup;  // the warpgroup's first key of the tile
    const int warp_keys = key0 + own_keys + 16 * warp;                      // the warp's 16 accumulator rows
    const int kv0 = T::kSplitColumns ? T::kColumns * warpgroup : 0;         // its first column of dK and dV
    const int query0 = T::kSplitColumns ? T::kScoreQueries * warpgroup : 0;  // its first query row of a step's S^T
    const BlockSequence seq = BlockSequence::of(p, batch);
    const int len_q = seq.len_q, len_kv = seq.len_kv;
    const KeyMask<kMasked> mask = KeyMask<kMasked>::of(len_q, len_kv, p.window);
    const float scale_log2 = p.scale * kLog2e;
    const bool dropping = p.dropout.p != 0.f;
    const Dropout dropout = dropping ? Dropout::of(p.dropout) : Dropout{};
    const float keep_scale = dropping ? dropout.keep_scale : 1.f;

    float dk[T::kColumns / 2] = {}, dv[T::kColumns / 2] = {};
    const Workspace ws = Workspace::of(p);
    const auto walk = BlockSteps<T::kQueries, kDeterministic>::of(p, mask, key0, T::kKeys, head_kv, batch, len_q);
    // Where row r, column c of a swizzled tile of `rows` rows goes.
    const auto place = [&](int offset, int rows) {
        uint8_t* const tile = shared + offset;
        return [tile, rows](int row, int column) { return tile + wgmma::swizzled_offset(rows, row, column); };
    };
    uint64_t* const landed = reinterpret_cast<uint64_t*>(shared + T::kBarrierOffset);  // [stage]
    // Thread 0 starts a step's copies: Q and dO (TMA boxes), its LSE and D (bulk copies; the
    // workspace's rows of a step are one aligned range: workspace.h).
    const auto load_stage = [&](int s) {
        const auto st = walk.at(s, p);
        const int stage = s % T::kStages;
        // Q's and dO's maps: a packed batch's are one sequence of all its tokens (mmabwd.h). (Its
        // first row read here, by the one thread: kept across the loop, it would spill at d256.)
        const int row0 = p.cu_seqlens_q ? p.cu_seqlens_q[batch] : 0, map_batch = p.cu_seqlens_q ? 0 : batch;
        const uint32_t barrier = hopper::shared_address(&landed[stage]);
        hopper::barrier_arrive_expect(barrier, 2 * (T::kRowsBytes + T::kStatsBytes));
#pragma unroll
        for (int atom = 0; atom < T::kHeadDim / wgmma::kAtomColumns; ++atom) {
            const int column = atom * wgmma::kAtomColumns, offset = stage * T::kRowsBytes + atom * T::kQueries * wgmma::kRowBytes;
            hopper::tma_load_4d(base + T::kQOffset + offset, &maps.q, column, row0 + st.q0, st.head, map_batch, barrier);
            hopper::tma_load_4d(base + T::kDoOffset + offset, &maps.d_o, column, row0 + st.q0, st.head, map_batch, barrier);
        }
        hopper::bulk_load(base + T::kLseOffset + stage * T::kStatsBytes, ws.lse_log2 + st.rows + st.q0, T::kStatsBytes, barrier);
        hopper::bulk_load(base + T::kDOffset + stage * T::kStatsBytes, ws.d + st.rows + st.q0, T::kStatsBytes, barrier);
    };
    if (walk.steps > 0) {  // (no copies left in flight by a block without steps)
        const uint16_t* k = static_cast<const uint16_t*>(p.k) + seq.kv_index * p.k_strides.batch + head_kv * p.k_strides.head;
        const uint16_t* v = static_cast<const uint16_t*>(p.v) + seq.kv_index * p.v_strides.batch + head_kv * p.v_strides.head;
        load_rows<T::kThreads, T::kHeadDim, T::kKeys>(place(T::kKOffset, T::kKeys), k, p.k_strides.row, key0, len_kv, p.head_dim);
        load_rows<T::kThreads, T::kHeadDim, T::kKeys>(place(T::kVOffset, T::kKeys), v, p.v_strides.row, key0, len_kv, p.head_dim);
        if (threadIdx.x == 0) {
            for (int stage = 0; stage < T::kStages; ++stage) hopper::barrier_init(&landed[stage], 1);
            hopper::barrier_init_fence();
            for (int s = 0; s < min(walk.steps, T::kStages - 1); ++s) load_stage(s);
        }
        copy_async_wait_all();
        hopper::fence_async_shared();  // K and V are wgmma operands (read through the async proxy)
        __syncthreads();               // ... and the barriers initialised
    }
    // The warpgroup's 64 rows of the K and V tiles (A operands, K-major).
    const int own_rows = own_keys * wgmma::kRowBytes;
    // Deterministic, by TMA: the counter of the last step's turn, passed once its add has
    // completed, at the next step, where the thread waits for that add anyway.
    int* passing = nullptr;
    const auto pass_last = [&] {
        hopper::bulk_wait();
        hopper::fence_async_global();  // the add, by the async proxy, before the counter
        DqTurn::pass(passing);
    };
    auto st = walk.at(0, p);
    for (int step = 0; step < walk.steps; ++step, st = walk.next(st, p)) {
        const int stage = step % T::kStages;
        hopper::barrier_wait(&landed[stage], (step / T::kStages) % 2);
        const int q_tile = T::kQOffset + stage * T::kRowsBytes, do_tile = T::kDoOffset + stage * T::kRowsBytes;
        if (st.q0 + T::kQueries > len_q && (p.cu_seqlens_q || len_q < p.seqlen_q)) {
            // TMA read rows past this sequence's end inside the tensor (a padded batch's padding,
            // a packed batch's next sequence): zeros there, as P and dS are zero there only while
            // Q and dO are finite.
            for (int i = threadIdx.x; i < T::kQueries * T::kHeadDim / 8; i += T::kThreads) {
                const int row = i / (T::kHeadDim / 8), column = i % (T::kHeadDim / 8) * 8;
                if (st.q0 + row < len_q) continue;
                const int offset = wgmma::swizzled_offset(T::kQueries, row, column);
                *reinterpret_cast<uint4*>(shared + q_tile + offset) = make_uint4(0, 0, 0, 0);
                *reinterpret_cast<uint4*>(shared + do_tile + offset) = make_uint4(0, 0, 0, 0);
            }
            hopper::fence_async_shared();
            __syncthreads();
        }
        const float* const s_lse = reinterpret_cast<const float*>(shared + T::kLseOffset + stage * T::kStatsBytes);
        const float* const s_d = reinterpret_cast<const float*>(shared + T::kDOffset + stage * T::kStatsBytes);
        // Dropout's keep bits (block_steps.h), bit e for accumulator element e: while the step's
        // first wgmmas run where registers allow it (d64), else before they take their registers.
        uint32_t kept = ~0u;
        const auto keep_bits = [&] {
            kept = 0;
#pragma unroll(kOverlappedDropout ? kScores / 4 : 1)
            for (int n = 0; n < kScores / 4; ++n)
                kept |= transposed_keep_bits(dropout, int64_t(batch) * p.heads_q + st.head, st.q0 + query0 + 8 * n, warp_keys, lane)
                        << (4 * n);
        };
        if (!kOverlappedDropout && dropping) keep_bits();

        // S^T = K Q^T and dP^T = V dO^T: accumulator element e is key warp_keys + g + 8 (e / 2 % 2),
        // query row query0 + 8 (e / 4) + 2t + e % 2 of the step (mma/wgmma.h).
        // (Zeroed, though the first wgmma overwrites them: an undefined accumulator would be
        // live across the loop, holding its registers through the whole step.)
        float s[kScores] = {}, dp[kScores] = {};
        {
            const wgmma::Descriptor k = wgmma::k_major_operand(at(T::kKOffset + own_rows));
            const wgmma::Descriptor v = wgmma::k_major_operand(at(T::kVOffset + own_rows));
            const int own_queries = query0 * wgmma::kRowBytes;
            const wgmma::Descriptor q = wgmma::k_major_operand(at(q_tile + own_queries));
            const wgmma::Descriptor d_o = wgmma::k_major_operand(at(do_tile + own_queries));
            hopper::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < T::kHeadDim / wgmma::kK; ++kk)
                wgmma_ss<T::kScoreQueries, kDType, false>(s, k.step(wgmma::k_major_step(T::kKeys, kk)),
                                                          q.step(wgmma::k_major_step(T::kQueries, kk)), kk > 0);
            hopper::wgmma_commit();
#pragma unroll
            for (int kk = 0; kk < T::kHeadDim / wgmma::kK; ++kk)
                wgmma_ss<T::kScoreQueries, kDType, false>(dp, v.step(wgmma::k_major_step(T::kKeys, kk)),
                                                          d_o.step(wgmma::k_major_step(T::kQueries, kk)), kk > 0);
            hopper::wgmma_commit();
        }
        if (kOverlappedDropout && dropping) keep_bits();
        // Element e is key warp_keys + g + 8 (e / 2 % 2), row query0 + 8 (e / 4) + 2t + e % 2 of the step.
        const auto key_of = [&](int e) { return warp_keys + g + 8 * wgmma::row_half(e); };
        const auto row_of = [&](int e) { return query0 + 8 * (e / 4) + 2 * t + e % 2; };
        const auto offset_of = [&](int e) { return 8 * (e / 4) + e % 2 - 8 * wgmma::row_half(e); };  // (StepScoring)
        // The mask is tested only where the step's rows and the block's keys are not all seen (the
        // diagonal's steps, a sequence's last keys).
        const auto seen = [&](int e, auto masked) {
            return !decltype(masked)::value || (key_of(e) < len_kv && (!kMasked || mask.sees(st.q0 + row_of(e), key_of(e))));
        };
        hopper::wgmma_wait<1>();  // S^T is done; dP^T may still run
        hopper::pin_registers(s);
        StepScoring scoring{};
        if constexpr (kOptions)
            scoring = StepScoring::of(p.scale, p.softcap, sequence_slopes(p.alibi_slopes, p.alibi_batch_stride, batch), st.head,
                                      mask.diagonal(st.q0 + query0 + 2 * t) - (warp_keys + g));
        // P^T in place of S^T while dP^T runs; with softcapping (`capped`), S^T's tanh instead, and
        // P^T with dS^T's factor 1 - tanh^2 once dP^T is done (StepScoring: recovering tanh from P
        // would take a log, and holding both took registers that the d256 loop does not have).
        const bool capped = kOptions && p.softcap != 0.f;
        const auto probabilities = [&](auto masked, auto capping) {
#pragma unroll
            for (int e = 0; e < kScores; ++e) {
                const bool in = seen(e, masked);
                if constexpr (!kOptions) {
                    s[e] = in ? exp2_approx(s[e] * scale_log2 - s_lse[row_of(e)]) : 0.f;
                } else if constexpr (decltype(capping)::value) {
                    s[e] = in ? scoring.tanh(s[e]) : -INFINITY;
                } else {
                    s[e] = in ? scoring.probability(scoring.score(s[e]), s_lse[row_of(e)], offset_of(e)) : 0.f;
                }
            }
        };
        const auto with_mask = [&](auto capping) {
            if (mask.sees_all(st.q0, T::kQueries, key0, T::kKeys)) probabilities(std::false_type{}, capping);
            else probabilities(std::true_type{}, capping);
        };
        if (capped) with_mask(std::true_type{});
        else with_mask(std::false_type{});
        hopper::wgmma_wait<0>();
        hopper::pin_registers(dp);
        // P_d^T and dS^T as the A operands of dV and dK: columns 16k .. 16k + 15 are step k.
        uint32_t a_p[kScoreSteps][4], a_ds[kScoreSteps][4];
        const auto operands = [&](auto dropped, auto capping) {  // (without dropout: no multiplies by 1)
#pragma unroll
            for (int e = 0; e < kScores; e += 2) {
                const int row = row_of(e);
                float pd[2], ds[2];
#pragma unroll
                for (int i = 0; i < 2; ++i) {
                    float prob = s[e + i], score_grad = 1.f;
                    if constexpr (decltype(capping)::value)
                        prob = scoring.probability(scoring.capped_score(s[e + i], &score_grad), s_lse[row + i],
                                                   offset_of(e + i));
                    if constexpr (decltype(dropped)::value) {
                        const float keep = (kept >> (e + i)) & 1u ? keep_scale : 0.f;  // Z / (1 - p)
                        pd[i] = prob * keep;
                        ds[i] = prob * (dp[e + i] * keep - s_d[row + i]) * score_grad;
                    } else {
                        pd[i] = prob;
                        ds[i] = prob * (dp[e + i] - s_d[row + i]) * score_grad;
                    }
                }
                a_p[e / 8][e % 8 / 2] = hopper::pack_pair<kDType>(pd[0], pd[1]);
                a_ds[e / 8][e % 8 / 2] = hopper::pack_pair<kDType>(ds[0], ds[1]);
            }
        };
        const auto with_dropout = [&](auto capping) {
            if (dropping) operands(std::true_type{}, capping);
            else operands(std::false_type{}, capping);
        };
        if (capped) with_dropout(std::true_type{});
        else with_dropout(std::false_type{});
        const int kv_columns = wgmma::swizzled_offset(T::kQueries, 0, kv0);
        const int ds_buffer = T::kDsOffset + step % T::kDsBuffers * T::kDsBytes;
        const int p_buffer = T::kPOffset + step % T::kDsBuffers * T::kDsBytes;  // (split columns)
        // dV += P^T dO and dK += dS^T Q for the warpgroup's columns: A from the registers, or
        // with split columns from shared memory (both warpgroups' queries), once both are there.
        const auto issue_dv = [&] {
            const wgmma::Descriptor d_o = wgmma::n_major_operand(at(do_tile + kv_columns), T::kQueries);
            const wgmma::Descriptor pt = wgmma::k_major_operand(at(p_buffer));
            hopper::pin_registers(dv);
            hopper::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kQuerySteps; ++kk)
                if constexpr (T::kSplitColumns)
                    wgmma_ss<T::kColumns, kDType, true>(dv, pt.step(wgmma::k_major_step(T::kKeys, kk)),
                                                        d_o.step(wgmma::n_major_step(kk)), 1);
                else
                    wgmma_rs<T::kColumns, kDType, true>(dv, a_p[kk], d_o.step(wgmma::n_major_step(kk)), 1);
            hopper::wgmma_commit();
        };
        const auto issue_dk = [&] {
            const wgmma::Descriptor q = wgmma::n_major_operand(at(q_tile + kv_columns), T::kQueries);
            const wgmma::Descriptor dst = wgmma::k_major_operand(at(ds_buffer));
            hopper::pin_registers(dk);
            hopper::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < kQuerySteps; ++kk)
                if constexpr (T::kSplitColumns)
                    wgmma_ss<T::kColumns, kDType, true>(dk, dst.step(wgmma::k_major_step(T::kKeys, kk)),
                                                        q.step(wgmma::n_major_step(kk)), 1);
                else
                    wgmma_rs<T::kColumns, kDType, true>(dk, a_ds[kk], q.step(wgmma::n_major_step(kk)), 1);
            hopper::wgmma_commit();
        };
        if constexpr (!T::kSplitColumns) issue_dv();  // (dK's product after dQ's: see below)
        // dS^T (and with split columns P^T) to shared memory, [key][query]: step k's registers are
        // four 8x8 matrices, keys g and g + 8 by queries 16k .. 16k + 7 and 16k + 8 .. 16k + 15
        // (plus query0); lane l gives row l % 8 of matrix l / 8. (The row from a value the
        // compiler cannot see through: else it keeps every address in registers across the loop.)
        const int ds_row = hopper::opaque(warp_keys - key0 + lane % 8 + 8 * (lane / 8 % 2));
#pragma unroll
        for (int kk = 0; kk < kScoreSteps; ++kk) {
            const int at_row = wgmma::swizzled_offset(T::kKeys, ds_row, query0 + 16 * kk + 8 * (lane / 16));
            hopper::store_matrix_x4(base + ds_buffer + at_row, a_ds[kk]);
            if constexpr (T::kSplitColumns) hopper::store_matrix_x4(base + p_buffer + at_row, a_p[kk]);
        }
        hopper::fence_async_shared();
        if (threadIdx.x % wgmma::kThreads == 0) {  // step - 1's dQ add read its rows (with kDqInStage, the
                                                   // stage that the load below fills)
            if (kDeterministic && passing) pass_last();
            else hopper::bulk_wait_read();
        }
        __syncthreads();  // both warpgroups' dS^T are in place, and step - 1 is done everywhere:
        if (threadIdx.x == 0 && step + T::kStages - 1 < walk.steps) load_stage(step + T::kStages - 1);  // its stage is free
        if constexpr (T::kSplitColumns) {
            issue_dv();
            issue_dk();
        }

        // dQ += dS K for columns [c0, c0 + kDqColumns): A = dS^T read M-major, B = K N-major,
        // both along the block's keys.
        const int c0 = warpgroup * T::kDqColumns;
        float dq[T::kDqParts][T::kDqPartColumns / 2] = {};
        const wgmma::Descriptor ds = wgmma::n_major_operand(at(ds_buffer), T::kKeys);
#pragma unroll
        for (int part = 0; part < T::kDqParts; ++part) {
            const int part0 = c0 + part * T::kDqPartColumns;
            const wgmma::Descriptor k = wgmma::n_major_operand(at(T::kKOffset + wgmma::swizzled_offset(T::kKeys, 0, part0)), T::kKeys);
            hopper::wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < T::kKeys / wgmma::kK; ++kk)
                wgmma_ss<T::kDqPartColumns, kDType, true, true>(dq[part], ds.step(wgmma::n_major_step(kk)),
                                                                k.step(wgmma::n_major_step(kk)), kk > 0);
            hopper::wgmma_commit();
        }
        if constexpr (!T::kSplitColumns) {
            // dK's product after dQ's, so that dQ's staging below runs beside it (the tensor
            // cores otherwise idle there); dV's and dQ's are done at wait<1>.
            issue_dk();
            hopper::wgmma_wait<1>();
            hopper::pin_registers(dv);
#pragma unroll
            for (int kk = 0; kk < kQuerySteps; ++kk) hopper::pin_registers(a_p[kk]);
        }
        static_assert(T::kDqParts <= 2, "the waits below");
#pragma unroll
        for (int part = 0; part < T::kDqParts; ++part) {
            // With split columns, a part's boxes take its operands' places (dK's Q, then dV's dO):
            // the first part is staged once those and its own product are done, while the second runs.
            if constexpr (T::kSplitColumns) {
                if (part + 1 < T::kDqParts) hopper::wgmma_wait<1>();
                else hopper::wgmma_wait<0>();
            }
            hopper::pin_registers(dq[part]);
            // The part's columns into shared memory (the warpgroup's boxes: row r's 16-byte chunk
            // c at chunk c ^ (r % 8), as TMA reads them); one thread adds them below. Rows past
            // the sequence add zeros: their dS rows are zero. Lanes with t >= 2 store their
            // columns in the order n ^ 2, so that a half-warp's 16 stores fill 8 distinct chunks
            // (in order, rows g and g ^ 1 share one: a 2-way conflict). Both values' indices are
            // constants, so the lanes select registers, not index an array.
            const bool swapped = t & 2;
#pragma unroll
            for (int half = 0; half < 2; ++half) {  // the thread's rows 16w + g and 16w + g + 8
                const int row = 16 * warp + g + 8 * half;
#pragma unroll
                for (int i = 0; i < T::kDqPartColumns / 8; ++i) {
                    const int n = swapped ? i ^ 2 : i;
                    const int column = part * T::kDqPartColumns + 8 * n + 2 * t;  // of the warpgroup's
                    const int box = column / T::kDqBoxColumns, chunk = column % T::kDqBoxColumns / 4;
                    const float* const d = dq[part];
                    const float2 value = swapped ? make_float2(d[4 * (i ^ 2) + 2 * half], d[4 * (i ^ 2) + 2 * half + 1])
                                                 : make_float2(d[4 * i + 2 * half], d[4 * i + 2 * half + 1]);
                    *reinterpret_cast<float2*>(shared + T::dq_box(stage, warpgroup, box) + row * wgmma::kRowBytes +
                                               (chunk ^ (row % 8)) * 16 + column % 4 * 4) = value;
                }
            }
        }
        hopper::fence_async_shared();
        hopper::named_barrier_sync(1 + warpgroup, wgmma::kThreads);
        if (threadIdx.x % wgmma::kThreads == 0) {
            if constexpr (kDeterministic) {
                const DqTurn turn = DqTurn::of(p, mask, tile.index, T::kKeys, st.rows, st.q0, warpgroup);
                turn.wait();
                hopper::fence_async_global();  // the counter seen before the add
                passing = turn.counter;
            }
#pragma unroll
            for (int box = 0; box < T::kDqBoxes; ++box)
                hopper::tma_reduce_add_2d(&maps.dq_accum, base + T::dq_box(stage, warpgroup, box),
                                          c0 + box * T::kDqBoxColumns, int(st.rows + st.q0));
            hopper::bulk_commit();
        }
        if constexpr (!T::kSplitColumns) {
            hopper::wgmma_wait<0>();  // dK's product is done with its register operand before it is rebuilt
            hopper::pin_registers(dk);
#pragma unroll
            for (int kk = 0; kk < kQuerySteps; ++kk) hopper::pin_registers(a_ds[kk]);
        }
    }
    if (threadIdx.x % wgmma::kThreads == 0) {  // (the adds read shared memory)
        if (kDeterministic && passing) pass_last();
        else hopper::bulk_wait();
    }

    // (The sequence read again: kept across the loop, it would spill at d256.)
    const BlockSequence out_seq = BlockSequence::of(p, batch);
    uint16_t* dk_out = static_cast<uint16_t*>(p.dk) + out_seq.kv_index * p.dk_strides.batch + head_kv * p.dk_strides.head;
    uint16_t* dv_out = static_cast<uint16_t*>(p.dv) + out_seq.kv_index * p.dv_strides.batch + head_kv * p.dv_strides.head;
    if constexpr (T::kSplitColumns) {  // straight from the accumulators: staged as below, d256's loop spilled
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int row = warp_keys + g + 8 * half;
            if (row >= out_seq.written_kv) continue;
            uint16_t* const dk_row = dk_out + row * p.dk_strides.row + kv0 + 2 * t;
            uint16_t* const dv_row = dv_out + row * p.dv_strides.row + kv0 + 2 * t;
#pragma unroll
            for (int n = 0; n < T::kColumns / 8; ++n) {
                const int e = 4 * n + 2 * half;
                if (kv0 + 8 * n >= p.head_dim) continue;  // (a smaller problem head_dim)
                *reinterpret_cast<uint32_t*>(dk_row + 8 * n) = pack2<Numeric>(dk[e] * p.scale, dk[e + 1] * p.scale);
                *reinterpret_cast<uint32_t*>(dv_row + 8 * n) = pack2<Numeric>(dv[e], dv[e + 1]);
            }
        }
        return;
    }
    // dK and dV take the places of K and V in shared memory (rows of 16-byte chunks, chunk c of
    // row r at c ^ (r % 8)), so that the block writes whole rows in 16-byte pieces: stored from
    // the accumulators, each warp instruction writes 4 bytes to each of 8 rows, which at a few
    // steps a block took as long as its loop (docs/decisions.md, "Backward on wgmma").
    __syncthreads();  // both warpgroups' products are done with K and V
    constexpr int kRowChunks = T::kHeadDim / 8;
    static_assert(kRowChunks >= 8 && (T::kSplitColumns || T::kColumns == T::kHeadDim) &&
                      T::kKVBytes == T::kKeys * T::kHeadDim * 2,
                  "whole 8-chunk swizzles; a thread's chunk n is column group n (kv0 = 0); K's tile holds dK");
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int row = warp_keys - key0 + g + 8 * half;
#pragma unroll
        for (int n = 0; n < T::kColumns / 8; ++n) {
            const int e = 4 * n + 2 * half, at = row * T::kHeadDim * 2 + (n ^ (row % 8)) * 16 + 4 * t;
            *reinterpret_cast<uint32_t*>(shared + T::kKOffset + at) = pack2<Numeric>(dk[e] * p.scale, dk[e + 1] * p.scale);
            *reinterpret_cast<uint32_t*>(shared + T::kVOffset + at) = pack2<Numeric>(dv[e], dv[e + 1]);
        }
    }
    __syncthreads();
    for (int i = threadIdx.x; i < 2 * T::kKeys * kRowChunks; i += T::kThreads) {
        const bool is_dv = i >= T::kKeys * kRowChunks;
        const int row = i % (T::kKeys * kRowChunks) / kRowChunks, chunk = i % kRowChunks, key = key0 + row;
        if (key >= out_seq.written_kv || 8 * chunk >= p.head_dim) continue;
        const uint4 chunk_value = *reinterpret_cast<const uint4*>(shared + (is_dv ? T::kVOffset : T::kKOffset) +
                                                                   row * T::kHeadDim * 2 + (chunk ^ (row % 8)) * 16);
        uint16_t* const out = is_dv ? dv_out + key * p.dv_strides.row : dk_out + key * p.dk_strides.row;
        *reinterpret_cast<uint4*>(out + 8 * chunk) = chunk_value;
    }
}

}  // namespace mmabwd
}  // namespace fmha
