// HIP-on-CUDA, device side: HIP's kernel-language names that fmha's kernels use, for nvcc.
#pragma once

#include <cuda_runtime.h>

#include "hip/hip_runtime_api.h"

// HIP's warp shuffles take no member mask; fmha calls them with every lane of the warp active.
template <class T>
__device__ inline T __shfl_xor(T value, int lane_mask, int width = warpSize) {
    return __shfl_xor_sync(0xffffffffu, value, lane_mask, width);
}
template <class T>
__device__ inline T __shfl(T value, int src_lane, int width = warpSize) {
    return __shfl_sync(0xffffffffu, value, src_lane, width);
}
