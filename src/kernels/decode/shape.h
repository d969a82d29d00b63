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
// Traits::kKeyRange (at most kMaxFewKeys: 16 for head dims 64 and 128, 8 for 256 on warp32,
// see Traits); `many` loops over steps of keys (any range).
enum class Keys { two, few, many };
inline constexpr int kShortKeyRange = 2;
inline constexpr int kMaxFewKeys = 16;

// The heuristic's choice of key variant for seqlen_kv keys, where the `few` variant takes up to
// few_range of them. Two keys keep the `two` variant (one key per lane slice, several work items
// a wave); past few_range, the loop. Where the loop runs on warp MMAs (tensor_cores), a few keys
// stay on it: measured faster there than the `few` variant (docs/decisions.md).
constexpr Keys key_variant(int seqlen_kv, int few_range, bool tensor_cores = false) {
    return seqlen_kv <= kShortKeyRange                  ? Keys::two
           : seqlen_kv <= few_range && !tensor_cores ? Keys::few
                                                       : Keys::many;
}

// Block and split sizes every variant shares.
struct BlockShape {
    static constexpr int kThreads = 128;          // small blocks: finer occupancy steps at high register counts
    // Splits of at least kMinKeysPerSplit keys, at most kMaxSplits of them (a multiple of every
    // variant's groups per block): the fastest measured for few long sequences (docs/decisions.md).
    static constexpr int kMinKeysPerSplit = 64;
    static constexpr int kMaxSplits = 128;
    static constexpr int kMaxBlockPartialBytes = 48 * 1024;  // shared memory any launch may ask for
    // Whether the variant takes FwdParams' run-time options (softcapping, ALiBi, paged KV);
    // see WithOptions.
    static constexpr bool kOptions = false;
};

// Variant Base that also takes the run-time options, each behind a branch uniform over the
// launch. Launches that ask for none take Base itself, whose code does not change with them.
template <class Base>
struct WithOptions : Base {
    static constexpr bool kOptions = true;
};

// MaxGroupWidth: the wave size, or less (tests). KeyRange: Keys::two, the variant whose key
// range fits one step (the headline's seqlen_kv = 2), where slicing keys across teams would
// leave lanes idle: there each team is its own group, so a wave serves several work items at
// once. Keys::few: one step of up to kKeyRange keys, sliced across the group's teams, each lane
// holding every load of its kKeysPerSlice keys at once (all of them issued before any use).
// Keys::many: the long-keys loop.

template <class Config, int MaxGroupWidth, int Rows, Keys KeyRange>
struct Traits : BlockShape {
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kWaveSize = wave_size(Config::arch);
    static constexpr int kVec = vector_bytes(Config::arch) / 2;               // elements per load
    static constexpr int kVecsPerRow = kHeadDim / kVec;
    // On warp32 the two-key variant gives each lane two vectors of a row: twice the loads in
    // flight per lane for a few more registers, measured faster (docs/decisions.md). Wave64
    // keeps one: two would take gfx908's four-row variant from 2 waves per SIMD to 1. The
    // few-keys variant has loads of several keys in flight per lane and keeps one (fewer
    // registers for the rows' queries and sums).
    static constexpr int kShortVecsPerLane = kWaveSize == 32 && KeyRange == Keys::two ? 2 : 1;
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
    // kMaxFewKeys needs and the group width allows; the two-key variant one (the team is the
    // group); the long-keys variant the whole group.
    static constexpr int kSlices = KeyRange == Keys::two   ? 1
                                   : KeyRange == Keys::few ? min_of(MaxGroupWidth / kTeamWidth, pow2_at_least(kMaxFewKeys / kKeysPerSlice))
                                                           : MaxGroupWidth / kTeamWidth;
    static constexpr int kGroupWidth = kTeamWidth * kSlices;
    static constexpr int kKeysPerStep = kSlices * kKeysPerSlice;
    // The keys a launch of this variant may have (seqlen_kv): one step's, or any.
    static constexpr int kKeyRange = KeyRange == Keys::many ? INT32_MAX : KeyRange == Keys::two ? kShortKeyRange : kKeysPerStep;
    static constexpr Keys kKeys = KeyRange;
    static constexpr bool kShortKeys = KeyRange != Keys::many;  // one step, no loop, no key splits
    static constexpr bool kWarpMma = false;
    static constexpr int kGroups = kThreads / kGroupWidth;  // groups per block

    static_assert(kHeadDim % kVec == 0, "rows are moved in whole vectors");
    static_assert(kGroupWidth <= kWaveSize && kWaveSize % kGroupWidth == 0, "a group lives in one wave");
    static_assert(kThreads % kWaveSize == 0, "whole waves per block");
    static_assert(kMaxSplits % kGroups == 0, "cross-block splits come in whole blocks");
    static_assert(KeyRange != Keys::few || kKeyRange <= kMaxFewKeys, "the few-keys range is bounded");
};

// The few-keys variant's range for a kernel at this group width (the heuristic's limit).
template <class Config, int GroupWidth>
inline constexpr int kFewKeyRange = Traits<Config, GroupWidth, 1, Keys::few>::kKeyRange;

}  // namespace decode
}  // namespace fmha
