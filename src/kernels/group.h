// Cooperative-group primitives, generic over the group width: a group is kWidth consecutive
// lanes of one wavefront/warp (64 on AMD gfx9, 32 on NVIDIA; 8 or 16 also work, for tests).
#pragma once

#include <hip/hip_runtime.h>

namespace fmha {

template <int kWidth>
struct Group {
    static_assert(kWidth >= 1 && (kWidth & (kWidth - 1)) == 0, "group width must be a power of two");

    __device__ static inline float max(float x) {
        for (int offset = kWidth / 2; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor(x, offset, kWidth));
        return x;
    }
    __device__ static inline int max(int x) {
        for (int offset = kWidth / 2; offset > 0; offset /= 2) x = ::max(x, __shfl_xor(x, offset, kWidth));
        return x;
    }
    __device__ static inline float sum(float x) {
        for (int offset = kWidth / 2; offset > 0; offset /= 2) x += __shfl_xor(x, offset, kWidth);
        return x;
    }
    // The value lane src of this group holds.
    __device__ static inline float broadcast(float x, int src) { return __shfl(x, src, kWidth); }
};

// Two lanes of a wavefront at xor distance kDistance that share a value (a row of MFMA's
// transposed scores: lanes l and l ^ 32).
template <int kDistance>
struct XorPair {
    __device__ static inline float max(float x) { return fmaxf(x, __shfl_xor(x, kDistance)); }
    __device__ static inline float sum(float x) { return x + __shfl_xor(x, kDistance); }
};

// A barrier of the warp's lanes. On AMD, whose wavefronts run their lanes in lockstep, there
// is nothing to wait for (the host emulation of the warp MMAs' kernels runs each lane apart).
__device__ inline void sync_warp() {
#if defined(__HIP_PLATFORM_NVIDIA__)
    __syncwarp();
#elif defined(FMHA_EMULATED_MMA_SYNC)
    emulated_sync_warp();
#endif
}

}  // namespace fmha
