// Key ranges split across groups or blocks: each split yields, per query row, an fp32 partial
// output (normalised by its own sum) and its log2-sum-exp; merging weights each partial by
// exp2(lse - max lse). Partials that a launch cannot merge in its blocks go to a workspace in
// device memory, and combine_kernel merges them into O.
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>
#include <cstdint>

#include "fmha/params.h"
#include "kernels/common/fast_divisor.h"
#include "kernels/common/rows.h"
#include "kernels/common/schedule.h"
#include "kernels/common/sequence.h"
#include "kernels/group.h"

namespace fmha {

// Steps of keys_per_step keys from kv_lo that split `split` of `splits` takes: every splits-th
// one, so the splits of an item read neighbouring keys at any time (docs/decisions.md).
__device__ inline int split_steps(int kv_lo, int kv_hi, int keys_per_step, int split, const FastDivisor& splits) {
    const int total = (kv_hi - kv_lo + keys_per_step - 1) / keys_per_step;
    return total > split ? splits.divide(total - split + int(splits.divisor) - 1) : 0;
}

// The workspace of a launch with n partials per query row (n > 1): fp32 partial outputs
// [row][n][head_dim], then the partial log2-sum-exps [row][n], where row is query_row_index().
inline size_t workspace_bytes(const FwdParams& p, int n) {
    if (n == 1) return 0;
    const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_q;
    return rows * n * (size_t(p.head_dim) + 1) * sizeof(float);
}

// The two parts of the workspace (layout: workspace_bytes), indexed by slot = row x n + partial.
struct SplitWorkspace {
    float* partials;  // [slot][head_dim]
    float* lses;      // [slot]

    __device__ SplitWorkspace(const FwdParams& p, int n) {
        partials = static_cast<float*>(p.workspace);
        lses = partials + int64_t(p.batch) * p.heads_q * p.seqlen_q * n * p.head_dim;
    }
};

// Merges n partials of a row: out = the sum of exp2(lse - max lse) x partial over 8 columns,
// the partials `stride` floats apart, their log2-sum-exps `lse_stride` apart. Returns the
// weights' sum and the max lse (the merged log2-sum-exp is max + log2(total)). The loads of
// Batch partials go out before any is used: one trip to memory per batch, where a loop that
// waited for each partial's weight made two per partial (docs/decisions.md).
struct Merged {
    float max_lse, total;
};
template <int Batch>
__device__ inline Merged merge_partials(const float* lse, int lse_stride, const float* partial, int64_t stride, int n,
                                        float (&out)[8]) {
    Merged m{-INFINITY, 0.f};
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = 0.f;
    for (int first = 0; first < n; first += Batch) {
        float l[Batch], x[Batch][8];
#pragma unroll
        for (int j = 0; j < Batch; ++j) {
            const bool in = first + j < n;
            const float4 a = in ? reinterpret_cast<const float4*>(partial + (first + j) * stride)[0] : float4{};
            const float4 b = in ? reinterpret_cast<const float4*>(partial + (first + j) * stride)[1] : float4{};
            l[j] = in ? lse[(first + j) * lse_stride] : -INFINITY;
            x[j][0] = a.x, x[j][1] = a.y, x[j][2] = a.z, x[j][3] = a.w, x[j][4] = b.x, x[j][5] = b.y, x[j][6] = b.z, x[j][7] = b.w;
        }
        float batch_max = m.max_lse;
#pragma unroll
        for (int j = 0; j < Batch; ++j) batch_max = fmaxf(batch_max, l[j]);
        if (batch_max == -INFINITY) continue;  // no split so far saw a key (their partials hold zeros)
        const float rescale = exp2f(m.max_lse - batch_max);
        m.max_lse = batch_max;
        m.total *= rescale;
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] *= rescale;
#pragma unroll
        for (int j = 0; j < Batch; ++j) {
            const float weight = exp2f(l[j] - batch_max);
            m.total += weight;
#pragma unroll
            for (int e = 0; e < 8; ++e) out[e] = fmaf(weight, x[j][e], out[e]);
        }
    }
    return m;
}

// Combines each row's n partials in the workspace into O (and FwdParams::lse). A team of
// kCombineLanes lanes takes 8 columns of a row: lane l merges partials l, l + kCombineLanes,
// ..., then the team merges its lanes' results by shuffles, so that few rows with many
// partials still spread over many lanes (docs/decisions.md). A row past its sequence's length
// (never written) is read and merged like the others and not stored: the loads need not wait
// for the sequence's length. One instantiation serves every variant of a config.
inline constexpr int kCombineLanes = 8;
inline constexpr int kCombineThreads = 256;  // per block
inline constexpr int kCombineBatch = 8;      // partials a lane loads at once

template <class Config>
__global__ void __launch_bounds__(kCombineThreads)
    combine_kernel(const FwdParams p, const int n, const FastDivisor by_seqlen_q, const FastDivisor by_heads_q) {
    using Team = Group<kCombineLanes>;
    constexpr int kVecsPerRow = Config::head_dim / 8;
    const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
    const int64_t units = rows_total * kVecsPerRow * kCombineLanes;
    // Whole blocks take each trip: the shuffles need every lane of the wave.
    const int64_t trips_end = (units + kCombineThreads - 1) / kCombineThreads * kCombineThreads;
    const SplitWorkspace workspace(p, n);
    for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < trips_end;
         index += int64_t(gridDim.x) * blockDim.x) {
        const int lane = int(index % kCombineLanes);
        const int unit = int(min(index, units - 1) / kCombineLanes);  // below 2^31: launch_combine
        const int row = unit / kVecsPerRow, column = unit % kVecsPerRow * 8;
        const int head_row = by_seqlen_q.divide(row), batch = by_heads_q.divide(head_row);
        const int position = row - head_row * p.seqlen_q, head = head_row - batch * p.heads_q;
        const int mine = lane < n ? (n - lane + kCombineLanes - 1) / kCombineLanes : 0;
        float out[8];
        const Merged m = merge_partials<kCombineBatch>(workspace.lses + int64_t(row) * n + lane, kCombineLanes,
                                        workspace.partials + (int64_t(row) * n + lane) * Config::head_dim + column,
                                        int64_t(kCombineLanes) * Config::head_dim, mine, out);
        const float max_lse = Team::max(m.max_lse);
        const float scale = m.max_lse == -INFINITY ? 0.f : exp2f(m.max_lse - max_lse);
        const float total = Team::sum(m.total * scale);
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] = Team::sum(out[e] * scale);
        if (lane == 0 && index < units && position < sequence_length(p.seqlens_q, p.cu_seqlens_q, batch, p.seqlen_q)) {
            store8_output<Config>(p, batch, head, position, column, out, total > 0.f ? 1.f / total : 0.f);
            if (column == 0) store_lse(p, batch, head, position, max_lse, total);
        }
    }
}

}  // namespace fmha
