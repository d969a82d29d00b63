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
// Three variants, chosen at launch (with_variant):
// - short keys (seqlen_kv <= 2, the headline shapes): one step, no loop; each team of lanes is
//   a group of its own and stores each row as soon as it is done.
// - long keys on CUDA cores: inside a group, a team of kTeamWidth lanes holds one key row
//   (each lane one or more 16-byte vectors of it), and the group's kSlices teams take
//   interleaved keys, so one load instruction of the group reads kSlices consecutive key
//   rows. Each lane issues the loads of kKeysPerSlice keys of K and V before using any. Every
//   team keeps its own fp32 online softmax state; the slices are merged at the end.
// - long keys on tensor cores (archs with warp MMA): see MmaTraits.
//
// Long key ranges with few work items are split across groups (the plan below), the splits
// of an item interleaved step by step; each split writes fp32 partial outputs and
// log-sum-exps to the workspace, and a second kernel combines them.
#pragma once

#include <hip/hip_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>

#include "kernels/config.h"
#include "kernels/group.h"
#include "kernels/numeric.h"
#include "kernels/warp_mma.h"

namespace fmha {
namespace decode {

constexpr int pow2_at_least(int x) { return x <= 1 ? 1 : 2 * pow2_at_least((x + 1) / 2); }
constexpr int min_of(int a, int b) { return a < b ? a : b; }
constexpr int max_of(int a, int b) { return a > b ? a : b; }

// Launches take the ShortKeys variant up to this many keys (and 4 rows per pass).
inline constexpr int kShortKeyRange = 2;

// Block and split sizes every variant shares.
struct BlockShape {
    static constexpr int kThreads = 128;          // small blocks: finer occupancy steps at high register counts
    static constexpr int kMinKeysPerSplit = 256;  // keeps the combine cheap
    static constexpr int kMaxSplits = 128;
};

// MaxGroupWidth: the wave size, or less (tests). ShortKeys: the variant whose key range fits
// one step (the headline's seqlen_kv = 2), where slicing keys across teams would leave lanes
// idle: there each team is its own group, so a wave serves several work items at once.

template <class Config, int MaxGroupWidth, int Rows, bool ShortKeys>
struct Traits : BlockShape {
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kWaveSize = wave_size(Config::arch);
    static constexpr int kVec = vector_bytes(Config::arch) / 2;               // elements per load
    static constexpr int kVecsPerRow = kHeadDim / kVec;
    // On warp32 the short variant gives each lane two vectors of a row: twice the loads in
    // flight per lane for a few more registers (H200, config 3: 0.733 -> 0.719 ms; GQA 0.204 ->
    // 0.188 ms; four vectors gained nothing more). Wave64 keeps one: two would take gfx908's
    // four-row variant from 2 waves per SIMD to 1 (unmeasured on AMD hardware).
    static constexpr int kShortVecsPerLane = kWaveSize == 32 ? 2 : 1;
    static constexpr int kTeamWidth =
        min_of(pow2_at_least(kVecsPerRow / (ShortKeys ? kShortVecsPerLane : 1)), MaxGroupWidth);
    static constexpr int kGroupWidth = ShortKeys ? kTeamWidth : MaxGroupWidth;
    static constexpr int kVecsPerLane = (kVecsPerRow + kTeamWidth - 1) / kTeamWidth;
    static constexpr int kSlices = kGroupWidth / kTeamWidth;
    static constexpr int kRows = Rows;
    // Loads in flight per lane: 2 x kKeysPerSlice x kVecsPerLane vectors, as many as the
    // registers left by the rows' state (kRowVectors) allow without spills. A wave64 group has
    // twice the slices of a warp32 one, so it takes half the keys per slice (same keys per
    // step, fewer scalar registers).
    static constexpr int kRowVectors = Rows * kVecsPerLane;
    static constexpr int kLongKeysPerSlice = kRowVectors < 4 ? 8 : kRowVectors == 4 ? 4 : kRowVectors < 8 ? 2 : 1;
    static constexpr int kKeysPerSlice = ShortKeys ? kShortKeyRange : max_of(1, kLongKeysPerSlice * 32 / kWaveSize);
    static constexpr int kKeysPerStep = kSlices * kKeysPerSlice;
    static constexpr bool kShortKeys = ShortKeys;
    static constexpr bool kWarpMma = false;
    static constexpr int kGroups = kThreads / kGroupWidth;  // groups per block

    static_assert(kHeadDim % kVec == 0, "rows are moved in whole vectors");
    static_assert(kGroupWidth <= kWaveSize && kWaveSize % kGroupWidth == 0, "a group lives in one wave");
    static_assert(kThreads % kWaveSize == 0, "whole waves per block");
};

// How one launch divides the work; computed on the host, identical in every kernel of it.
struct Plan {
    int passes;          // row passes per (batch, KV head)
    int splits;          // key splits per (batch, KV head): split s takes steps s, s + splits, ...
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
    plan.splits = int(splits);
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

// The two parts of a split launch's workspace (layout: workspace_bytes), indexed by slot =
// row x splits + split.
struct SplitWorkspace {
    float* partials;  // [slot][head_dim]
    float* lses;      // [slot]

    __device__ SplitWorkspace(const FwdParams& p, const Plan& plan) {
        partials = static_cast<float*>(p.workspace);
        lses = partials + int64_t(p.batch) * p.heads_q * p.seqlen_q * plan.splits * p.head_dim;
    }
};

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

// One query row of a work item: its head and position, whether it exists, and the last key
// it sees (its diagonal; causal rows see the `window` keys that end there).
struct QueryRow {
    int head, position, diagonal;
    bool valid;

    template <bool kCausal>
    __device__ bool sees(int key, int window) const {
        return valid && (!kCausal || (key <= diagonal && key > diagonal - window));
    }
};

// A work item, located: (batch, KV head, key split, row pass) and its sequence's lengths.
struct WorkItem {
    int64_t batch;
    int head_kv, split, pass;
    int len_q, len_kv;  // this sequence's query and key counts
    int seqlen_q;       // positions per head in the tensors
    int rows_per_kv;    // query rows that read one KV head: heads of its group x positions
    bool active;        // false past the last item (uniform over a group)
};

__device__ inline WorkItem locate(const FwdParams& p, const Plan& plan, int64_t index) {
    WorkItem item;
    item.active = index < plan.items;
    const DivMod by_pass = divmod(item.active ? index : 0, plan.passes);
    const DivMod by_split = divmod(by_pass.quotient, plan.splits);
    const DivMod by_head = divmod(by_split.quotient, p.heads_kv);
    item.pass = by_pass.remainder;
    item.split = by_split.remainder;
    item.head_kv = by_head.remainder;
    item.batch = by_head.quotient;
    item.len_q = p.seqlens_q ? p.seqlens_q[item.batch] : p.seqlen_q;
    item.len_kv = p.seqlens_kv ? p.seqlens_kv[item.batch] : p.seqlen_kv;
    item.seqlen_q = p.seqlen_q;
    item.rows_per_kv = p.heads_q / p.heads_kv * p.seqlen_q;
    return item;
}

// Row `row` (0 .. rows_per_kv) of a work item's KV head.
__device__ inline QueryRow query_row(const WorkItem& item, int row) {
    QueryRow q;
    q.head = item.head_kv * (item.rows_per_kv / item.seqlen_q) + row / item.seqlen_q;
    q.position = row % item.seqlen_q;
    q.valid = item.active && row < item.rows_per_kv && q.position < item.len_q;
    q.diagonal = q.position + item.len_kv - item.len_q;
    return q;
}

// The keys some row of a work item sees.
template <bool kCausal>
struct VisibleKeys {
    int lo = INT32_MAX, hi = INT32_MIN;

    __device__ void add(const QueryRow& row, int len_kv, int window) {
        if (!row.valid) return;
        lo = min(lo, kCausal ? row.diagonal - window + 1 : 0);
        hi = max(hi, kCausal ? row.diagonal + 1 : len_kv);
    }
    // The item's keys that some row sees, [kv_lo, kv_hi); empty where no row is valid.
    __device__ void key_range(int len_kv, int& kv_lo, int& kv_hi) const {
        kv_lo = max(0, lo);
        kv_hi = min(len_kv, hi);
        if (kv_lo >= kv_hi) kv_lo = kv_hi = 0;
    }
};

// Steps of keys_per_step keys from kv_lo that split `split` takes: every splits-th one, so the
// splits of an item read neighbouring keys at any time (H200, long-KV 4k keys: 271 -> 250 us
// against one contiguous range per split, whose streams lie a split's length apart).
__device__ inline int split_steps(int kv_lo, int kv_hi, int keys_per_step, int split, int splits) {
    const int total = (kv_hi - kv_lo + keys_per_step - 1) / keys_per_step;
    return total > split ? (total - split + splits - 1) / splits : 0;
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

// Element 0 of row (batch, head, position) of a tensor.
template <class Element>
__device__ inline Element* row_start(Element* base, const TensorStrides& s, int64_t batch, int head, int position) {
    return base + batch * s.batch + int64_t(head) * s.head + int64_t(position) * s.row;
}

// The slot of a row's split in the workspace: [row][split].
__device__ inline int64_t workspace_slot(const FwdParams& p, const Plan& plan, const WorkItem& item, const QueryRow& row) {
    return ((item.batch * p.heads_q + row.head) * p.seqlen_q + row.position) * plan.splits + item.split;
}

// Writes eight results of a row, from head-dim `column` on, each times inv: to O, or, in a
// split launch, to the row's fp32 partial in the workspace.
template <class Config>
__device__ inline void store8(const FwdParams& p, const Plan& plan, const WorkItem& item, const QueryRow& row, int column,
                              const float (&x)[8], float inv) {
    if (plan.splits == 1) {
        uint16_t* out = row_start(static_cast<uint16_t*>(p.o), p.o_strides, item.batch, row.head, row.position);
        *reinterpret_cast<uint4*>(out + column) = pack8<DTypeTraits<Config::dtype>>(x, inv);
        return;
    }
    float4* dst = reinterpret_cast<float4*>(SplitWorkspace(p, plan).partials +
                                            workspace_slot(p, plan, item, row) * Config::head_dim + column);
    dst[0] = make_float4(x[0] * inv, x[1] * inv, x[2] * inv, x[3] * inv);
    dst[1] = make_float4(x[4] * inv, x[5] * inv, x[6] * inv, x[7] * inv);
}

// A split's log2-sum-exp of a row (after its partials), -inf where the row saw no key, so the
// combine gives that split no weight. Nothing to write without splits.
template <class Config>
__device__ inline void store_lse(const FwdParams& p, const Plan& plan, const WorkItem& item, const QueryRow& row,
                                 float row_max, float row_sum) {
    if (plan.splits == 1) return;
    SplitWorkspace(p, plan).lses[workspace_slot(p, plan, item, row)] = row_sum > 0.f ? row_max + log2f(row_sum) : -INFINITY;
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
    const float scale_log2 = p.scale * kLog2e;
    const auto* q_base = static_cast<const uint16_t*>(p.q);
    const auto* k_base = static_cast<const uint16_t*>(p.k);
    const auto* v_base = static_cast<const uint16_t*>(p.v);

    // Column of this lane's vector v (lanes past the head dimension hold zeros).
    auto column = [&](int v) { return (v * T::kTeamWidth + team_lane) * T::kVec; };

    for (int64_t first = int64_t(blockIdx.x) * T::kGroups; first < plan.items;
         first += int64_t(gridDim.x) * T::kGroups) {
        const WorkItem item = locate(p, plan, first + group_in_block);

        // This pass's rows, and the key range of the pass within its split.
        QueryRow rows[R];
        VisibleKeys<kCausal> visible;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            rows[r] = query_row(item, item.pass * R + r);
            visible.add(rows[r], item.len_kv, p.window);
        }
        int kv_lo, kv_hi;
        visible.key_range(item.len_kv, kv_lo, kv_hi);

        uint4 q[R][V];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint16_t* row = row_start(q_base, p.q_strides, item.batch, rows[r].head, rows[r].position);
#pragma unroll
            for (int v = 0; v < V; ++v) {
                q[r][v] = make_uint4(0, 0, 0, 0);
                if (rows[r].valid && column(v) < T::kHeadDim) q[r][v] = *reinterpret_cast<const uint4*>(row + column(v));
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

        // Slice s stores rows r with r % kSlices == s. A row that saw no key gets zeros.
        auto store_row = [&](int r) {
            if (!rows[r].valid || r % T::kSlices != slice) return;
            const float inv = row_sum[r] > 0.f ? 1.f / row_sum[r] : 0.f;
#pragma unroll
            for (int v = 0; v < V; ++v) {
                if (column(v) < T::kHeadDim) store8<Config>(p, plan, item, rows[r], column(v), acc[r][v], inv);
            }
            if (team_lane == 0) store_lse<Config>(p, plan, item, rows[r], row_max[r], row_sum[r]);
        };

        const uint16_t* k_rows = row_start(k_base, p.k_strides, item.batch, item.head_kv, 0);
        const uint16_t* v_rows = row_start(v_base, p.v_strides, item.batch, item.head_kv, 0);
        const int steps = uniform_trip_count<T>(split_steps(kv_lo, kv_hi, T::kKeysPerStep, item.split, plan.splits));
        auto process_step = [&](int step) {
            const int first_key = kv_lo + (item.split + step * plan.splits) * T::kKeysPerStep;
            // Issue every load of the step before any use.
            uint4 k[U][V], val[U][V];
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const int key = first_key + u * T::kSlices + slice;
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    k[u][v] = val[u][v] = make_uint4(0, 0, 0, 0);
                    if (key < kv_hi && column(v) < T::kHeadDim) {
                        k[u][v] = *reinterpret_cast<const uint4*>(k_rows + int64_t(key) * p.k_strides.row + column(v));
                        val[u][v] = *reinterpret_cast<const uint4*>(v_rows + int64_t(key) * p.v_strides.row + column(v));
                    }
                }
            }

            // Per row: scores in the log2 domain (keys outside the row's view get -inf), then
            // the online softmax, which rescales what was accumulated to the new running maximum.
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float score[U];
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const int key = first_key + u * T::kSlices + slice;
                    const float s = Team::sum(dot<T, Numeric>(q[r], k[u]));
                    score[u] = key < kv_hi && rows[r].template sees<kCausal>(key, p.window) ? s * scale_log2 : -INFINITY;
                }
                float step_max = score[0];
#pragma unroll
                for (int u = 1; u < U; ++u) step_max = fmaxf(step_max, score[u]);
                float reference;
                const float rescale = raise_max(row_max[r], step_max, reference);
                row_sum[r] *= rescale;
#pragma unroll
                for (int v = 0; v < V; ++v) {
#pragma unroll
                    for (int e = 0; e < T::kVec; ++e) acc[r][v][e] *= rescale;
                }
#pragma unroll
                for (int u = 0; u < U; ++u) {
                    const float prob = exp2f(score[u] - reference);
                    row_sum[r] += prob;
#pragma unroll
                    for (int v = 0; v < V; ++v) {
                        float x[8];
                        unpack8<Numeric>(val[u][v], x);
#pragma unroll
                        for (int e = 0; e < T::kVec; ++e) acc[r][v][e] = fmaf(prob, x[e], acc[r][v][e]);
                    }
                }
                // With every key in this one step, the row is done: storing it now frees its
                // registers for the next row.
                if constexpr (T::kShortKeys) store_row(r);
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
                float reference;
                const float mine = raise_max(row_max[r], other_max, reference);
                const float theirs = exp2f(other_max - reference);
                row_sum[r] = row_sum[r] * mine + other_sum * theirs;
#pragma unroll
                for (int v = 0; v < V; ++v) {
#pragma unroll
                    for (int e = 0; e < T::kVec; ++e)
                        acc[r][v][e] = acc[r][v][e] * mine + __shfl_xor(acc[r][v][e], offset, GroupWidth) * theirs;
                }
            }
        }

        if constexpr (!T::kShortKeys) {
#pragma unroll
            for (int r = 0; r < R; ++r) store_row(r);
        }
    }
}

// The tensor-core variant, for archs with warp MMA and key ranges longer than a step: the
// CUDA-core variant pays a shuffle reduction and conversions for every key and row, more
// instructions per byte than the memory system needs at long key ranges. Here a warp owns a
// work item and, per step of 16 keys, computes S^T = K Q^T and O^T += V^T P^T with m16n8k16
// MMAs (warp_mma.h): keys and head dims on the M side, the pass's query rows (8 per row tile)
// on N. Loads go straight from memory into fragments. The order of head dims within a dot
// product is free, so K and Q fragments are plain 16-byte vectors (lane 4g + t: keys g and
// g + 8, vectors 4i + t of the row); a V^T register pairs two keys, built from two 16-byte
// rows by one byte permute (lane 4g + t: keys 2t, 2t + 1, 2t + 8, 2t + 9, vectors g + 8j).
template <class Config, int RowTiles>
struct MmaTraits : BlockShape {
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kGroupWidth = 32;  // a warp
    static constexpr int kGroups = kThreads / kGroupWidth;
    static constexpr int kVec = vector_bytes(Config::arch) / 2;
    static constexpr int kVecsPerRow = kHeadDim / kVec;
    static constexpr int kRowTiles = RowTiles;
    static constexpr int kRows = 8 * RowTiles;  // rows per pass
    static constexpr int kKeysPerStep = 16;
    static constexpr int kKVectors = kHeadDim / 32;  // per key and lane (and per Q row)
    static constexpr int kVVectors = kHeadDim / 64;  // per key and lane
    static constexpr int kDimTiles = kHeadDim / 16;  // M tiles of O^T
    static constexpr bool kWarpMma = true;
    // One row tile fits 128 registers: 4 blocks (16 warps) per multiprocessor. Asking for it
    // measured 282 -> 270 us and 2.12 -> 1.92 ms on the long-KV cases (H200, 2026-11-22).
    static constexpr int kMinBlocks = RowTiles == 1 ? 4 : 1;

    static_assert(kVec == 8 && kHeadDim % 64 == 0, "fragments are built from 16-byte vectors");
    static_assert(wave_size(Config::arch) == kGroupWidth, "MMAs take a whole warp");
};

// Word w (0..3) of a 16-byte vector.
__device__ inline uint32_t word(const uint4& v, int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; }

template <class T, class Config>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) mma_attend_kernel(const FwdParams p, const Plan plan) {
    constexpr DType kDType = Config::dtype;
    using Numeric = DTypeTraits<kDType>;
    constexpr int RT = T::kRowTiles, KV = T::kKVectors, VV = T::kVVectors, kTiles = T::kDimTiles;
    constexpr bool kCausal = Config::mask == Mask::causal;

    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int warp_in_block = threadIdx.x / 32;
    const float scale_log2 = p.scale * kLog2e;
    const auto* q_base = static_cast<const uint16_t*>(p.q);
    const auto* k_base = static_cast<const uint16_t*>(p.k);
    const auto* v_base = static_cast<const uint16_t*>(p.v);

    for (int64_t first = int64_t(blockIdx.x) * T::kGroups; first < plan.items;
         first += int64_t(gridDim.x) * T::kGroups) {
        const WorkItem item = locate(p, plan, first + warp_in_block);
        auto row_at = [&](int r) { return query_row(item, item.pass * T::kRows + r); };

        VisibleKeys<kCausal> visible;
        for (int r = 0; r < T::kRows; ++r) visible.add(row_at(r), item.len_kv, p.window);
        int kv_lo, kv_hi;
        visible.key_range(item.len_kv, kv_lo, kv_hi);

        // Q^T fragments (B of S^T = K Q^T): row 8 rt + g, vectors 4i + t. Rows past the pass's
        // end are zeros; they compute scores nobody stores.
        uint4 q[RT][KV];
        // The rows of this lane's scores and outputs: 8 rt + 2t + e.
        QueryRow mine[RT][2];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
            const QueryRow row = row_at(8 * rt + g);
            const uint16_t* src = row_start(q_base, p.q_strides, item.batch, row.head, row.position);
#pragma unroll
            for (int i = 0; i < KV; ++i)
                q[rt][i] = row.valid ? *reinterpret_cast<const uint4*>(src + (4 * i + t) * 8) : make_uint4(0, 0, 0, 0);
            mine[rt][0] = row_at(8 * rt + 2 * t);
            mine[rt][1] = row_at(8 * rt + 2 * t + 1);
        }

        float row_max[RT][2], row_sum[RT][2], acc[RT][kTiles][4];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) row_max[rt][e] = -INFINITY, row_sum[rt][e] = 0.f;
#pragma unroll
            for (int m = 0; m < kTiles; ++m) acc[rt][m][0] = acc[rt][m][1] = acc[rt][m][2] = acc[rt][m][3] = 0.f;
        }

        const uint16_t* k_rows = row_start(k_base, p.k_strides, item.batch, item.head_kv, 0);
        const uint16_t* v_rows = row_start(v_base, p.v_strides, item.batch, item.head_kv, 0);
        const int steps = split_steps(kv_lo, kv_hi, T::kKeysPerStep, item.split, plan.splits);
        for (int step = 0; step < steps; ++step) {
            const int base = kv_lo + (item.split + step * plan.splits) * T::kKeysPerStep;
            // Every load of the step first: K keys base + g + 8h; V keys base + 2t + (s & 1) + 8 (s / 2).
            uint4 k[2][KV], v[4][VV];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int key = base + g + 8 * h;
#pragma unroll
                for (int i = 0; i < KV; ++i)
                    k[h][i] = key < kv_hi ? *reinterpret_cast<const uint4*>(k_rows + int64_t(key) * p.k_strides.row + (4 * i + t) * 8)
                                          : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const int key = base + 2 * t + (s & 1) + 8 * (s / 2);
#pragma unroll
                for (int j = 0; j < VV; ++j)
                    v[s][j] = key < kv_hi ? *reinterpret_cast<const uint4*>(v_rows + int64_t(key) * p.v_strides.row + (g + 8 * j) * 8)
                                          : make_uint4(0, 0, 0, 0);
            }

            // V^T fragments, shared by the row tiles. Tile 4j + w holds head dims
            // 8 (g + 8j) + 2w (A row g: low halves) and that + 1 (A row g + 8: high halves).
            uint32_t vt[kTiles][4];
#pragma unroll
            for (int j = 0; j < VV; ++j) {
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    const uint32_t k0 = word(v[0][j], w), k1 = word(v[1][j], w), k8 = word(v[2][j], w), k9 = word(v[3][j], w);
                    vt[4 * j + w][0] = low_halves(k0, k1);
                    vt[4 * j + w][1] = high_halves(k0, k1);
                    vt[4 * j + w][2] = low_halves(k8, k9);
                    vt[4 * j + w][3] = high_halves(k8, k9);
                }
            }

#pragma unroll
            for (int rt = 0; rt < RT; ++rt) {
                // s[2h + e]: key base + g + 8h, row 8 rt + 2t + e.
                float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int i = 0; i < KV; ++i) {
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const uint32_t a[4] = {word(k[0][i], 2 * half), word(k[1][i], 2 * half),
                                               word(k[0][i], 2 * half + 1), word(k[1][i], 2 * half + 1)};
                        const uint32_t b[2] = {word(q[rt][i], 2 * half), word(q[rt][i], 2 * half + 1)};
                        mma_16x8x16<kDType>(s, a, b);
                    }
                }

                // Online softmax per row; a row's 16 scores are spread over the 8 lanes of its t.
                float prob[4];
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float score[2];
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int key = base + g + 8 * h;
                        score[h] = key < kv_hi && mine[rt][e].template sees<kCausal>(key, p.window) ? s[2 * h + e] * scale_log2
                                                                                                     : -INFINITY;
                    }
                    float step_max = fmaxf(score[0], score[1]);
#pragma unroll
                    for (int offset = 4; offset < 32; offset *= 2) step_max = fmaxf(step_max, __shfl_xor(step_max, offset));
                    float reference;
                    const float rescale = raise_max(row_max[rt][e], step_max, reference);
                    prob[e] = exp2f(score[0] - reference);
                    prob[2 + e] = exp2f(score[1] - reference);
                    row_sum[rt][e] = row_sum[rt][e] * rescale + prob[e] + prob[2 + e];  // this lane's part
#pragma unroll
                    for (int m = 0; m < kTiles; ++m) acc[rt][m][e] *= rescale, acc[rt][m][2 + e] *= rescale;
                }

                // P^T as B: lanes hold P^T[key][row] pairs over rows; a transpose pairs them over keys.
                const uint32_t pb[2] = {
                    transpose_8x8<kDType>(pack2<Numeric>(prob[0], prob[1])),
                    transpose_8x8<kDType>(pack2<Numeric>(prob[2], prob[3]))};
#pragma unroll
                for (int m = 0; m < kTiles; ++m) mma_16x8x16<kDType>(acc[rt][m], vt[m], pb);
            }
        }

        // Store: lane 4g + t holds rows 8 rt + 2t + e, head dims 8 (g + 8j) + 2w (acc[..][4j + w][e])
        // and + 1 (acc[..][4j + w][2 + e]). A row that saw no key gets zeros.
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float sum = row_sum[rt][e];
#pragma unroll
                for (int offset = 4; offset < 32; offset *= 2) sum += __shfl_xor(sum, offset);
                if (!mine[rt][e].valid) continue;
                const float inv = sum > 0.f ? 1.f / sum : 0.f;
#pragma unroll
                for (int j = 0; j < VV; ++j) {
                    float x[8];
#pragma unroll
                    for (int w = 0; w < 4; ++w) x[2 * w] = acc[rt][4 * j + w][e], x[2 * w + 1] = acc[rt][4 * j + w][2 + e];
                    store8<Config>(p, plan, item, mine[rt][e], 8 * (g + 8 * j), x, inv);
                }
                if (g == 0) store_lse<Config>(p, plan, item, mine[rt][e], row_max[rt][e], sum);
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
    const SplitWorkspace workspace(p, plan);
    for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < rows_total * kVecsPerRow;
         index += int64_t(gridDim.x) * blockDim.x) {
        const DivMod by_column = divmod(index, kVecsPerRow);
        const DivMod by_position = divmod(by_column.quotient, p.seqlen_q);
        const DivMod by_head = divmod(by_position.quotient, p.heads_q);
        const int64_t row = by_column.quotient, batch = by_head.quotient;
        const int column = by_column.remainder * kVec, position = by_position.remainder, head = by_head.remainder;
        if (position >= (p.seqlens_q ? p.seqlens_q[batch] : p.seqlen_q)) continue;  // never written

        const float* lse = workspace.lses + row * plan.splits;
        float max_lse = -INFINITY;
        for (int s = 0; s < plan.splits; ++s) max_lse = fmaxf(max_lse, lse[s]);
        float out[kVec] = {}, total = 0.f;
        if (max_lse != -INFINITY) {
            for (int s = 0; s < plan.splits; ++s) {
                const float weight = exp2f(lse[s] - max_lse);
                if (weight == 0.f) continue;  // an empty split: its partial holds zeros anyway
                total += weight;
                const float4* src = reinterpret_cast<const float4*>(workspace.partials + (row * plan.splits + s) * Config::head_dim + column);
                const float4 a = src[0], b = src[1];
                const float x[kVec] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
                for (int e = 0; e < kVec; ++e) out[e] = fmaf(weight, x[e], out[e]);
            }
        }
        uint16_t* dst = row_start(static_cast<uint16_t*>(p.o), p.o_strides, batch, head, position) + column;
        *reinterpret_cast<uint4*>(dst) = pack8<Numeric>(out, total > 0.f ? 1.f / total : 0.f);
    }
}

// The grid for `units` units of work, `per_block` to a block. The attend kernel gets a block
// per kGroups work items, dispatched in order, so the blocks resident at any time read
// neighbouring memory (H200, config 3: 0.714 -> 0.672 ms against four waves of resident
// blocks looping over the items, whose read streams drift apart). Kernels loop over their work
// only past HIP's limit of 2^32 - 1 threads per grid.
inline unsigned grid_blocks(int64_t units, int per_block, int threads) {
    return unsigned(std::min((units + per_block - 1) / per_block, int64_t(UINT32_MAX) / threads));
}

inline int multiprocessor_count() {
    int device = 0, count = 0;
    if (hipGetDevice(&device) != hipSuccess ||
        hipDeviceGetAttribute(&count, hipDeviceAttributeMultiprocessorCount, device) != hipSuccess)
        return 0;
    return count;
}

template <class T, class Config>
constexpr auto attend_kernel_of() {
    if constexpr (T::kWarpMma) return &mma_attend_kernel<T, Config>;
    else return &attend_kernel<T, Config>;
}

// Blocks of this variant the device runs at once (0 when there is no device). The per-
// multiprocessor occupancy is a property of the compiled kernel and its arch: asked once.
template <class T, class Config>
int64_t resident_blocks() {
    static std::atomic<int> per_multiprocessor{0};
    if (per_multiprocessor.load(std::memory_order_relaxed) == 0) {
        int blocks = 0;
        if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attend_kernel_of<T, Config>(), T::kThreads, 0) != hipSuccess)
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
    attend_kernel_of<T, Config>()<<<grid_blocks(plan.items, T::kGroups, T::kThreads), T::kThreads, 0, stream>>>(p, plan);
    if (plan.splits == 1) return hipGetLastError();
    if (const hipError_t err = hipGetLastError(); err != hipSuccess) return err;
    const int64_t vectors = int64_t(p.batch) * p.heads_q * p.seqlen_q * T::kVecsPerRow;
    combine_kernel<Config, T::kVec><<<grid_blocks(vectors, 256, 256), 256, 0, stream>>>(p, plan);
    return hipGetLastError();
}

// Warp MMAs for the long-keys variant where the arch has them and whole warps are groups.
// Head dims of 256 would need more registers than a lane has for one step of K and V.
template <class Config, int GroupWidth>
inline constexpr bool kUsesWarpMma = has_warp_mma(Config::arch) && GroupWidth == wave_size(Config::arch) &&
                                     Config::head_dim % 64 == 0 && Config::head_dim <= 128;

// Calls fn(Traits{}) with the variant the problem needs: rows per pass, short or long keys,
// CUDA cores or warp MMAs.
template <class Config, int GroupWidth, class Fn>
auto with_variant(const FwdParams& p, Fn&& fn) {
    const int rows = rows_per_pass(p);
    if (p.seqlen_kv <= kShortKeyRange) {
        // More rows take passes of 4, which re-read their two K/V rows from L2: cheaper than
        // the long variants, whose key steps would hold two keys (H200, -b 30720 -h 16 -gqa 4
        // -d 64 -s 2 -s-q 4: 344 -> 194 us; -h 32 -gqa 8 -d 256 -s-q 2 -bf16: 1563 -> 906 us).
        if (rows == 1) return fn(Traits<Config, GroupWidth, 1, true>{});
        if (rows == 2) return fn(Traits<Config, GroupWidth, 2, true>{});
        return fn(Traits<Config, GroupWidth, 4, true>{});
    }
    if constexpr (kUsesWarpMma<Config, GroupWidth>) {
        if (rows <= 8) return fn(MmaTraits<Config, 1>{});
        return fn(MmaTraits<Config, 2>{});
    } else {
        if (rows == 1) return fn(Traits<Config, GroupWidth, 1, false>{});
        if (rows == 2) return fn(Traits<Config, GroupWidth, 2, false>{});
        if (rows == 4) return fn(Traits<Config, GroupWidth, 4, false>{});
        return fn(Traits<Config, GroupWidth, 8, false>{});
    }
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
