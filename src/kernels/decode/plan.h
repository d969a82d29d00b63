// How a decode launch divides its work (rows in passes, keys in splits), computed on the host,
// and the shared-memory buffer in which a block merges the splits its groups computed.
#pragma once

#include <hip/hip_runtime.h>

#include <algorithm>
#include <cstdint>

#include "fmha/params.h"
#include "kernels/common/fast_divisor.h"
#include "kernels/common/schedule.h"
#include "kernels/decode/shape.h"

namespace fmha {
namespace decode {

// How one launch divides the work; computed on the host, identical in every kernel of it.
struct Plan {
    int passes;          // row passes per (batch, KV head)
    int splits;          // key splits per (batch, KV head, pass): split s takes steps s, s + splits, ...
    int block_splits;    // consecutive splits one block merges in shared memory (1: none)
    int workspace_splits;  // partials per row that go through the workspace and the combine kernel (1: none)
    int64_t items;       // batch x KV heads (or tiles of them) x passes x splits, split fastest (below 2^31: launch_variant)
    int group_heads;     // query heads that read one KV head
    int rows_per_kv;     // their query rows: group_heads x seqlen_q
    // The divisions that locate a work item and its rows: a launch's constants, so a multiply
    // and a shift each instead of a division's chain (a batch-1 step's warps run little else).
    // by_kv_groups divides by a sequence's KV heads, or tiles of T::kHeadsPerTile of them.
    FastDivisor by_splits, by_block_splits, by_passes, by_kv_groups, by_seqlen_q;
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

// Short key ranges on wide blocks (kOneBlockMaxKeys): all of an item's splits in one block, where
// the items fill half of the resident blocks (make_plan, and takes_wide_blocks in decode.h).
template <class T>
bool fits_one_block(const FwdParams& p, int64_t items, int64_t resident_groups) {
    return p.seqlen_kv <= T::kOneBlockMaxKeys && 2 * items * T::kGroups >= resident_groups;
}

// resident_groups: how many groups of this variant the device runs at once.
template <class T>
Plan make_plan(const FwdParams& p, int64_t resident_groups) {
    Plan plan;
    plan.passes = (rows_per_kv_head(p) + T::kRows - 1) / T::kRows;
    const int kv_groups = (p.heads_kv + T::kHeadsPerTile - 1) / T::kHeadsPerTile;
    const int64_t base_items = int64_t(p.batch) * kv_groups * plan.passes;
    // When the (batch, KV head, pass) items leave resident groups idle, split the key range so
    // that one wave of groups has work; a partial second wave would idle most of the device.
    int splits = 1;
    if (kSplits<T> && base_items < resident_groups) {
        // Up to kMaxSplits splits of at least kMinKeysPerSplit keys; past that, up to kMaxWideSplits
        // of at least twice as many keys (shorter chains there gained less than the combine's
        // extra partials cost); never more than one wave of groups (docs/decisions.md).
        const auto by_length = [&](int keys) { return (int64_t(p.seqlen_kv) + keys - 1) / keys; };
        const int64_t wave = resident_groups / base_items;
        splits = int(std::max<int64_t>({1, std::min<int64_t>({wave, by_length(T::kMinKeysPerSplit), T::kMaxSplits}),
                                        std::min<int64_t>({wave, by_length(2 * T::kMinKeysPerSplit), T::kMaxWideSplits})}));
        if (fits_one_block<T>(p, base_items, resident_groups)) splits = std::min(splits, T::kGroups);
        // Blocks hold whole items' splits (fewer than a block's groups) or whole blocks of them.
        splits = splits < T::kGroups ? pow2_at_most(splits) : splits / T::kGroups * T::kGroups;
    }
    plan.splits = splits;
    plan.block_splits = kMergesInBlock<T> ? min_of(splits, T::kGroups) : 1;
    plan.workspace_splits = splits / plan.block_splits;
    plan.items = base_items * splits;
    plan.group_heads = p.heads_q / p.heads_kv;
    plan.rows_per_kv = rows_per_kv_head(p);
    plan.by_splits = FastDivisor(plan.splits);
    plan.by_block_splits = FastDivisor(plan.block_splits);
    plan.by_passes = FastDivisor(plan.passes);
    plan.by_kv_groups = FastDivisor(kv_groups);
    plan.by_seqlen_q = FastDivisor(p.seqlen_q);
    return plan;
}

// The blocks a launch of variant T takes for `plan`: one per kGroups items, or, for a staged
// variant, whose warps walk the items persistently, at most the `resident` blocks of one wave.
template <class T>
int64_t launch_blocks(const Plan& plan, int64_t resident) {
    const int64_t blocks = grid_blocks(plan.items, T::kGroups, T::kThreads);
    return T::kStagesItems ? std::min(blocks, resident) : blocks;
}

}  // namespace decode
}  // namespace fmha
