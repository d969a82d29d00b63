// The backward family's tile sizes and shared-memory layout, per head_dim: one place for both.
#pragma once

#include "kernels/config.h"

namespace fmha {
namespace mmabwd {

template <class Config>
struct Tiles {
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kWarps = 4;
    static constexpr int kThreads = 32 * kWarps;
    // A block owns 16 keys per warp (one mma M tile): the warp keeps their dK and dV rows in
    // registers for the whole loop (2 x 16 x head_dim fp32: 64 registers a lane at d128).
    static constexpr int kKeys = 16 * kWarps;
    // Query rows per step: the step's scores and dP (each kQueries / 2 registers a lane) must fit
    // beside dK and dV, which leave less room at d128.
    static constexpr int kQueries = kHeadDim <= 64 ? 64 : 32;
    // dQ of a step: its 16-row m tiles, each split over the warps by columns.
    static constexpr int kQueryTiles = kQueries / 16;
    static constexpr int kDqColumns = kHeadDim * kQueryTiles / kWarps;
    static_assert(kHeadDim % 64 == 0 && kDqColumns % 16 == 0, "generator/catalogue.py: mmabwd's head dims");

    // 16-bit rows padded by 16 bytes: the 8 rows one ldmatrix reads fall in distinct banks.
    static constexpr int kRow = kHeadDim + 8;    // K, V, Q, dO rows
    static constexpr int kDsRow = kQueries + 8;  // dS^T rows (one per key)
    // Two stages of a step's Q, dO, LSE and D: the next step's copies fly during this one.
    static constexpr int kStages = 2;
    static constexpr int kKOffset = 0;
    static constexpr int kVOffset = kKOffset + kKeys * kRow * 2;
    static constexpr int kQOffset = kVOffset + kKeys * kRow * 2;            // [kStages][kQueries][kRow]
    static constexpr int kDoOffset = kQOffset + kStages * kQueries * kRow * 2;  // likewise
    static constexpr int kDsOffset = kDoOffset + kStages * kQueries * kRow * 2;
    static constexpr int kLseOffset = kDsOffset + kKeys * kDsRow * 2;      // [kStages][kQueries] fp32
    static constexpr int kDOffset = kLseOffset + kStages * kQueries * 4;
    static constexpr int kSharedBytes = kDOffset + kStages * kQueries * 4;
};

}  // namespace mmabwd
}  // namespace fmha
