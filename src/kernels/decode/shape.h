// The decode family's variant shapes: block and split sizes, and the CUDA-core variants' lanes,
// vectors and keys per step (the tensor-core variant's are in tensor_core.h).
#pragma once

#include "fmha_catalogue.h"

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
    // flight per lane for a few more registers, measured faster (docs/decisions.md). Wave64
    // keeps one: two would take gfx908's four-row variant from 2 waves per SIMD to 1.
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

}  // namespace decode
}  // namespace fmha
