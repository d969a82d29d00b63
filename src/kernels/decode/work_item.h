// A decode work item on the device: located from its index, its query rows, and where its
// finished rows go (O, the block's shared buffer, or the split workspace).
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "fmha/params.h"
#include "kernels/common/mask.h"
#include "kernels/common/online_softmax.h"
#include "kernels/common/rows.h"
#include "kernels/common/sequence.h"
#include "kernels/common/split.h"
#include "kernels/decode/plan.h"
#include "kernels/group.h"

namespace fmha {
namespace decode {

// The largest value over the wave. Groups narrower than the wave must run the same number of
// loop trips as their neighbours, because shuffles need every lane of the wave.
template <class T>
__device__ inline int uniform_trip_count(int trips) {
    if constexpr (T::kGroupWidth < T::kWaveSize) return Group<T::kWaveSize>::max(trips);
    else return trips;
}

// One query row of a work item: its head and position, and what the mask needs of it.
struct QueryRow : MaskRow {
    int head, position;
};

// A work item, located: (batch, KV head, key split, row pass) and its sequence's lengths.
struct WorkItem {
    int64_t batch;
    int head_kv, split, pass;
    int len_q, len_kv;  // this sequence's query and key counts
    bool active;        // false past the last item (uniform over a group)
};

// kHeadsPerTile > 1 (staged tiles of several KV heads): item.head_kv is the tile's index.
template <bool kMayBePacked, int kHeadsPerTile = 1>
__device__ inline WorkItem locate(const FwdParams& p, const Plan& plan, int64_t index) {
    WorkItem item;
    item.active = index < plan.items;
    const int i = item.active ? int(index) : 0;
    const int by_split = plan.by_splits.divide(i), by_pass = plan.by_passes.divide(by_split);
    const int by_head = plan.by_kv_groups.divide(by_pass);
    item.split = i - by_split * plan.splits;
    item.pass = by_split - by_pass * plan.passes;
    // (One head a tile: p.heads_kv, equal to the divisor; reading the plan's instead made ptxas
    // spill d128's no-mask tensor-core kernels.)
    item.head_kv = by_pass - by_head * (kHeadsPerTile == 1 ? p.heads_kv : int(plan.by_kv_groups.divisor));
    item.batch = by_head;
    item.len_q = sequence_length(p.seqlens_q, packed_only<kMayBePacked>(p.cu_seqlens_q), item.batch, p.seqlen_q);
    item.len_kv = sequence_length(p.seqlens_kv, packed_only<kMayBePacked>(p.cu_seqlens_kv), item.batch, p.seqlen_kv);
    return item;
}

// Row `row` (0 .. rows_per_kv) of a work item's KV head: head row / seqlen_q of its group,
// position row % seqlen_q.
__host__ __device__ inline QueryRow query_row(const FwdParams& p, const Plan& plan, const WorkItem& item, int row) {
    QueryRow q;
    const int head_in_group = plan.by_seqlen_q.divide(row);
    q.head = item.head_kv * plan.group_heads + head_in_group;
    q.position = row - head_in_group * p.seqlen_q;
    q.valid = item.active && row < plan.rows_per_kv && q.position < item.len_q;
    q.diagonal = q.position + item.len_kv - item.len_q;
    return q;
}

// The keys that some row of the item's pass (rows pass x rows .. + rows - 1) sees, [kv_lo,
// kv_hi), empty where none does: the pass's positions run from its first row's to its last
// row's, or, across heads of the group, over every position (a superset where the run has a
// gap: its keys are masked per row), and the first and last positions bound the keys
// (KeyMask::key_range), without a row's arithmetic per row.
template <bool kMasked>
__host__ __device__ inline void pass_key_range(const FwdParams& p, const Plan& plan, const WorkItem& item, int rows, int& kv_lo, int& kv_hi) {
    const int first_row = item.pass * rows, last_row = min(first_row + rows, plan.rows_per_kv) - 1;
    const int first_head = plan.by_seqlen_q.divide(first_row), last_head = plan.by_seqlen_q.divide(last_row);
    const bool one_head = first_head == last_head;
    const int first = one_head ? first_row - first_head * p.seqlen_q : 0;
    const int last = min(one_head ? last_row - last_head * p.seqlen_q : p.seqlen_q - 1, item.len_q - 1);
    kv_lo = kv_hi = 0;
    if (item.active && first <= last) KeyMask<kMasked>::of(item.len_q, item.len_kv, p.window).key_range(first, last, kv_lo, kv_hi);
}

// The workspace slot of a row's share of splits: [row][workspace split].
__device__ inline int64_t workspace_slot(const FwdParams& p, const Plan& plan, const WorkItem& item, const QueryRow& row) {
    return query_row_index(p, item.batch, row.head, row.position) * plan.workspace_splits + plan.by_block_splits.divide(item.split);
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
        if (!kSplits<T> || plan.splits == 1) return store8_output<Config, T::kOptions>(p, item.batch, row.head, row.position, column, x, inv);
        float* dst = plan.block_splits > 1 ? block.partial(group, r)
                                           : SplitWorkspace(p, plan.workspace_splits).partials + workspace_slot(p, plan, item, row) * T::kHeadDim;
        store8_fp32(dst, column, x, inv);
    }
    // The row's log-sum-exp: to FwdParams::lse where the row is done, else its partial's
    // log2-sum-exp beside the partial.
    __device__ void store_lse(int r, const QueryRow& row, float row_max, float row_sum) const {
        if (!kSplits<T> || plan.splits == 1) return fmha::store_lse<T::kOptions>(p, item.batch, row.head, row.position, row_max, row_sum);
        float& dst = plan.block_splits > 1 ? block.lse(group, r) : SplitWorkspace(p, plan.workspace_splits).lses[workspace_slot(p, plan, item, row)];
        dst = partial_lse(row_max, row_sum);
    }
};

// Merges the consecutive splits of each item a block holds (plan.block_splits > 1): into O
// where they are all of the item's splits, else into the workspace slot of the block's share.
// The whole block calls it once its groups stored their rows; `first` is its first item.
template <class T, class Config>
__device__ void merge_block(const FwdParams& p, const Plan& plan, int64_t first, const BlockPartials<T>& block) {
    constexpr int kVecsPerRow = T::kHeadDim / 8;
    constexpr int kUnitsPerItem = T::kRows * kVecsPerRow;
    __syncthreads();
    for (int unit = threadIdx.x; unit < plan.by_block_splits.divide(T::kGroups) * kUnitsPerItem; unit += T::kThreads) {
        const int group = unit / kUnitsPerItem * plan.block_splits;  // the item's first split in the block
        const int r = unit / kVecsPerRow % T::kRows, column = unit % kVecsPerRow * 8;
        const WorkItem item = locate<T::kOptions>(p, plan, first + group);
        const QueryRow row = query_row(p, plan, item, item.pass * T::kRows + r);
        if (!row.valid) continue;
        float out[8];  // one partial at a time: shared memory answers within cycles (more spilled the options variant)
        const Merged m = merge_partials<1>(&block.lse(group, r), T::kRows, block.partial(group, r) + column,
                                        T::kRows * T::kHeadDim, plan.block_splits, out);
        const float inv = m.total > 0.f ? 1.f / m.total : 0.f;
        if (plan.workspace_splits == 1) {
            store8_output<Config, T::kOptions>(p, item.batch, row.head, row.position, column, out, inv);
            if (column == 0) store_lse<T::kOptions>(p, item.batch, row.head, row.position, m.max_lse, m.total);
        } else {
            const SplitWorkspace workspace(p, plan.workspace_splits);
            const int64_t slot = workspace_slot(p, plan, item, row);
            store8_fp32(workspace.partials + slot * T::kHeadDim, column, out, inv);
            if (column == 0) workspace.lses[slot] = partial_lse(m.max_lse, m.total);
        }
    }
    __syncthreads();  // the buffer is free for the block's next items
}

}  // namespace decode
}  // namespace fmha
