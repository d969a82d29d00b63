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
// Four variants, chosen at launch (with_variant; the key ranges in decode/shape.h):
// - short keys (seqlen_kv <= 2, the headline shapes): one step, no loop; each team of lanes is
//   a group of its own and stores each row as soon as it is done.
// - few keys (3 to 16 keys; 8 at head dim 256 on warp32): one step, no loop; the group's teams
//   take interleaved keys, each lane the loads of up to 8 keys of K and V at once; each row's
//   slices merge and it is stored as soon as it is done. Beside warp MMAs (sm_90, head dims 64
//   and 128) it takes 3 to 8 keys in ranges of 4 or 8, one team per work item, as two keys do.
// - long keys on CUDA cores: inside a group, a team of kTeamWidth lanes holds one key row
//   (each lane one or more 16-byte vectors of it), and the group's kSlices teams take
//   interleaved keys, so one load instruction of the group reads kSlices consecutive key
//   rows. Each lane issues the loads of kKeysPerSlice keys of K and V before using any. Every
//   team keeps its own fp32 online softmax state; the slices are merged at the end.
// - long keys on tensor cores (archs with mma.sync): see MmaTraits (decode/tensor_core.h); its
//   staged form takes the plain launches of up to 16 keys that the few-keys variant does not.
// Launches with run-time options (softcapping, ALiBi, paged KV) take a few-keys and a long-keys
// variant compiled with them (WithOptions), paged launches with no other option the long-keys
// one compiled with paging alone where it runs on tensor cores (WithPages); the others run code
// that has none of them.
//
// Long key ranges with few work items are split across groups (decode/plan.h), the splits
// of an item interleaved step by step. Each split yields an fp32 partial output and
// log-sum-exp per row. The groups of one block take consecutive splits of an item and merge
// them in shared memory; where an item has more splits than a block has groups, each block
// writes its merged partial to the workspace and a second kernel combines them.
#pragma once

#include <hip/hip_runtime.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "kernels/common/schedule.h"
#include "kernels/common/scoring.h"
#include "kernels/common/split.h"
#include "kernels/config.h"
#include "kernels/decode/kernel_of.h"
#include "kernels/decode/limits.h"
#include "kernels/decode/plan.h"
#include "kernels/decode/shape.h"

namespace fmha {
namespace decode {

// The dynamic shared memory of a launch: a staged variant's K/V tiles, else a split launch's merge
// buffer (where it has one).
template <class T>
constexpr size_t dynamic_shared_bytes() {
    if constexpr (T::kRowsAsM) return sizeof(RowsAsMTiles<T>) * T::kGroups;
    else if constexpr (T::kStagesItems) return sizeof(StagedRows<T>) * T::kGroups;
    else return kMergeSharedBytes<T>;
}

// Blocks of this variant the device runs at once (0 when there is no device). The per-
// multiprocessor occupancy is a property of the compiled kernel and its arch: asked once.
// Plans are made for the occupancy of a launch that merges splits in its blocks.
template <class T, class Config>
int64_t resident_blocks() {
    static std::atomic<int> per_multiprocessor{0};
    if (per_multiprocessor.load(std::memory_order_relaxed) == 0) {
#if defined(__HIP_PLATFORM_NVIDIA__)
        // Past 48 KB of shared memory in all (the tensor-core variant's Q slots at head dim 256
        // beside its merge buffer) a kernel must ask for its dynamic part.
        if (cudaFuncSetAttribute(attend_kernel_of<T, Config>(), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 int(dynamic_shared_bytes<T>())) != cudaSuccess)
            return 0;
#endif
        int blocks = 0;
        if (hipOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, attend_kernel_of<T, Config>(), T::kThreads,
                                                         dynamic_shared_bytes<T>()) != hipSuccess)
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

// Launches combine_kernel for a launch with n partials per row in p.workspace.
template <class Config>
hipError_t launch_combine(const FwdParams& p, int n, hipStream_t stream) {
    const int64_t units = int64_t(p.batch) * p.heads_q * p.seqlen_q * (Config::head_dim / 8);
    if (units > INT32_MAX) return hipErrorInvalidValue;  // split launches have few rows (decode/plan.h)
    combine_kernel<Config><<<grid_blocks(units * kCombineLanes, kCombineThreads, kCombineThreads), kCombineThreads, 0, stream>>>(
        p, n, FastDivisor(p.seqlen_q), FastDivisor(p.heads_q));
    return hipGetLastError();
}

template <class T, class Config>
hipError_t launch_variant(const FwdParams& p, hipStream_t stream) {
    const int64_t resident = resident_blocks<T, Config>();
    if (resident == 0) return hipErrorNoDevice;
    const Plan plan = make_plan<T>(p, resident * T::kGroups);  // variant_plan(), with the device checked
    if (plan.items > INT32_MAX) return hipErrorInvalidValue;  // locate()'s divisions take 31 bits (O would not fit memory)
    const size_t workspace = workspace_bytes(p, plan.workspace_splits);
    if (workspace > 0 && (p.workspace == nullptr || p.workspace_bytes < workspace)) return hipErrorInvalidValue;
    const size_t shared = T::kStagesItems || plan.block_splits > 1 ? dynamic_shared_bytes<T>() : 0;
    attend_kernel_of<T, Config>()<<<unsigned(launch_blocks<T>(plan, resident)), T::kThreads, shared, stream>>>(p, plan);
    if (workspace == 0) return hipGetLastError();
    if (const hipError_t err = hipGetLastError(); err != hipSuccess) return err;
    return launch_combine<Config>(p, plan.workspace_splits, stream);
}

// Head dims with blocks of kWideWarps (decode/tensor_core.h): not 256, whose lanes take up to 255
// registers, too many for 16 warps a block.
template <class Config>
inline constexpr bool kHasWideBlocks = Config::head_dim <= 128;

// Whether a long-keys launch on warp MMAs takes wide blocks: where each of its blocks holds the
// splits of one item (no workspace up to kWideWarps of them, and ragged lengths idle no warp of a
// block) and its blocks still reach nearly every multiprocessor, or, where a block holds all of
// an item's splits (short key ranges, kOneBlockMaxKeys: no combine kernel), half of the resident
// blocks. Fewer items spread wider in blocks of four: batch 1 x 1k keys, 16 wide blocks,
// measured 1.5x the time of 64 small ones; 48 items of 1k keys in one block each, 1.03-1.18x
// (docs/decisions.md).
template <class Config>
bool takes_wide_blocks(const FwdParams& p) {
    using Wide = MmaTraits<Config, 1, false, kWideWarps>;
    const int64_t resident = resident_blocks<Wide, Config>();
    if (resident == 0) return false;
    const Plan plan = make_plan<Wide>(p, resident * Wide::kGroups);
    const int64_t blocks = plan.items / kWideWarps;
    const bool one_block_an_item = plan.splits == kWideWarps && fits_one_block<Wide>(p, blocks, resident * Wide::kGroups);
    return plan.splits >= kWideWarps && (one_block_an_item || 8 * blocks >= 7 * int64_t(multiprocessor_count()));
}

// Warp MMAs for the long-keys variant where the arch has them and whole warps are groups.
template <class Config, int GroupWidth>
inline constexpr bool kUsesWarpMma = has_mma_sync(Config::arch) && GroupWidth == wave_size(Config::arch) &&
                                     Config::head_dim % 64 == 0;
// Beside them, the narrow few-keys ranges (decode/shape.h), whose teams of at most 16 lanes
// hold a row of up to 128 columns in two vectors a lane.
template <class Config, int GroupWidth>
inline constexpr bool kNarrowFewKeys = kUsesWarpMma<Config, GroupWidth> && Config::head_dim <= 128;
// Eight rows a pass of the long-keys variant take more than the 256 VGPRs of a lane; CDNA
// keeps the rest in AGPRs, RDNA3 (AMD's wave32) has none and would spill to scratch: there more
// rows take passes of four.
template <class Config>
inline constexpr int kMaxLongRows = kArchFacts[static_cast<int>(Config::arch)].platform == Platform::amd &&
                                    wave_size(Config::arch) == 32 ? 4 : 8;

// Calls fn(Traits{}) with the few-keys variant of range FewRange for `rows` rows a pass (more
// rows take passes of 4).
template <class Config, int GroupWidth, int FewRange, class Fn>
auto with_few_keys(int rows, Fn&& fn) {
    if (rows == 1) return fn(Traits<Config, GroupWidth, 1, Keys::few, FewRange>{});
    if (rows == 2) return fn(Traits<Config, GroupWidth, 2, Keys::few, FewRange>{});
    return fn(Traits<Config, GroupWidth, 4, Keys::few, FewRange>{});
}

// Calls fn(Traits{}) with the variant the problem needs: rows per pass, the key range (one step
// of two or of a few keys, or the loop: key_variant() in decode/shape.h), CUDA cores or warp MMAs.
template <class Config, int GroupWidth, class Fn>
auto with_variant(const FwdParams& p, Fn&& fn) {
    const int rows = rows_per_pass(p);
    const bool options = has_run_time_options(p);
    // (The options variant keeps its few-keys variant at head dim 256: not measured there.)
    const Keys keys = key_variant(p.seqlen_kv, kFewKeyRange<Config, GroupWidth>, kNarrowFewKeys<Config, GroupWidth> && !options,
                                  rows_per_kv_head(p), kUsesWarpMma<Config, GroupWidth> && !options, Config::head_dim);
    if (options) {
        // One variant per key range instead of one per row count keeps the build time: more
        // rows than a pass holds take more passes. The few-keys variant serves two keys too.
        if (keys != Keys::many) return fn(WithOptions<Traits<Config, GroupWidth, 4, Keys::few>>{});
        if constexpr (kUsesWarpMma<Config, GroupWidth>) {
            if (pages_only(p)) {
                if constexpr (kHasWideBlocks<Config>) {
                    if (takes_wide_blocks<Config>(p)) return fn(WithPages<MmaTraits<Config, 1, false, kWideWarps>>{});
                }
                return fn(WithPages<MmaTraits<Config, 1>>{});
            }
            return fn(WithOptions<MmaTraits<Config, 1>>{});
        } else {
            return fn(WithOptions<Traits<Config, GroupWidth, 4, Keys::many>>{});
        }
    }
    if constexpr (kUsesWarpMma<Config, GroupWidth>) {
        switch (staged_heads_per_tile(p.seqlen_kv, rows_per_kv_head(p), p.heads_kv, Config::head_dim)) {
        case 4: return fn(MmaTraits<Config, 2, true, 4, 4>{});
        case 2: return fn(MmaTraits<Config, 2, true, 4, 2>{});
        }
    }
    if (keys == Keys::two) {
        // More rows take passes of 4, which re-read their two K/V rows from L2: cheaper than
        // the long variants, whose key steps would hold two keys (docs/decisions.md).
        if (rows == 1) return fn(Traits<Config, GroupWidth, 1, Keys::two>{});
        if (rows == 2) return fn(Traits<Config, GroupWidth, 2, Keys::two>{});
        return fn(Traits<Config, GroupWidth, 4, Keys::two>{});
    }
    if (keys == Keys::few) {
        // Beside warp MMAs the narrow ranges, one team per work item, and one row past them
        // (decode/shape.h).
        if constexpr (kNarrowFewKeys<Config, GroupWidth>) {
            if (p.seqlen_kv > kMaxNarrowFewKeys) return fn(Traits<Config, GroupWidth, 1, Keys::few>{});
            if (narrow_few_range(p.seqlen_kv) == 4) return with_few_keys<Config, GroupWidth, 4>(rows, fn);
            return with_few_keys<Config, GroupWidth, kMaxNarrowFewKeys>(rows, fn);
        } else {
            return with_few_keys<Config, GroupWidth, kMaxFewKeys>(rows, fn);
        }
    }
    if constexpr (kUsesWarpMma<Config, GroupWidth>) {
        // Passes of 8 rows; where every key fits one step, the warps stage their next items (in
        // passes of 16 rows for more rows: staged_rows_as_m(), staged_row_tiles()).
        if (p.seqlen_kv <= MmaTraits<Config, 1>::kKeysPerStep) {
            if constexpr (max_rows_as_m_rows_and_keys(Config::head_dim) > 0) {
                if (staged_rows_as_m(p.seqlen_kv, rows_per_kv_head(p), Config::head_dim)) return fn(MmaTraits<Config, 2, true, 4, 1, true>{});
            }
            if constexpr (Config::head_dim <= 128) {
                if (staged_row_tiles(p.seqlen_kv, rows_per_kv_head(p), Config::head_dim) == 2) return fn(MmaTraits<Config, 2, true>{});
            }
            return fn(MmaTraits<Config, 1, true>{});
        }
        if constexpr (kHasWideBlocks<Config>) {
            if (takes_wide_blocks<Config>(p)) return fn(MmaTraits<Config, 1, false, kWideWarps>{});
        }
        return fn(MmaTraits<Config, 1>{});
    } else {
        if (rows == 1) return fn(Traits<Config, GroupWidth, 1, Keys::many>{});
        if (rows == 2) return fn(Traits<Config, GroupWidth, 2, Keys::many>{});
        if constexpr (kMaxLongRows<Config> == 8) {
            if (rows == 8) return fn(Traits<Config, GroupWidth, 8, Keys::many>{});
        }
        return fn(Traits<Config, GroupWidth, 4, Keys::many>{});
    }
}

template <class Config, int GroupWidth = wave_size(Config::arch)>
hipError_t launch(const FwdParams& p, hipStream_t stream) {
    if (!params_match<Config>(p, Family::decode)) return hipErrorInvalidValue;
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
        const std::string variant = T::kWarpMma                 ? (T::kStagesItems ? "tensor-core staged one-step" : "tensor-core")
                                    : !T::kShortKeys            ? "CUDA-core long-keys"
                                    : T::kKeys == Keys::two       ? "short-keys"
                                                                : "few-keys (up to " + std::to_string(T::kKeyRange) + ")";
        const std::string heads = T::kHeadsPerTile > 1 ? std::to_string(T::kHeadsPerTile) + " KV heads a tile of " : T::kRowsAsM ? "rows as M, " : "";
        std::string text = variant + (T::kOptions ? " variant with run-time options (" : T::kPaged ? " variant with paged KV (" : " variant (") + heads + std::to_string(T::kRows) + " query row(s) a pass), " +
                           std::to_string(split.items) + " work items of " + std::to_string(T::kGroupWidth) + " lanes" +
                           (T::kThreads > BlockShape::kThreads ? " in blocks of " + std::to_string(T::kGroups) : "") + "; ";
        if (split.splits == 1) return text + "keys not split";
        text += "keys split " + std::to_string(split.splits) + " ways per (batch, KV head, pass)";
        if (split.block_splits > 1) text += ", " + std::to_string(split.block_splits) + " merged in shared memory";
        if (split.workspace_splits > 1)
            text += ", " + std::to_string(split.workspace_splits) + " partials per row combined through the workspace";
        return text;
    });
}

// Bytes of workspace launch() needs for this problem on the current device (0: none).
template <class Config, int GroupWidth = wave_size(Config::arch)>
size_t workspace_size(const FwdParams& p) {
    return params_match<Config>(p, Family::decode) ? workspace_bytes(p, plan<Config, GroupWidth>(p).workspace_splits) : 0;
}

}  // namespace decode
}  // namespace fmha
