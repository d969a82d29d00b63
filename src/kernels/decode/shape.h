// The decode family's variant shapes: block and split sizes, and the CUDA-core variants' lanes,
// vectors and keys per step (the tensor-core variant's are in tensor_core.h).
#pragma once

#include <cstdint>

#include "fmha_catalogue.h"

namespace fmha {
namespace decode {

constexpr int pow2_at_least(int x) { return x <= 1 ? 1 : 2 * pow2_at_least((x + 1) / 2); }
constexpr int pow2_at_most(int x) { return x <= 1 ? 1 : 2 * pow2_at_most(x / 2); }
constexpr int min_of(int a, int b) { return a < b ? a : b; }
constexpr int max_of(int a, int b) { return a > b ? a : b; }

// The key ranges of the variants. A one-step variant holds every key of its range at once (no
// loop): `two` up to kShortKeyRange keys (the headline's seqlen_kv = 2), `few` up to its
// Traits::kKeyRange (its FewRange, at most kMaxFewKeys: 16 for head dims 64 and 128, 8 for 256 on
// warp32, see Traits); `many` loops over steps of keys (any range).
enum class Keys { two, few, many };
inline constexpr int kShortKeyRange = 2;
inline constexpr int kMaxFewKeys = 16;
// Beside warp MMAs (where the loop runs on tensor cores) the few-keys variant comes in two narrow
// ranges, 4 and 8 keys (narrow_few_range()), each a team of lanes per work item, so that a warp
// holds the loads of 2 to 8 work items at once; they take the few rows per KV head that the
// tensor-core variant's passes of 8 rows would mostly leave empty (narrow_few_takes()). The rest
// of up to 16 keys runs on the tensor-core variant with its items staged in shared memory, except
// one row per KV head at up to the wide range's 16 keys, which the wide few-keys variant takes: a
// warp's step of the loop holds one row's few keys, where a wide team holds two work items
// (docs/decisions.md, "Decode: one-step items staged a work item ahead").
inline constexpr int kMaxNarrowFewKeys = 8;
// Whether a narrow range takes `rows` rows per KV head at seqlen_kv keys (3 to 8), in passes of 4:
// up to 4 rows; at 5-8 keys d128 only up to 2 (measured on the short-key grid; more rows take the
// staged passes, d64's 9-12 rows too: docs/decisions.md).
constexpr bool narrow_few_takes(int seqlen_kv, int rows, int head_dim) {
    return seqlen_kv <= 4 ? rows <= 4 : rows <= (head_dim <= 64 ? 4 : 2);
}
// The 8-key range computes kMinNarrowSlots to 8 key slots a lane, by the launch's seqlen_kv (the
// slots past it hold no key of any item): one straight-line copy of the step per slot count, one
// branch a launch, where 5 keys computed all 8 slots (docs/decisions.md).
inline constexpr int kMinNarrowSlots = 5;

// The narrow few-keys range that holds seqlen_kv keys (3 to kMaxNarrowFewKeys): 4 keys of two
// vectors a lane (teams of head_dim / 16 lanes, as the two-key variant's), else 8 keys of one.
constexpr int narrow_few_range(int seqlen_kv) { return seqlen_kv <= 4 ? 4 : kMaxNarrowFewKeys; }

// Where the loop runs on warp MMAs but the narrow ranges do not (head dim 256), the wide
// few-keys variant keeps few rows per KV head: it reads a row's keys once per row (more than 4
// rows in passes of 4), where the tensor-core variant's one step reads them once for up to 8
// rows, faster from 3 rows at 3 keys and from 2 rows at 6 (docs/decisions.md, "Decode: one-step
// items staged a work item ahead").
inline constexpr int kMinLoopRows = 3;
inline constexpr int kMinLoopRowsFromSixKeys = 2;

// Row tiles of 8 rows a pass of the staged tensor-core variant takes (decode/tensor_core.h): two
// for 9-16 rows per KV head, where a second pass of 8 would repeat an item's fixed cost for few
// bytes: at d64 for every key count it takes. At d128 the two tiles run at 3 blocks a
// multiprocessor (4 spilled), which costs more than the second pass once an item has more bytes:
// up to 19 rows and keys together. d256 gained only on part of that range (measured on the
// short-key grid; docs/decisions.md, "Two row tiles a pass at d128", "Fewer instructions a
// staged item").
inline constexpr int kMaxTwoTileRowsAndKeysD128 = 19;
constexpr int staged_row_tiles(int seqlen_kv, int rows, int head_dim) {
    return rows > 8 && (head_dim <= 64 || (head_dim <= 128 && rows + seqlen_kv <= kMaxTwoTileRowsAndKeysD128)) ? 2 : 1;
}

// Staged items of 16 rows with the rows as the MMAs' M (decode/staged_rows.h) instead of two
// row tiles (d64, d128) or two passes of 8 (d256): from 3 keys while rows and keys together stay
// within the limit below; past it, and at d128, the row tiles measured faster. At d256 the kernel
// computes O in two parts (docs/decisions.md, "Staged items of 16 rows with the rows as M; staged
// tiles of several KV heads", "d256 on the rows-as-M kernel").
constexpr int max_rows_as_m_rows_and_keys(int head_dim) { return head_dim <= 64 ? 20 : head_dim <= 128 ? 0 : 18; }
constexpr bool staged_rows_as_m(int seqlen_kv, int rows, int head_dim) {
    return rows > 8 && seqlen_kv >= 3 && rows + seqlen_kv <= max_rows_as_m_rows_and_keys(head_dim);
}

// KV heads one staged tile of 16 rows and 16 key slots takes (decode/staged_rows.h, rows as M):
// several where each head's rows and keys fit a share of both, so that an item's fixed cost
// serves two or four heads' bytes. Measured faster from 3 keys and 3 rows a head (2 at d256), up
// to 7 rows and 12 rows and keys together at d64, 8 at d128 and d256; fewer rows keep their
// variants. 1: the variants below decide (same entries of docs/decisions.md).
constexpr int staged_heads_per_tile(int seqlen_kv, int rows, int heads_kv, int head_dim) {
    const int min_rows = head_dim <= 128 ? 3 : 2, max_rows_and_keys = head_dim <= 64 ? 12 : 8;
    if (seqlen_kv < 3 || seqlen_kv > 8 || rows < min_rows || rows > 7 || rows + seqlen_kv > max_rows_and_keys || heads_kv < 2) return 1;
    return min_of(16 / max_of(pow2_at_least(seqlen_kv), pow2_at_least(rows)), pow2_at_least(heads_kv));
}

// The heuristic's choice of key variant for seqlen_kv keys and `rows` query rows per KV head,
// where the `few` variant takes up to few_range keys. Two keys keep the `two` variant (one key
// per lane slice, several work items a wave); past few_range, the loop. Where the loop runs on
// warp MMAs (tensor_cores), the narrow few-keys ranges instead, and the wide one for one row;
// where it does without them (tensor_loop), the loop takes many rows from 3 keys.
constexpr Keys key_variant(int seqlen_kv, int few_range, bool tensor_cores = false, int rows = 1, bool tensor_loop = false,
                           int head_dim = 128) {
    return seqlen_kv <= kShortKeyRange ? Keys::two
           : tensor_cores ? ((seqlen_kv <= kMaxNarrowFewKeys && narrow_few_takes(seqlen_kv, rows, head_dim)) ||
                                     (seqlen_kv <= few_range && rows == 1)
                                 ? Keys::few
                                 : Keys::many)
           : tensor_loop && (rows >= kMinLoopRows || (rows >= kMinLoopRowsFromSixKeys && seqlen_kv >= 6)) ? Keys::many
           : seqlen_kv <= few_range ? Keys::few
                                    : Keys::many;
}

// Block and split sizes every variant shares.
struct BlockShape {
    static constexpr int kThreads = 128;          // small blocks: finer occupancy steps at high register counts
    // Splits of at least kMinKeysPerSplit keys, at most kMaxSplits of them; for one to a few
    // items up to kMaxWideSplits of at least twice as many keys (multiples of every variant's
    // groups per block): the fastest measured for few long sequences and for short batch-1
    // steps, whose time is a warp's chain of key steps (docs/decisions.md; make_plan).
    static constexpr int kMinKeysPerSplit = 32;
    static constexpr int kMaxSplits = 128;
    static constexpr int kMaxWideSplits = 512;
    static constexpr int kMaxBlockPartialBytes = 48 * 1024;  // shared memory any launch may ask for
    // Key ranges up to this many keys split into one block's groups at most (wide blocks only,
    // MmaTraits): an item's splits then merge in shared memory, with no combine kernel.
    static constexpr int kOneBlockMaxKeys = 0;
    // Whether the variant takes FwdParams' run-time options (softcapping, ALiBi, paged KV,
    // packed batches); see WithOptions. kPaged: whether it reads K and V through a block table
    // (WithOptions, WithPages).
    static constexpr bool kOptions = false;
    static constexpr bool kPaged = false;
    // Whether the variant's warps copy their next work item into shared memory while they
    // compute one (the tensor-core variant's one-step launches, decode/tensor_core.h).
    static constexpr bool kStagesItems = false;
    // Whether staged items take 16 rows with the rows as the MMAs' M (decode/staged_rows.h), and
    // how many KV heads' items one of them holds (kRows rows and 16 / kHeadsPerTile keys each).
    static constexpr bool kRowsAsM = false;
    static constexpr int kHeadsPerTile = 1;
};

// Variant Base that also takes the run-time options, each behind a branch uniform over the
// launch. Launches that ask for none take Base itself, whose code does not change with them.
template <class Base>
struct WithOptions : Base {
    static constexpr bool kOptions = true;
    static constexpr bool kPaged = true;
};

// Variant Base that reads K and V through a block table and takes no other option: a paged
// cache's plain launches, which the options variant's per-row state in shared memory slowed by
// about a step's latency where every warp runs one short chain (docs/decisions.md).
template <class Base>
struct WithPages : Base {
    static constexpr bool kPaged = true;
};

// MaxGroupWidth: the wave size, or less (tests). KeyRange: Keys::two, the variant whose key
// range fits one step (the headline's seqlen_kv = 2), where slicing keys across teams would
// leave lanes idle: there each team is its own group, so a wave serves several work items at
// once. Keys::few: one step of up to kKeyRange keys (FewRange, or fewer where the group is too
// narrow), sliced across the group's teams, each lane holding every load of its kKeysPerSlice
// keys at once (all of them issued before any use). The narrow ranges (4 and 8, beside warp
// MMAs) are one slice: the team is the group, several work items a wave, as with two keys.
// Keys::many: the long-keys loop.

template <class Config, int MaxGroupWidth, int Rows, Keys KeyRange, int FewRange = kMaxFewKeys>
struct Traits : BlockShape {
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kWaveSize = wave_size(Config::arch);
    static constexpr int kVec = vector_bytes(Config::arch) / 2;               // elements per load
    static constexpr int kVecsPerRow = kHeadDim / kVec;
    // On warp32 the two-key variant gives each lane two vectors of a row: twice the loads in
    // flight per lane for a few more registers, measured faster (docs/decisions.md), and so does
    // the four-key range of the few-keys variant (its 4 keys x 2 vectors of K and of V are as
    // many loads as 8 keys of one). Wave64 keeps one: two would take gfx908's four-row variant
    // from 2 waves per SIMD to 1. The wider few-keys ranges have loads of several keys in
    // flight per lane and keep one (fewer registers for the rows' queries and sums).
    static constexpr bool kNarrowFew = KeyRange == Keys::few && FewRange < kMaxFewKeys;
    static constexpr int kShortVecsPerLane = kWaveSize == 32 && (KeyRange == Keys::two || (KeyRange == Keys::few && FewRange <= 4)) ? 2 : 1;
    static constexpr int kTeamWidth =
        min_of(pow2_at_least(kVecsPerRow / (KeyRange != Keys::many ? kShortVecsPerLane : 1)), MaxGroupWidth);
    static constexpr int kVecsPerLane = (kVecsPerRow + kTeamWidth - 1) / kTeamWidth;
    static constexpr int kRows = Rows;
    // Loads in flight per lane: 2 x kKeysPerSlice x kVecsPerLane vectors, as many as the
    // registers left by the rows' state (kRowVectors) allow without spills. A wave64 group has
    // twice the slices of a warp32 one, so it takes half the keys per slice (same keys per
    // step, fewer scalar registers). The few-keys variant holds 8 key vectors of K and 8 of V
    // per lane, its rows' states one at a time.
    static constexpr int kRowVectors = Rows * kVecsPerLane;
    static constexpr int kLongKeysPerSlice = kRowVectors < 4 ? 8 : kRowVectors == 4 ? 4 : kRowVectors < 8 ? 2 : 1;
    static constexpr int kFewKeysPerSlice = max_of(1, 8 / kVecsPerLane);
    static constexpr int kKeysPerSlice = KeyRange == Keys::two   ? kShortKeyRange
                                         : KeyRange == Keys::few ? kFewKeysPerSlice
                                                                 : max_of(1, kLongKeysPerSlice * 32 / kWaveSize);
    // Teams (key slices) of a group: the few-keys variant takes as many as its range of at most
    // kMaxFewKeys needs and the group width allows (one for the narrow ranges); the two-key
    // variant one (the team is the group); the long-keys variant the whole group.
    static constexpr int kSlices = KeyRange == Keys::two   ? 1
                                   : KeyRange == Keys::few ? min_of(MaxGroupWidth / kTeamWidth, pow2_at_least(FewRange / kKeysPerSlice))
                                                           : MaxGroupWidth / kTeamWidth;
    static constexpr int kGroupWidth = kTeamWidth * kSlices;
    static constexpr int kKeysPerStep = kSlices * kKeysPerSlice;
    // The keys a launch of this variant may have (seqlen_kv): one step's, or any.
    static constexpr int kKeyRange = KeyRange == Keys::many ? INT32_MAX : KeyRange == Keys::two ? kShortKeyRange : kKeysPerStep;
    static constexpr Keys kKeys = KeyRange;
    static constexpr bool kShortKeys = KeyRange != Keys::many;  // one step, no loop, no key splits
    // The 16-key few-keys range skips the work of key slots that no key fills (a count uniform
    // over the wave), at a branch around each slot's work, which keeps ptxas from overlapping
    // the slots' shuffle reductions. The narrow ranges, mostly full, compute every slot in
    // straight-line code, and widen each query row to fp32 once rather than once per key: at 8
    // keys measured 0.86 of copy with the branches, 1.01 without (docs/decisions.md).
    static constexpr bool kSkipsEmptySlots = KeyRange == Keys::few && !kNarrowFew;
    static constexpr bool kWidensQueryOnce = kNarrowFew;
    static constexpr bool kWarpMma = false;
    static constexpr int kGroups = kThreads / kGroupWidth;  // groups per block

    static_assert(kHeadDim % kVec == 0, "rows are moved in whole vectors");
    static_assert(kGroupWidth <= kWaveSize && kWaveSize % kGroupWidth == 0, "a group lives in one wave");
    static_assert(kThreads % kWaveSize == 0, "whole waves per block");
    static_assert(kMaxSplits % kGroups == 0 && kMaxWideSplits % kGroups == 0, "cross-block splits come in whole blocks");
    static_assert(KeyRange != Keys::few || kKeyRange <= kMaxFewKeys, "the few-keys range is bounded");
    static_assert(!kNarrowFew || (kSlices == 1 && kKeyRange == FewRange), "a narrow range is one team per work item");
};

// The few-keys variant's range for a kernel at this group width (the heuristic's limit).
template <class Config, int GroupWidth>
inline constexpr int kFewKeyRange = Traits<Config, GroupWidth, 1, Keys::few>::kKeyRange;

}  // namespace decode
}  // namespace fmha
