// The decode family: bandwidth-bound attention for problems with few query rows per KV head
// (decode steps, tiny sequences with huge batches). There is no shared memory and no
// barrier: K and V stream from memory straight into registers, once per KV head.
//
// Work split. A work item is (batch, KV head, key split, row pass): the rows of a pass are
// up to kRows query rows that read this KV head (the query heads of its GQA group times the
// query positions), so one read of each K/V row serves the whole group. One cooperative
// group (kGroupWidth lanes) owns a work item at a time; a 1-D grid walks the items, so
// batch x heads is not bounded by grid y/z limits.
//
// Inside a group: a team of kTeamWidth lanes holds one key row (each lane one or more
// 16-byte vectors of it), and the group's kSlices teams take interleaved keys, so one load
// instruction of the group reads kSlices consecutive key rows. Each lane issues the loads of
// kKeysPerSlice keys of K and V before using any. Every team keeps its own fp32 online
// softmax state; the slices are merged at the end.
//
// Long key ranges with few work items are split across groups (the plan below); each split
// writes fp32 partial outputs and log-sum-exps to the workspace, and a second kernel combines
// them.
#pragma once

#include <hip/hip_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "kernels/config.h"
#include "kernels/group.h"
#include "kernels/numeric.h"

namespace fmha {
namespace decode {

constexpr int pow2_at_least(int x) { return x <= 1 ? 1 : 2 * pow2_at_least((x + 1) / 2); }
constexpr int min_of(int a, int b) { return a < b ? a : b; }
constexpr int max_of(int a, int b) { return a > b ? a : b; }

// Launches take the ShortKeys variant up to this many keys (and 4 rows per pass).
inline constexpr int kShortKeyRange = 2;

// MaxGroupWidth: the wave size, or less (tests). ShortKeys: the variant whose key range fits
// one step (the headline's seqlen_kv = 2), where slicing keys across teams would leave lanes
// idle: there each team is its own group, so a wave serves several work items at once.

template <class Config, int MaxGroupWidth, int Rows, bool ShortKeys>
struct Traits {
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kWaveSize = wave_size(Config::arch);
    static constexpr int kVec = vector_bytes(Config::arch) / 2;               // elements per load
    static constexpr int kVecsPerRow = kHeadDim / kVec;
    static constexpr int kTeamWidth = min_of(pow2_at_least(kVecsPerRow), MaxGroupWidth);
    static constexpr int kGroupWidth = ShortKeys ? kTeamWidth : MaxGroupWidth;
    static constexpr int kVecsPerLane = (kVecsPerRow + kTeamWidth - 1) / kTeamWidth;
    static constexpr int kSlices = kGroupWidth / kTeamWidth;
    static constexpr int kRows = Rows;
    // Loads in flight per lane: 2 x kKeysPerSlice x kVecsPerLane vectors, as many as the
    // registers left by the rows' state allow. A wave64 group has twice the slices of a warp32
    // one, so it takes half the keys per slice (same keys per step, fewer scalar registers).
    static constexpr int kLongKeysPerSlice = Rows * kVecsPerLane <= 4 ? 8 : Rows * kVecsPerLane < 8 ? 2 : 1;
    static constexpr int kKeysPerSlice = ShortKeys ? kShortKeyRange : max_of(1, kLongKeysPerSlice * 32 / kWaveSize);
    static constexpr int kKeysPerStep = kSlices * kKeysPerSlice;
    static constexpr bool kShortKeys = ShortKeys;
    static constexpr int kThreads = 128;  // small blocks: finer occupancy steps at high register counts
    static constexpr int kGroups = kThreads / kGroupWidth;                    // groups per block
    static constexpr int kMinKeysPerSplit = 256;                              // keeps the combine cheap
    static constexpr int kMaxSplits = 128;

    static_assert(kHeadDim % kVec == 0, "rows are moved in whole vectors");
    static_assert(kGroupWidth <= kWaveSize && kWaveSize % kGroupWidth == 0, "a group lives in one wave");
    static_assert(kThreads % kWaveSize == 0, "whole waves per block");
};

// How one launch divides the work; computed on the host, identical in every kernel of it.
struct Plan {
    int passes;          // row passes per (batch, KV head)
    int splits;          // key splits per (batch, KV head)
    int keys_per_split;  // a multiple of kKeysPerStep
    int64_t items;       // batch x heads_kv x splits x passes
};

// Query rows that read one KV head, and the row-pass size the launcher instantiates for them.
inline int rows_per_kv_head(const FwdParams& p) { return p.heads_q / p.heads_kv * p.seqlen_q; }
inline int rows_per_pass(const FwdParams& p) {
    const int rows = rows_per_kv_head(p);
    return rows <= 1 ? 1 : rows <= 2 ? 2 : rows <= 4 ? 4 : 8;
}

// resident_groups: how many groups of this variant the device runs at once.
template <class T>
Plan make_plan(const FwdParams& p, int64_t resident_groups) {
    Plan plan;
    plan.passes = (rows_per_kv_head(p) + T::kRows - 1) / T::kRows;
    const int64_t base_items = int64_t(p.batch) * p.heads_kv * plan.passes;
    // When the (batch, KV head, pass) items leave resident groups idle, split the key range so
    // that one wave of groups has work; a partial second wave would idle most of the device.
    int64_t splits = 1;
    if (base_items < resident_groups) {
        const int64_t by_length = (p.seqlen_kv + T::kMinKeysPerSplit - 1) / T::kMinKeysPerSplit;
        splits = std::max<int64_t>(1, std::min<int64_t>({resident_groups / base_items, by_length, T::kMaxSplits}));
    }
    // Round each split to whole steps, then drop splits that would start past the end.
    const int64_t per_split = (p.seqlen_kv + splits - 1) / splits;
    plan.keys_per_split = int((per_split + T::kKeysPerStep - 1) / T::kKeysPerStep * T::kKeysPerStep);
    plan.splits = int((p.seqlen_kv + plan.keys_per_split - 1) / plan.keys_per_split);
    plan.items = base_items * plan.splits;
    return plan;
}

// Workspace of a split launch: fp32 partial outputs [row][split][head_dim], then the partial
// log2-sum-exps [row][split], where row = (batch x heads_q + head) x seqlen_q + position.
inline size_t workspace_bytes(const FwdParams& p, const Plan& plan) {
    if (plan.splits == 1) return 0;
    const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_q;
    return rows * plan.splits * (size_t(p.head_dim) + 1) * sizeof(float);
}

// The largest value over the wave. Groups narrower than the wave must run the same number of
// loop trips as their neighbours, because shuffles need every lane of the wave.
template <class T>
__device__ inline int uniform_trip_count(int trips) {
    if constexpr (T::kGroupWidth < T::kWaveSize) return Group<T::kWaveSize>::max(trips);
    else return trips;
}

// a / b and a % b. 64-bit division is a long subroutine on GPUs: take 32 bits when they do.
struct DivMod {
    int64_t quotient;
    int remainder;
};
__device__ inline DivMod divmod(int64_t a, int b) {
    if (b == 1) return {a, 0};
    if (a <= int64_t(UINT32_MAX)) {
        const uint32_t q = uint32_t(a) / uint32_t(b);
        return {int64_t(q), int(uint32_t(a) - q * uint32_t(b))};
    }
    return {a / b, int(a % b)};
}

template <class T, class Numeric>
__device__ inline float dot(const uint4 (&a)[T::kVecsPerLane], const uint4 (&b)[T::kVecsPerLane]) {
    float sum = 0.f;
#pragma unroll
    for (int v = 0; v < T::kVecsPerLane; ++v) {
        const uint32_t aw[4] = {a[v].x, a[v].y, a[v].z, a[v].w}, bw[4] = {b[v].x, b[v].y, b[v].z, b[v].w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const float2 x = Numeric::unpack2(aw[w]), y = Numeric::unpack2(bw[w]);
            sum = fmaf(x.x, y.x, fmaf(x.y, y.y, sum));
        }
    }
    return sum;
}

template <class T, class Config>
__global__ void __launch_bounds__(T::kThreads) attend_kernel(const FwdParams p, const Plan plan) {
    constexpr int GroupWidth = T::kGroupWidth;
    using Numeric = DTypeTraits<Config::dtype>;
    using Team = Group<T::kTeamWidth>;
    constexpr int R = T::kRows, U = T::kKeysPerSlice, V = T::kVecsPerLane;
    constexpr bool kCausal = Config::mask == Mask::causal;

    const int lane = threadIdx.x % GroupWidth;
    const int slice = lane / T::kTeamWidth;
    const int team_lane = lane % T::kTeamWidth;
    const int group_in_block = threadIdx.x / GroupWidth;
    const int heads_per_kv = p.heads_q / p.heads_kv;
    const int rows_per_kv = heads_per_kv * p.seqlen_q;
    const float scale_log2 = p.scale * 1.4426950408889634f;  // exp(x) = exp2(x * log2(e))
    const auto* q_base = static_cast<const uint16_t*>(p.q);
    const auto* k_base = static_cast<const uint16_t*>(p.k);
    const auto* v_base = static_cast<const uint16_t*>(p.v);

    // Column of this lane's vector v (lanes past the head dimension hold zeros).
    auto column = [&](int v) { return (v * T::kTeamWidth + team_lane) * T::kVec; };

    for (int64_t first = int64_t(blockIdx.x) * T::kGroups; first < plan.items;
         first += int64_t(gridDim.x) * T::kGroups) {
        const int64_t item = first + group_in_block;
        const bool active = item < plan.items;  // uniform over the group
        const DivMod by_pass = divmod(active ? item : 0, plan.passes);
        const DivMod by_split = divmod(by_pass.quotient, plan.splits);
        const DivMod by_head = divmod(by_split.quotient, p.heads_kv);
        const int pass = by_pass.remainder, split = by_split.remainder, head_kv = by_head.remainder;
        const int64_t batch = by_head.quotient;
        const int len_q = p.seqlens_q ? p.seqlens_q[batch] : p.seqlen_q;
        const int len_kv = p.seqlens_kv ? p.seqlens_kv[batch] : p.seqlen_kv;

        // This pass's rows, the keys each sees, and the key range of the pass within its split.
        int head_of[R], position_of[R], diagonal[R];
        bool row_valid[R];
        int kv_lo = split * plan.keys_per_split;
        int kv_hi = min(len_kv, kv_lo + plan.keys_per_split);
        int rows_lo = INT32_MAX, rows_hi = INT32_MIN;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int row = pass * R + r;
            head_of[r] = head_kv * heads_per_kv + row / p.seqlen_q;
            position_of[r] = row % p.seqlen_q;
            row_valid[r] = active && row < rows_per_kv && position_of[r] < len_q;
            diagonal[r] = position_of[r] + len_kv - len_q;  // last key the row sees
            if (row_valid[r]) {
                rows_lo = min(rows_lo, kCausal ? diagonal[r] - p.window + 1 : 0);
                rows_hi = max(rows_hi, kCausal ? diagonal[r] + 1 : len_kv);
            }
        }
        if (rows_lo < rows_hi) {
            kv_lo = max(kv_lo, rows_lo);
            kv_hi = min(kv_hi, rows_hi);
        } else {
            kv_hi = kv_lo;  // no valid row: nothing to read
        }

        uint4 q[R][V];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint16_t* row = q_base + batch * p.q_strides.batch + int64_t(head_of[r]) * p.q_strides.head +
                                  int64_t(position_of[r]) * p.q_strides.row;
#pragma unroll
            for (int v = 0; v < V; ++v) {
                q[r][v] = make_uint4(0, 0, 0, 0);
                if (row_valid[r] && column(v) < T::kHeadDim) q[r][v] = *reinterpret_cast<const uint4*>(row + column(v));
            }
        }

        float row_max[R], row_sum[R], acc[R][V][T::kVec];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row_max[r] = -INFINITY;
            row_sum[r] = 0.f;
#pragma unroll
            for (int v = 0; v < V; ++v) {
#pragma unroll
                for (int e = 0; e < T::kVec; ++e) acc[r][v][e] = 0.f;
            }
        }

        const uint16_t* k_rows = k_base + batch * p.k_strides.batch + int64_t(head_kv) * p.k_strides.head;
        const uint16_t* v_rows = v_base + batch * p.v_strides.batch + int64_t(head_kv) * p.v_strides.head;
        const int steps = uniform_trip_count<T>(kv_hi > kv_lo ? (kv_hi - kv_lo + T::kKeysPerStep - 1) / T::kKeysPerStep : 0);
        auto process_step = [&](int step) {
            // Issue every load of the step before any use.
            uint4 k[U][V], val[U][V];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int key = kv_lo + step * T::kKeysPerStep + u * T::kSlices + slice;
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    k[u][v] = val[u][v] = make_uint4(0, 0, 0, 0);
                    if (key < kv_hi && column(v) < T::kHeadDim) {
                        k[u][v] = *reinterpret_cast<const uint4*>(k_rows + int64_t(key) * p.k_strides.row + column(v));
                        val[u][v] = *reinterpret_cast<const uint4*>(v_rows + int64_t(key) * p.v_strides.row + column(v));
                    }
                }
            }

            // Scores in the log2 domain; keys outside a row's view get -inf.
            float score[R][U];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int key = kv_lo + step * T::kKeysPerStep + u * T::kSlices + slice;
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const float s = Team::sum(dot<T, Numeric>(q[r], k[u]));
                    const bool visible = row_valid[r] && key < kv_hi &&
                                         (!kCausal || (key <= diagonal[r] && key > diagonal[r] - p.window));
                    score[r][u] = visible ? s * scale_log2 : -INFINITY;
                }
            }

            // Online softmax: rescale what was accumulated to the new running maximum.
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float step_max = score[r][0];
#pragma unroll
                for (int u = 1; u < U; ++u) step_max = fmaxf(step_max, score[r][u]);
                const float new_max = fmaxf(row_max[r], step_max);
                // While every key so far is masked, new_max is -inf: use 0 so no inf - inf appears.
                const float reference = new_max == -INFINITY ? 0.f : new_max;
                const float rescale = exp2f(row_max[r] - reference);
                row_max[r] = new_max;
                row_sum[r] *= rescale;
#pragma unroll
                for (int v = 0; v < V; ++v) {
#pragma unroll
                    for (int e = 0; e < T::kVec; ++e) acc[r][v][e] *= rescale;
                }
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const float prob = exp2f(score[r][u] - reference);
                    row_sum[r] += prob;
#pragma unroll
                    for (int v = 0; v < V; ++v) {
                        float x[8];
                        unpack8<Numeric>(val[u][v], x);
#pragma unroll
                        for (int e = 0; e < T::kVec; ++e) acc[r][v][e] = fmaf(prob, x[e], acc[r][v][e]);
                    }
                }
            }
        };
        // The short-keys variant has every key in one step: no loop, so the query rows
        // need no registers past their scores.
        if constexpr (T::kShortKeys) {
            if (steps > 0) process_step(0);
        } else {
            for (int step = 0; step < steps; ++step) process_step(step);
        }

        // Merge the slices' softmax states (butterfly: every slice ends with the total).
#pragma unroll
        for (int offset = T::kTeamWidth; offset < GroupWidth; offset *= 2) {
#pragma unroll
            for (int r = 0; r < R; ++r) {
                const float other_max = __shfl_xor(row_max[r], offset, GroupWidth);
                const float other_sum = __shfl_xor(row_sum[r], offset, GroupWidth);
                const float new_max = fmaxf(row_max[r], other_max);
                const float reference = new_max == -INFINITY ? 0.f : new_max;
                const float mine = exp2f(row_max[r] - reference), theirs = exp2f(other_max - reference);
                row_max[r] = new_max;
                row_sum[r] = row_sum[r] * mine + other_sum * theirs;
#pragma unroll
                for (int v = 0; v < V; ++v) {
#pragma unroll
                    for (int e = 0; e < T::kVec; ++e)
                        acc[r][v][e] = acc[r][v][e] * mine + __shfl_xor(acc[r][v][e], offset, GroupWidth) * theirs;
                }
            }
        }

        // Store: slice s writes rows r with r % kSlices == s. A row that saw no key gets zeros
        // (and, in a split, a log-sum-exp of -inf, so the combine gives it no weight).
#pragma unroll
        for (int r = 0; r < R; ++r) {
            if (!row_valid[r] || r % T::kSlices != slice) continue;
            const float inv = row_sum[r] > 0.f ? 1.f / row_sum[r] : 0.f;
            const int64_t row_index = (batch * p.heads_q + head_of[r]) * p.seqlen_q + position_of[r];
            if (plan.splits == 1) {
                uint16_t* out = static_cast<uint16_t*>(p.o) + batch * p.o_strides.batch +
                                int64_t(head_of[r]) * p.o_strides.head + int64_t(position_of[r]) * p.o_strides.row;
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    if (column(v) < T::kHeadDim) *reinterpret_cast<uint4*>(out + column(v)) = pack8<Numeric>(acc[r][v], inv);
                }
            } else {
                const int64_t slot = row_index * plan.splits + split;
                float* partial = static_cast<float*>(p.workspace) + slot * T::kHeadDim;
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    if (column(v) >= T::kHeadDim) continue;
                    float4* dst = reinterpret_cast<float4*>(partial + column(v));
                    const float* a = acc[r][v];
                    dst[0] = make_float4(a[0] * inv, a[1] * inv, a[2] * inv, a[3] * inv);
                    dst[1] = make_float4(a[4] * inv, a[5] * inv, a[6] * inv, a[7] * inv);
                }
                if (team_lane == 0) {
                    const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
                    float* lse = static_cast<float*>(p.workspace) + rows_total * plan.splits * T::kHeadDim;
                    lse[slot] = row_sum[r] > 0.f ? row_max[r] + log2f(row_sum[r]) : -INFINITY;
                }
            }
        }
    }
}

// Combines the splits of each row: weights exp2(lse_split - max) over the splits.
// One thread per 16-byte vector of output; no shuffles, so no uniformity requirement.
// (Takes the vector width as a parameter: one instantiation serves every variant of a config.)
template <class Config, int kVec>
__global__ void __launch_bounds__(256) combine_kernel(const FwdParams p, const Plan plan) {
    using Numeric = DTypeTraits<Config::dtype>;
    constexpr int kVecsPerRow = Config::head_dim / kVec;
    const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
    const float* partials = static_cast<const float*>(p.workspace);
    const float* lses = partials + rows_total * plan.splits * Config::head_dim;
    for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < rows_total * kVecsPerRow;
         index += int64_t(gridDim.x) * blockDim.x) {
        const DivMod by_column = divmod(index, kVecsPerRow);
        const DivMod by_position = divmod(by_column.quotient, p.seqlen_q);
        const DivMod by_head = divmod(by_position.quotient, p.heads_q);
        const int64_t row = by_column.quotient, batch = by_head.quotient;
        const int column = by_column.remainder * kVec, position = by_position.remainder, head = by_head.remainder;
        if (position >= (p.seqlens_q ? p.seqlens_q[batch] : p.seqlen_q)) continue;  // never written

        const float* lse = lses + row * plan.splits;
        float max_lse = -INFINITY;
        for (int s = 0; s < plan.splits; ++s) max_lse = fmaxf(max_lse, lse[s]);
        float out[kVec] = {}, total = 0.f;
        if (max_lse != -INFINITY) {
            for (int s = 0; s < plan.splits; ++s) {
                const float weight = exp2f(lse[s] - max_lse);
                if (weight == 0.f) continue;  // an empty split: its partial holds zeros anyway
                total += weight;
                const float4* src = reinterpret_cast<const float4*>(partials + (row * plan.splits + s) * Config::head_dim + column);
                const float4 a = src[0], b = src[1];
                const float x[kVec] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
                for (int e = 0; e < kVec; ++e) out[e] = fmaf(weight, x[e], out[e]);
            }
        }
        uint16_t* dst = static_cast<uint16_t*>(p.o) + batch * p.o_strides.batch + int64_t(head) * p.o_strides.head +
                        int64_t(position) * p.o_strides.row + column;
        *reinterpret_cast<uint4*>(dst) = pack8<Numeric>(out, total > 0.f ? 1.f / total : 0.f);
    }
}

// Blocks loop over work items: a few waves of resident blocks, not one block per item,
// saves block launches (measured: 2% on the headline shapes against one block per item).
inline constexpr int kBlockWaves = 4;

inline int multiprocessor_count() {
    int device = 0, count = 0;
    if (hipGetDevice(&device) != hipSuccess ||
        hipDeviceGetAttribute(&count, hipDeviceAttributeMultiprocessorCount, device) != hipSuccess)
        return 0;
    return count;
}

// Blocks of this variant the device runs at once (0 when there is no device). The per-
// multiprocessor occupancy is a property of the compiled kernel and its arch: asked once.
template <class T, class Config>
int64_t resident_blocks() {
    static std::atomic<int> per_multiprocessor{0};
    if (per_multiprocessor.load(std::memory_order_relaxed) == 0) {
        int blocks = 0;
        if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attend_kernel<T, Config>, T::kThreads, 0) != hipSuccess)
            return 0;
        per_multiprocessor.store(blocks, std::memory_order_relaxed);
    }
    return int64_t(per_multiprocessor.load(std::memory_order_relaxed)) * multiprocessor_count();
}

template <class T, class Config>
hipError_t launch_variant(const FwdParams& p, hipStream_t stream) {
    const int64_t resident = resident_blocks<T, Config>();
    if (resident == 0) return hipErrorNoDevice;
    const Plan plan = make_plan<T>(p, resident * T::kGroups);
    if (plan.splits > 1 && (p.workspace == nullptr || p.workspace_bytes < workspace_bytes(p, plan)))
        return hipErrorInvalidValue;
    const int64_t blocks = std::min((plan.items + T::kGroups - 1) / T::kGroups, resident * kBlockWaves);
    attend_kernel<T, Config><<<unsigned(blocks), T::kThreads, 0, stream>>>(p, plan);
    if (plan.splits == 1) return hipGetLastError();
    if (const hipError_t err = hipGetLastError(); err != hipSuccess) return err;
    const int64_t vectors = int64_t(p.batch) * p.heads_q * p.seqlen_q * T::kVecsPerRow;
    combine_kernel<Config, T::kVec><<<unsigned(std::min((vectors + 255) / 256, resident * kBlockWaves)), 256, 0, stream>>>(p, plan);
    return hipGetLastError();
}

// Calls fn(Traits{}) with the variant the problem needs: rows per pass, short or long keys.
template <class Config, int GroupWidth, class Fn>
auto with_variant(const FwdParams& p, Fn&& fn) {
    const int rows = rows_per_pass(p);
    if (p.seqlen_kv <= kShortKeyRange && rows <= 4) {
        if (rows == 1) return fn(Traits<Config, GroupWidth, 1, true>{});
        if (rows == 2) return fn(Traits<Config, GroupWidth, 2, true>{});
        return fn(Traits<Config, GroupWidth, 4, true>{});
    }
    if (rows == 1) return fn(Traits<Config, GroupWidth, 1, false>{});
    if (rows == 2) return fn(Traits<Config, GroupWidth, 2, false>{});
    if (rows == 4) return fn(Traits<Config, GroupWidth, 4, false>{});
    return fn(Traits<Config, GroupWidth, 8, false>{});
}

template <class Config, int GroupWidth = wave_size(Config::arch)>
hipError_t launch(const FwdParams& p, hipStream_t stream) {
    if (!params_match<Config>(p)) return hipErrorInvalidValue;
    return with_variant<Config, GroupWidth>(
        p, [&](auto traits) { return launch_variant<decltype(traits), Config>(p, stream); });
}

// Bytes of workspace launch() needs for this problem on the current device (0: none).
template <class Config, int GroupWidth = wave_size(Config::arch)>
size_t workspace_size(const FwdParams& p) {
    if (!params_match<Config>(p)) return 0;
    return with_variant<Config, GroupWidth>(p, [&](auto traits) {
        using T = decltype(traits);
        return workspace_bytes(p, make_plan<T>(p, resident_blocks<T, Config>() * T::kGroups));
    });
}

}  // namespace decode
}  // namespace fmha
