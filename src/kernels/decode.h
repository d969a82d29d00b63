// The decode family: bandwidth-bound attention for problems with few query rows per KV head
// (decode steps, tiny sequences with huge batches). K and V stream from memory straight into
// registers, once per KV head; shared memory and barriers serve only to merge key splits.
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
// of an item interleaved step by step. Each split yields an fp32 partial output and
// log-sum-exp per row. The groups of one block take consecutive splits of an item and merge
// them in shared memory; where an item has more splits than a block has groups, each block
// writes its merged partial to the workspace and a second kernel combines them.
#pragma once

#include <hip/hip_runtime.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/config.h"
#include "kernels/group.h"
#include "kernels/numeric.h"
#include "kernels/warp_mma.h"

namespace fmha {
namespace decode {

constexpr int pow2_at_least(int x) { return x <= 1 ? 1 : 2 * pow2_at_least((x + 1) / 2); }
constexpr int pow2_at_most(int x) { return x <= 1 ? 1 : 2 * pow2_at_most(x / 2); }
constexpr int min_of(int a, int b) { return a < b ? a : b; }
constexpr int max_of(int a, int b) { return a > b ? a : b; }

// Launches take the ShortKeys variant up to this many keys (and 4 rows per pass).
inline constexpr int kShortKeyRange = 2;

// Block and split sizes every variant shares.
struct BlockShape {
    static constexpr int kThreads = 128;          // small blocks: finer occupancy steps at high register counts
    // Splits of at least kMinKeysPerSplit keys, at most kMaxSplits of them (a multiple of every
    // variant's groups per block). H200, 2026-11-22, one sequence of 8 KV heads at 4k / 8k /
    // 16k / 32k keys: 30.5 / 32.2 / 36.2 / 47.7 us with splits of at least 256 keys, 18.0 /
    // 23.2 / 31.5 / 47.9 with 64 (before combine_kernel's lane teams). With the teams, 256 or
    // 512 splits measured within 2.5% of 128 (32k keys: 43.4 and 44.1 against 44.5 us), so the
    // cap stays.
    static constexpr int kMinKeysPerSplit = 64;
    static constexpr int kMaxSplits = 128;
    static constexpr int kMaxBlockPartialBytes = 48 * 1024;  // shared memory any launch may ask for
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
    static_assert(kMaxSplits % kGroups == 0, "cross-block splits come in whole blocks");
};

// How one launch divides the work; computed on the host, identical in every kernel of it.
struct Plan {
    int passes;          // row passes per (batch, KV head)
    int splits;          // key splits per (batch, KV head, pass): split s takes steps s, s + splits, ...
    int block_splits;    // consecutive splits one block merges in shared memory (1: none)
    int64_t items;       // batch x heads_kv x passes x splits, split fastest

    // Partials per row that go through the workspace and the combine kernel (1: none).
    __host__ __device__ int workspace_splits() const { return splits / block_splits; }
};

// A split launch's partials of one block in shared memory: per group, the partial outputs
// [row of the pass][head_dim] and log2-sum-exps [row of the pass].
template <class T>
struct BlockPartials {
    static constexpr size_t kBytes = size_t(T::kGroups) * T::kRows * (T::kHeadDim + 1) * sizeof(float);
    float* partials;
    float* lses;

    __device__ explicit BlockPartials(float* shared) : partials(shared), lses(shared + T::kGroups * T::kRows * T::kHeadDim) {}
    __device__ float* partial(int group, int row) const { return partials + (group * T::kRows + row) * T::kHeadDim; }
    __device__ float& lse(int group, int row) const { return lses[group * T::kRows + row]; }
};

// Whether a variant's launches may split the key range: not the short-keys one, whose keys
// are one step (its code holds no split paths).
template <class T>
inline constexpr bool kSplits = !T::kShortKeys;

// Whether a variant's blocks merge their splits in shared memory: not where the buffer would
// be too large (its splits all go to the workspace).
template <class T>
inline constexpr bool kMergesInBlock = kSplits<T> && BlockPartials<T>::kBytes <= T::kMaxBlockPartialBytes;

// The dynamic shared memory of a launch that merges splits in its blocks.
template <class T>
inline constexpr size_t kMergeSharedBytes = kMergesInBlock<T> ? BlockPartials<T>::kBytes : 0;

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
    int splits = 1;
    if (kSplits<T> && base_items < resident_groups) {
        const int64_t by_length = (p.seqlen_kv + T::kMinKeysPerSplit - 1) / T::kMinKeysPerSplit;
        splits = int(std::max<int64_t>(1, std::min<int64_t>({resident_groups / base_items, by_length, T::kMaxSplits})));
        // Blocks hold whole items' splits (fewer than a block's groups) or whole blocks of them.
        splits = splits < T::kGroups ? pow2_at_most(splits) : splits / T::kGroups * T::kGroups;
    }
    plan.splits = splits;
    plan.block_splits = kMergesInBlock<T> ? min_of(splits, T::kGroups) : 1;
    plan.items = base_items * splits;
    return plan;
}

// Workspace of a launch whose items have more splits than a block holds: fp32 partial outputs
// [row][workspace split][head_dim], then the partial log2-sum-exps [row][workspace split],
// where row = (batch x heads_q + head) x seqlen_q + position.
inline size_t workspace_bytes(const FwdParams& p, const Plan& plan) {
    if (plan.workspace_splits() == 1) return 0;
    const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_q;
    return rows * plan.workspace_splits() * (size_t(p.head_dim) + 1) * sizeof(float);
}

// The two parts of the workspace (layout: workspace_bytes), indexed by slot =
// row x workspace splits + workspace split.
struct SplitWorkspace {
    float* partials;  // [slot][head_dim]
    float* lses;      // [slot]

    __device__ SplitWorkspace(const FwdParams& p, const Plan& plan) {
        partials = static_cast<float*>(p.workspace);
        lses = partials + int64_t(p.batch) * p.heads_q * p.seqlen_q * plan.workspace_splits() * p.head_dim;
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

// A sequence's length: lengths[batch] (variable lengths), else the maximum. The lengths never
// exceed the maximum, so min() changes no value; without it the AMD compiler can turn
// `lengths ? lengths[batch] : maximum` into one load through a pointer to the kernel argument,
// which it then copies to scratch memory.
__device__ inline int sequence_length(const int* lengths, int64_t batch, int maximum) {
    return lengths ? min(lengths[batch], maximum) : maximum;
}

__device__ inline WorkItem locate(const FwdParams& p, const Plan& plan, int64_t index) {
    WorkItem item;
    item.active = index < plan.items;
    const DivMod by_split = divmod(item.active ? index : 0, plan.splits);
    const DivMod by_pass = divmod(by_split.quotient, plan.passes);
    const DivMod by_head = divmod(by_pass.quotient, p.heads_kv);
    item.split = by_split.remainder;
    item.pass = by_pass.remainder;
    item.head_kv = by_head.remainder;
    item.batch = by_head.quotient;
    item.len_q = sequence_length(p.seqlens_q, item.batch, p.seqlen_q);
    item.len_kv = sequence_length(p.seqlens_kv, item.batch, p.seqlen_kv);
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

// Eight results, each times inv, as fp32 to dst (16-byte aligned).
__device__ inline void store8_fp32(float* dst, const float (&x)[8], float inv) {
    reinterpret_cast<float4*>(dst)[0] = make_float4(x[0] * inv, x[1] * inv, x[2] * inv, x[3] * inv);
    reinterpret_cast<float4*>(dst)[1] = make_float4(x[4] * inv, x[5] * inv, x[6] * inv, x[7] * inv);
}

// Eight results of row (batch, head, position) of O, from head-dim `column` on, each times inv.
template <class Config>
__device__ inline void store8_output(const FwdParams& p, int64_t batch, int head, int position, int column,
                                     const float (&x)[8], float inv) {
    uint16_t* out = row_start(static_cast<uint16_t*>(p.o), p.o_strides, batch, head, position);
    *reinterpret_cast<uint4*>(out + column) = pack8<DTypeTraits<Config::dtype>>(x, inv);
}

// The workspace slot of a row's share of splits: [row][workspace split].
__device__ inline int64_t workspace_slot(const FwdParams& p, const Plan& plan, const WorkItem& item, const QueryRow& row) {
    return ((item.batch * p.heads_q + row.head) * p.seqlen_q + row.position) * plan.workspace_splits() +
           item.split / plan.block_splits;
}

// A partial's log2-sum-exp, -inf where its row saw no key, so that merging gives it no weight.
__device__ inline float partial_lse(float row_max, float row_sum) {
    return row_sum > 0.f ? row_max + log2f(row_sum) : -INFINITY;
}

// Where a group puts its finished rows: O itself; in a split launch its partials, to the
// block's shared buffer (merged by merge_block) or, where the variant merges none in blocks,
// to the workspace.
template <class T, class Config>
struct RowSink {
    const FwdParams& p;
    const Plan& plan;
    const WorkItem& item;
    BlockPartials<T> block;
    int group;  // in the block

    // Eight results of row r of the pass, from head-dim `column` on, each times inv.
    __device__ void store8(int r, const QueryRow& row, int column, const float (&x)[8], float inv) const {
        if (!kSplits<T> || plan.splits == 1) return store8_output<Config>(p, item.batch, row.head, row.position, column, x, inv);
        float* dst = plan.block_splits > 1 ? block.partial(group, r)
                                           : SplitWorkspace(p, plan).partials + workspace_slot(p, plan, item, row) * T::kHeadDim;
        store8_fp32(dst + column, x, inv);
    }
    // The row's log2-sum-exp, after its partials; nothing without splits.
    __device__ void store_lse(int r, const QueryRow& row, float row_max, float row_sum) const {
        if (!kSplits<T> || plan.splits == 1) return;
        float& dst = plan.block_splits > 1 ? block.lse(group, r) : SplitWorkspace(p, plan).lses[workspace_slot(p, plan, item, row)];
        dst = partial_lse(row_max, row_sum);
    }
};

// Merges n partials of a row: out = the sum of exp2(lse - max lse) x partial over 8 columns,
// the partials `stride` floats apart, their log2-sum-exps `lse_stride` apart. Returns the
// weights' sum and the max lse (the merged log2-sum-exp is max + log2(total)).
struct Merged {
    float max_lse, total;
};
__device__ inline Merged merge_partials(const float* lse, int lse_stride, const float* partial, int64_t stride, int n,
                                        float (&out)[8]) {
    Merged m{-INFINITY, 0.f};
#pragma unroll
    for (int e = 0; e < 8; ++e) out[e] = 0.f;
    for (int s = 0; s < n; ++s) m.max_lse = fmaxf(m.max_lse, lse[s * lse_stride]);
    if (m.max_lse == -INFINITY) return m;
    for (int s = 0; s < n; ++s) {
        const float weight = exp2f(lse[s * lse_stride] - m.max_lse);
        if (weight == 0.f) continue;  // a split that saw no key: its partial holds zeros anyway
        m.total += weight;
        const float4 a = reinterpret_cast<const float4*>(partial + s * stride)[0];
        const float4 b = reinterpret_cast<const float4*>(partial + s * stride)[1];
        const float x[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] = fmaf(weight, x[e], out[e]);
    }
    return m;
}

// Merges the consecutive splits of each item a block holds (plan.block_splits > 1): into O
// where they are all of the item's splits, else into the workspace slot of the block's share.
// The whole block calls it once its groups stored their rows; `first` is its first item.
template <class T, class Config>
__device__ void merge_block(const FwdParams& p, const Plan& plan, int64_t first, const BlockPartials<T>& block) {
    constexpr int kVecsPerRow = T::kHeadDim / 8;
    constexpr int kUnitsPerItem = T::kRows * kVecsPerRow;
    __syncthreads();
    for (int unit = threadIdx.x; unit < T::kGroups / plan.block_splits * kUnitsPerItem; unit += T::kThreads) {
        const int group = unit / kUnitsPerItem * plan.block_splits;  // the item's first split in the block
        const int r = unit / kVecsPerRow % T::kRows, column = unit % kVecsPerRow * 8;
        const WorkItem item = locate(p, plan, first + group);
        const QueryRow row = query_row(item, item.pass * T::kRows + r);
        if (!row.valid) continue;
        float out[8];
        const Merged m = merge_partials(&block.lse(group, r), T::kRows, block.partial(group, r) + column,
                                        T::kRows * T::kHeadDim, plan.block_splits, out);
        const float inv = m.total > 0.f ? 1.f / m.total : 0.f;
        if (plan.workspace_splits() == 1) {
            store8_output<Config>(p, item.batch, row.head, row.position, column, out, inv);
        } else {
            const SplitWorkspace workspace(p, plan);
            const int64_t slot = workspace_slot(p, plan, item, row);
            store8_fp32(workspace.partials + slot * T::kHeadDim + column, out, inv);
            if (column == 0) workspace.lses[slot] = partial_lse(m.max_lse, m.total);
        }
    }
    __syncthreads();  // the buffer is free for the block's next items
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
    extern __shared__ float4 block_shared[];  // split launches: BlockPartials
    const BlockPartials<T> block(reinterpret_cast<float*>(block_shared));

    // Column of this lane's vector v (lanes past the head dimension hold zeros).
    auto column = [&](int v) { return (v * T::kTeamWidth + team_lane) * T::kVec; };

    for (int64_t first = int64_t(blockIdx.x) * T::kGroups; first < plan.items;
         first += int64_t(gridDim.x) * T::kGroups) {
        const WorkItem item = locate(p, plan, first + group_in_block);
        const RowSink<T, Config> sink{p, plan, item, block, group_in_block};

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
                if (column(v) < T::kHeadDim) sink.store8(r, rows[r], column(v), acc[r][v], inv);
            }
            if (team_lane == 0) sink.store_lse(r, rows[r], row_max[r], row_sum[r]);
        };

        const uint16_t* k_rows = row_start(k_base, p.k_strides, item.batch, item.head_kv, 0);
        const uint16_t* v_rows = row_start(v_base, p.v_strides, item.batch, item.head_kv, 0);
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
        // need no registers past their scores. Keys past kv_hi load nothing and score -inf,
        // so an empty key range (an inactive item, a row with no key) needs no branch, and the
        // loads wait for no wave-wide trip count (H200, -b 30720 -h 32 -gqa 8 -d 128 -s 2 -s-q 1).
        if constexpr (T::kShortKeys) {
            process_step(0);
        } else {
            const int steps = uniform_trip_count<T>(split_steps(kv_lo, kv_hi, T::kKeysPerStep, item.split, plan.splits));
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
        if constexpr (kMergesInBlock<T>) {
            if (plan.block_splits > 1) merge_block<T, Config>(p, plan, first, block);
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
    static constexpr bool kShortKeys = false;
    // One row tile fits 128 registers: 4 blocks (16 warps) per multiprocessor. Asking for it
    // measured 282 -> 270 us and 2.12 -> 1.92 ms on the long-KV cases (H200, 2026-11-22).
    static constexpr int kMinBlocks = RowTiles == 1 ? 4 : 1;
    // There Q's fragments wait in shared memory, which frees 16 registers, and ptxas's schedule
    // of the key loop measured faster (H200, 2026-11-22, -b 64 -h 32 -gqa 8 -d 128 -s-q 1, two
    // loans: 244.9 -> 243.6 and 239.0 -> 238.6 us at 4k keys, 1901.4 -> 1889.3 and 1859.2 ->
    // 1848.3 at 32k). Two row tiles (registers to spare at 1 block per multiprocessor)
    // measured 0.3% slower with it (-gqa 2 at 4k keys: 84.4 -> 84.8 us).
    static constexpr bool kQueryInShared = RowTiles == 1;

    static_assert(kVec == 8 && kHeadDim % 64 == 0, "fragments are built from 16-byte vectors");
    static_assert(wave_size(Config::arch) == kGroupWidth, "MMAs take a whole warp");
};

// Word w (0..3) of a 16-byte vector.
__device__ inline uint32_t word(const uint4& v, int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; }

// A lane's Q^T fragments (B of S^T = K Q^T), [row tile][vector]: in registers or, where
// T::kQueryInShared, in the lane's own slots of shared memory, read back at every use.
template <class T>
struct QueryFragments {
    using Shared = uint4[T::kRowTiles][T::kKVectors][32];  // [row tile][vector][lane]
    uint4 registers[T::kQueryInShared ? 1 : T::kRowTiles][T::kKVectors];
    Shared& shared;
    int lane;

    __device__ QueryFragments(Shared& warp_slots, int lane_) : shared(warp_slots), lane(lane_) {}
    __device__ void set(int rt, int i, const uint4& x) {
        if constexpr (T::kQueryInShared) shared[rt][i][lane] = x;
        else registers[rt][i] = x;
    }
    __device__ uint4 get(int rt, int i) const {
        if constexpr (T::kQueryInShared) return load_shared_volatile(&shared[rt][i][lane]);
        else return registers[rt][i];
    }
};

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
    extern __shared__ float4 block_shared[];  // split launches: BlockPartials
    const BlockPartials<T> block(reinterpret_cast<float*>(block_shared));
    __shared__ typename QueryFragments<T>::Shared query_shared[T::kQueryInShared ? T::kGroups : 1];

    for (int64_t first = int64_t(blockIdx.x) * T::kGroups; first < plan.items;
         first += int64_t(gridDim.x) * T::kGroups) {
        const WorkItem item = locate(p, plan, first + warp_in_block);
        const RowSink<T, Config> sink{p, plan, item, block, warp_in_block};
        auto row_at = [&](int r) { return query_row(item, item.pass * T::kRows + r); };

        VisibleKeys<kCausal> visible;
        for (int r = 0; r < T::kRows; ++r) visible.add(row_at(r), item.len_kv, p.window);
        int kv_lo, kv_hi;
        visible.key_range(item.len_kv, kv_lo, kv_hi);

        // Q^T fragments: row 8 rt + g, vectors 4i + t. Rows past the pass's end are zeros; they
        // compute scores nobody stores.
        QueryFragments<T> q(query_shared[T::kQueryInShared ? warp_in_block : 0], lane);
        // The rows of this lane's scores and outputs: 8 rt + 2t + e.
        QueryRow mine[RT][2];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
            const QueryRow row = row_at(8 * rt + g);
            const uint16_t* src = row_start(q_base, p.q_strides, item.batch, row.head, row.position);
#pragma unroll
            for (int i = 0; i < KV; ++i)
                q.set(rt, i, row.valid ? *reinterpret_cast<const uint4*>(src + (4 * i + t) * 8) : make_uint4(0, 0, 0, 0));
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

        // Orders nothing (a lane reads back only its own slots), but ptxas schedules the key loop
        // after it differently: without it Q in shared memory measured no faster (README).
        if constexpr (T::kQueryInShared) sync_warp();
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
                    const uint4 qi = q.get(rt, i);
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const uint32_t a[4] = {word(k[0][i], 2 * half), word(k[1][i], 2 * half),
                                               word(k[0][i], 2 * half + 1), word(k[1][i], 2 * half + 1)};
                        const uint32_t b[2] = {word(qi, 2 * half), word(qi, 2 * half + 1)};
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
                    sink.store8(8 * rt + 2 * t + e, mine[rt][e], 8 * (g + 8 * j), x, inv);
                }
                if (g == 0) sink.store_lse(8 * rt + 2 * t + e, mine[rt][e], row_max[rt][e], sum);
            }
        }
        if constexpr (kMergesInBlock<T>) {
            if (plan.block_splits > 1) merge_block<T, Config>(p, plan, first, block);
        }
    }
}

// Combines each row's partials in the workspace (one per block's share of the splits). A team
// of kCombineLanes lanes takes 8 columns of a row: lane l merges partials l, l + kCombineLanes,
// ..., then the team merges its lanes' results by shuffles, so that few rows with many
// partials still spread over many lanes (H200, one sequence of 8 KV heads, 32 partials per row:
// 47.8 -> 44.5 us at 32k keys, 23.2 -> 19.8 at 8k, against one lane per 8 columns). One
// instantiation serves every variant of a config.
inline constexpr int kCombineLanes = 8;
inline constexpr int kCombineThreads = 256;  // per block

template <class Config>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const FwdParams p, const Plan plan) {
    using Team = Group<kCombineLanes>;
    constexpr int kVecsPerRow = Config::head_dim / 8;
    const int64_t rows_total = int64_t(p.batch) * p.heads_q * p.seqlen_q;
    const int64_t units = rows_total * kVecsPerRow * kCombineLanes;
    // Whole blocks take each trip: the shuffles need every lane of the wave.
    const int64_t trips_end = (units + kCombineThreads - 1) / kCombineThreads * kCombineThreads;
    const SplitWorkspace workspace(p, plan);
    const int n = plan.workspace_splits();
    for (int64_t index = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; index < trips_end;
         index += int64_t(gridDim.x) * blockDim.x) {
        const int lane = int(index % kCombineLanes);
        const DivMod by_column = divmod(min(index, units - 1) / kCombineLanes, kVecsPerRow);
        const DivMod by_position = divmod(by_column.quotient, p.seqlen_q);
        const DivMod by_head = divmod(by_position.quotient, p.heads_q);
        const int64_t row = by_column.quotient, batch = by_head.quotient;
        const int column = by_column.remainder * 8, position = by_position.remainder, head = by_head.remainder;
        // Rows past their sequence's length were never written (uniform over a team).
        const bool valid = index < units && position < sequence_length(p.seqlens_q, batch, p.seqlen_q);
        const int mine = valid && lane < n ? (n - lane + kCombineLanes - 1) / kCombineLanes : 0;
        float out[8];
        const Merged m = merge_partials(workspace.lses + row * n + lane, kCombineLanes,
                                        workspace.partials + (row * n + lane) * Config::head_dim + column,
                                        int64_t(kCombineLanes) * Config::head_dim, mine, out);
        const float max_lse = Team::max(m.max_lse);
        const float scale = m.max_lse == -INFINITY ? 0.f : exp2f(m.max_lse - max_lse);
        const float total = Team::sum(m.total * scale);
#pragma unroll
        for (int e = 0; e < 8; ++e) out[e] = Team::sum(out[e] * scale);
        if (valid && lane == 0) store8_output<Config>(p, batch, head, position, column, out, total > 0.f ? 1.f / total : 0.f);
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
// Plans are made for the occupancy of a launch that merges splits in its blocks.
template <class T, class Config>
int64_t resident_blocks() {
    static std::atomic<int> per_multiprocessor{0};
    if (per_multiprocessor.load(std::memory_order_relaxed) == 0) {
        int blocks = 0;
        if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attend_kernel_of<T, Config>(), T::kThreads,
                                                         kMergeSharedBytes<T>) != hipSuccess)
            return 0;
        per_multiprocessor.store(blocks, std::memory_order_relaxed);
    }
    return int64_t(per_multiprocessor.load(std::memory_order_relaxed)) * multiprocessor_count();
}

// The plan of variant T for this problem on the current device.
template <class T, class Config>
Plan variant_plan(const FwdParams& p) {
    return make_plan<T>(p, resident_blocks<T, Config>() * T::kGroups);
}

template <class T, class Config>
hipError_t launch_variant(const FwdParams& p, hipStream_t stream) {
    const int64_t resident = resident_blocks<T, Config>();
    if (resident == 0) return hipErrorNoDevice;
    const Plan plan = make_plan<T>(p, resident * T::kGroups);  // variant_plan(), with the device checked
    const size_t workspace = workspace_bytes(p, plan);
    if (workspace > 0 && (p.workspace == nullptr || p.workspace_bytes < workspace)) return hipErrorInvalidValue;
    const size_t shared = plan.block_splits > 1 ? kMergeSharedBytes<T> : 0;
    attend_kernel_of<T, Config>()<<<grid_blocks(plan.items, T::kGroups, T::kThreads), T::kThreads, shared, stream>>>(p, plan);
    if (workspace == 0) return hipGetLastError();
    if (const hipError_t err = hipGetLastError(); err != hipSuccess) return err;
    const int64_t lanes = int64_t(p.batch) * p.heads_q * p.seqlen_q * (Config::head_dim / 8) * kCombineLanes;
    combine_kernel<Config><<<grid_blocks(lanes, kCombineThreads, kCombineThreads), kCombineThreads, 0, stream>>>(p, plan);
    return hipGetLastError();
}

// Warp MMAs for the long-keys variant where the arch has them and whole warps are groups.
// Head dims of 256 would need more registers than a lane has for one step of K and V.
template <class Config, int GroupWidth>
inline constexpr bool kUsesWarpMma = has_mma_sync(Config::arch) && GroupWidth == wave_size(Config::arch) &&
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

// The plan launch() follows for this problem on the current device.
template <class Config, int GroupWidth = wave_size(Config::arch)>
Plan plan(const FwdParams& p) {
    return with_variant<Config, GroupWidth>(p, [&](auto traits) { return variant_plan<decltype(traits), Config>(p); });
}

// How launch() divides this problem's work on the current device, in words (fmha.exe -v).
template <class Config, int GroupWidth = wave_size(Config::arch)>
std::string describe(const FwdParams& p) {
    return with_variant<Config, GroupWidth>(p, [&](auto traits) {
        using T = decltype(traits);
        const Plan split = variant_plan<T, Config>(p);
        const std::string variant = T::kWarpMma ? "tensor-core" : T::kShortKeys ? "short-keys" : "CUDA-core long-keys";
        std::string text = variant + " variant (" + std::to_string(T::kRows) + " query row(s) a pass), " +
                           std::to_string(split.items) + " work items of " + std::to_string(T::kGroupWidth) + " lanes; ";
        if (split.splits == 1) return text + "keys not split";
        text += "keys split " + std::to_string(split.splits) + " ways per (batch, KV head, pass)";
        if (split.block_splits > 1) text += ", " + std::to_string(split.block_splits) + " merged in shared memory";
        if (split.workspace_splits() > 1)
            text += ", " + std::to_string(split.workspace_splits()) + " partials per row combined through the workspace";
        return text;
    });
}

// Bytes of workspace launch() needs for this problem on the current device (0: none).
template <class Config, int GroupWidth = wave_size(Config::arch)>
size_t workspace_size(const FwdParams& p) {
    return params_match<Config>(p) ? workspace_bytes(p, plan<Config, GroupWidth>(p)) : 0;
}

}  // namespace decode
}  // namespace fmha
