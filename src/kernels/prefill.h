// The prefill family: tiled attention for any seqlen_q and seqlen_kv, the catalogue's correct
// fallback. One block owns kBlockRows query rows of one (batch, head); it walks the visible
// keys in tiles staged through shared memory, with a one-pass online softmax in fp32.
//
// Work split inside a block: each cooperative group (kGroupWidth lanes) owns kRowsPerGroup
// query rows. For scores, lane l computes the dot products of its group's rows with keys
// l, l + width, ... of the tile; for P.V, lane l accumulates output columns l, l + width, ...
// Probabilities move between the two splits by group broadcasts.
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/common/mask.h"
#include "kernels/common/online_softmax.h"
#include "kernels/common/paged_kv.h"
#include "kernels/common/rows.h"
#include "kernels/common/schedule.h"
#include "kernels/common/scoring.h"
#include "kernels/common/sequence.h"
#include "kernels/config.h"
#include "kernels/group.h"
#include "kernels/numeric.h"

namespace fmha {
namespace prefill {

template <class Config, int GroupWidth>
struct Traits {
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kGroupWidth = GroupWidth;
    static constexpr int kGroups = 4;                                  // groups per block
    static constexpr int kRowsPerGroup = 4;                            // query rows per group
    static constexpr int kBlockRows = kGroups * kRowsPerGroup;         // query rows per block
    static constexpr int kBlockKeys = 64;                              // keys per tile
    static constexpr int kKeysPerLane = kBlockKeys / kGroupWidth;      // scores per lane and row
    static constexpr int kColsPerLane = (kHeadDim + kGroupWidth - 1) / kGroupWidth;
    static constexpr int kVec = 8;                                     // elements per 16-byte access
    // Padding rows by 16 bytes makes a group's 16-byte reads of consecutive rows conflict-free.
    static constexpr int kSmemStride = kHeadDim + kVec;
    static constexpr int kThreads = kGroups * kGroupWidth;
    static constexpr int kSmemBytes = (kBlockRows + kBlockKeys) * kSmemStride * 2;

    static_assert(kHeadDim % kVec == 0, "rows are moved in 16-byte vectors");
    static_assert(kBlockKeys % kGroupWidth == 0, "a tile is a whole number of keys per lane");
    static_assert(kSmemBytes <= 48 * 1024, "static shared memory limit");
};

// Copies rows [first, first + kRows) into shared memory, zero-filling rows at or past `end` and
// columns past `columns` (a smaller head_dim than the kernel's) so that no stale or poisoned
// value reaches the maths. row_at(i): element 0 of row i.
template <class T, int kRows, class RowAt>
__device__ inline void stage_rows(uint16_t* tile, RowAt row_at, int first, int end, int columns) {
    constexpr int kChunksPerRow = T::kHeadDim / T::kVec;
    for (int chunk = threadIdx.x; chunk < kRows * kChunksPerRow; chunk += T::kThreads) {
        const int r = chunk / kChunksPerRow;
        const int col = (chunk % kChunksPerRow) * T::kVec;
        uint4 value = make_uint4(0, 0, 0, 0);
        if (first + r < end && col < columns) value = *reinterpret_cast<const uint4*>(row_at(first + r) + col);
        *reinterpret_cast<uint4*>(tile + r * T::kSmemStride + col) = value;
    }
}

// kOptions: the kernel takes FwdParams' run-time options (softcapping, ALiBi, paged KV); launches
// without any run the kernel compiled without them, whose code does not change with them (on
// AMD their registers would cost the d256 kernels an occupancy step).
template <class Config, int GroupWidth, bool kOptions>
__global__ void __launch_bounds__((Traits<Config, GroupWidth>::kThreads)) fwd_kernel(const FwdParams p) {
    using T = Traits<Config, GroupWidth>;
    using Numeric = DTypeTraits<Config::dtype>;
    using G = Group<T::kGroupWidth>;
    constexpr int R = T::kRowsPerGroup;
    constexpr bool kMasked = Config::mask == Mask::causal;

    // uint4 storage keeps the tiles 16-byte aligned on both platforms.
    __shared__ uint4 q_storage[T::kBlockRows * T::kSmemStride / T::kVec];
    __shared__ uint4 kv_storage[T::kBlockKeys * T::kSmemStride / T::kVec];
    uint16_t* q_tile = reinterpret_cast<uint16_t*>(q_storage);
    uint16_t* kv_tile = reinterpret_cast<uint16_t*>(kv_storage);

    const int lane = threadIdx.x % T::kGroupWidth;
    const int group_row0 = (threadIdx.x / T::kGroupWidth) * R;  // first row of this group in the tile
    const float scale_log2 = p.scale * kLog2e;
    const int q_tiles = (p.seqlen_q + T::kBlockRows - 1) / T::kBlockRows;
    // work_items(), from p's fields: passing the kernel argument by reference costs scratch on AMD.
    const int64_t items = int64_t(p.batch) * p.heads_q * q_tiles;
    // Packed batches take the options variant (has_run_time_options): the plain one's code is
    // that of padded batches.
    const int* const cu_seqlens_q = packed_only<kOptions>(p.cu_seqlens_q);
    const int* const cu_seqlens_kv = packed_only<kOptions>(p.cu_seqlens_kv);

    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        // q tiles fastest, then heads: neighbouring blocks share K/V in L2 (GQA groups too).
        const int q0 = int(item % q_tiles) * T::kBlockRows;
        const int head = int((item / q_tiles) % p.heads_q);
        const int64_t batch = item / q_tiles / p.heads_q;
        const int len_q = sequence_length(p.seqlens_q, cu_seqlens_q, batch, p.seqlen_q);
        const int len_kv = sequence_length(p.seqlens_kv, cu_seqlens_kv, batch, p.seqlen_kv);
        if (q0 >= len_q) continue;  // uniform over the block
        const int head_kv = kv_head_of<Config::heads>(head, p.heads_q, p.heads_kv);
        const auto* q = row_start(static_cast<const uint16_t*>(p.q), p.q_strides, cu_seqlens_q, batch, head, 0);
        // K and V rows: a stride apart, or through the block table of a paged cache.
        const auto k = KvRows<kOptions>::of(p.k, p.k_strides, cu_seqlens_kv, p.block_table, p.max_pages_per_seq,
                                            p.page_size, batch, head_kv);
        const auto v = KvRows<kOptions>::of(p.v, p.v_strides, cu_seqlens_kv, p.block_table, p.max_pages_per_seq,
                                            p.page_size, batch, head_kv);

        // Keys any row of this tile sees.
        const KeyMask<kMasked> mask = KeyMask<kMasked>::of(len_q, len_kv, p.window);
        int kv_begin, kv_end;
        mask.key_range(q0, q0 + T::kBlockRows - 1, kv_begin, kv_end);

        __syncthreads();  // the previous item is done with q_tile
        stage_rows<T, T::kBlockRows>(q_tile, [&](int i) { return q + i * p.q_strides.row; }, q0, len_q, p.head_dim);

        float row_max[R], row_sum[R], acc[R][T::kColsPerLane];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row_max[r] = -INFINITY;
            row_sum[r] = 0.f;  // this lane's share; summed over the group at the end
#pragma unroll
            for (int c = 0; c < T::kColsPerLane; ++c) acc[r][c] = 0.f;
        }

        for (int k0 = kv_begin; k0 < kv_end; k0 += T::kBlockKeys) {
            __syncthreads();  // everyone is done with the previous V tile
            stage_rows<T, T::kBlockKeys>(kv_tile, [&](int j) { return k.row(j, p.k_strides); }, k0, kv_end, p.head_dim);
            __syncthreads();

            // Scores of this group's rows against keys lane, lane + width, ... of the tile.
            float score[R][T::kKeysPerLane] = {};
#pragma unroll 1
            for (int col = 0; col < T::kHeadDim; col += T::kVec) {
                float qf[R][T::kVec];
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    unpack8<Numeric>(&q_tile[(group_row0 + r) * T::kSmemStride + col], qf[r]);
                }
#pragma unroll
                for (int t = 0; t < T::kKeysPerLane; ++t) {
                    float kf[T::kVec];
                    unpack8<Numeric>(&kv_tile[(t * T::kGroupWidth + lane) * T::kSmemStride + col], kf);
#pragma unroll
                    for (int e = 0; e < T::kVec; ++e) {
#pragma unroll
                        for (int r = 0; r < R; ++r) score[r][t] += qf[r][e] * kf[e];
                    }
                }
            }

            // Masked keys get -inf; scores move to the log2 domain (through the scoring options).
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const MaskRow row = mask.row(q0 + group_row0 + r);
                RowScoring scoring;
                if constexpr (kOptions) scoring = RowScoring::of(p.scale, p.softcap, sequence_slopes(p.alibi_slopes, p.alibi_batch_stride, batch), head, row);
#pragma unroll
                for (int t = 0; t < T::kKeysPerLane; ++t) {
                    const int key = k0 + t * T::kGroupWidth + lane;
                    const float s = kOptions ? scoring.log2_score(score[r][t], key) : score[r][t] * scale_log2;
                    score[r][t] = key < kv_end && row.sees<kMasked>(key, p.window) ? s : -INFINITY;
                }
            }

            __syncthreads();  // everyone is done with the K tile
            stage_rows<T, T::kBlockKeys>(kv_tile, [&](int j) { return v.row(j, p.v_strides); }, k0, kv_end, p.head_dim);
            __syncthreads();

            // Online softmax: rescale what was accumulated to the new running maximum.
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float tile_max = score[r][0];
#pragma unroll
                for (int t = 1; t < T::kKeysPerLane; ++t) tile_max = fmaxf(tile_max, score[r][t]);
                float reference;
                const float rescale = raise_max(row_max[r], G::max(tile_max), reference);
                row_sum[r] *= rescale;
#pragma unroll
                for (int c = 0; c < T::kColsPerLane; ++c) acc[r][c] *= rescale;
#pragma unroll
                for (int t = 0; t < T::kKeysPerLane; ++t) {
                    score[r][t] = exp2f(score[r][t] - reference);
                    row_sum[r] += score[r][t];
                }
            }

            // acc += P . V over the tile's keys.
#pragma unroll
            for (int t = 0; t < T::kKeysPerLane; ++t) {
#pragma unroll 4
                for (int src = 0; src < T::kGroupWidth; ++src) {
                    const uint16_t* v_row = &kv_tile[(t * T::kGroupWidth + src) * T::kSmemStride];
                    float prob[R];
#pragma unroll
                    for (int r = 0; r < R; ++r) prob[r] = G::broadcast(score[r][t], src);
#pragma unroll
                    for (int c = 0; c < T::kColsPerLane; ++c) {
                        const int col = lane + c * T::kGroupWidth;
                        if (col < T::kHeadDim) {
                            const float value = Numeric::unpack1(v_row[col]);
#pragma unroll
                            for (int r = 0; r < R; ++r) acc[r][c] += prob[r] * value;
                        }
                    }
                }
            }
        }

        // Normalise and store; a row that saw no key at all is written as zeros. (O's place is
        // found here: held through the key loop, it cost a packed batch's sequence offset spills.)
        auto* o = row_start(static_cast<uint16_t*>(p.o), p.o_strides, cu_seqlens_q, batch, head, 0);
        // This lane's columns inside the problem's head_dim (fewer than the kernel's where it is
        // smaller), counted once: a compare of each column with p.head_dim spilled the d64 kernel.
        const int lane_columns = (p.head_dim - lane + T::kGroupWidth - 1) / T::kGroupWidth;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = q0 + group_row0 + r;
            const float total = G::sum(row_sum[r]);
            const float inv = total > 0.f ? 1.f / total : 0.f;
            if (row < len_q) {
#pragma unroll
                for (int c = 0; c < T::kColsPerLane; ++c) {
                    const int col = lane + c * T::kGroupWidth;
                    if (c < lane_columns) o[row * p.o_strides.row + col] = Numeric::pack(acc[r][c] * inv);
                }
                if (lane == 0) store_lse<kOptions>(p, batch, head, row, row_max[r], total);
            }
        }
    }
}

// A launch's work items: (batch, head, tile of kBlockRows query rows).
template <class T>
int64_t work_items(const FwdParams& p) {
    return int64_t(p.batch) * p.heads_q * ((p.seqlen_q + T::kBlockRows - 1) / T::kBlockRows);
}

// A launch's blocks: one per work item, within the grid limit (blocks loop past it).
template <class T>
unsigned launch_blocks(const FwdParams& p) {
    return grid_blocks(work_items<T>(p), 1, T::kThreads);
}

template <class Config, int GroupWidth = wave_size(Config::arch)>
hipError_t launch(const FwdParams& p, hipStream_t stream) {
    using T = Traits<Config, GroupWidth>;
    if (!params_match<Config>(p, Family::prefill)) return hipErrorInvalidValue;
    if (has_run_time_options(p)) fwd_kernel<Config, GroupWidth, true><<<launch_blocks<T>(p), T::kThreads, 0, stream>>>(p);
    else fwd_kernel<Config, GroupWidth, false><<<launch_blocks<T>(p), T::kThreads, 0, stream>>>(p);
    return hipGetLastError();
}

// How launch() divides the work, in words (fmha.exe -v).
template <class Config, int GroupWidth = wave_size(Config::arch)>
std::string describe(const FwdParams& p) {
    using T = Traits<Config, GroupWidth>;
    const int64_t items = work_items<T>(p);
    return std::to_string(items) + " work items of " + std::to_string(T::kBlockRows) +
           " query rows of one (batch, head) on " + std::to_string(launch_blocks<T>(p)) + " blocks of " +
           std::to_string(T::kThreads) + " threads; keys in tiles of " + std::to_string(T::kBlockKeys) +
           " through shared memory" + (has_run_time_options(p) ? "; the kernel with run-time options" : "");
}

// The prefill family needs no workspace.
template <class Config, int GroupWidth = wave_size(Config::arch)>
size_t workspace_size(const FwdParams&) {
    return 0;
}

}  // namespace prefill
}  // namespace fmha
