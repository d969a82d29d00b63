// HIP-on-CUDA, device side: HIP's kernel-language names that fmha's kernels use, for nvcc. Like
// HIP's own header it also compiles in host files (g++), where only __host__ and __device__ and
// the runtime API are needed (the mask rule of kernels/common/mask.h runs on the host too).
#pragma once

#include <cuda_runtime.h>

#include "hip/hip_runtime_api.h"

#ifdef __CUDACC__
// HIP's warp shuffles take no member mask; fmha calls them with every lane of the warp active.
template <class T>
__device__ inline T __shfl_xor(T value, int lane_mask, int width = warpSize) {
    return __shfl_xor_sync(0xffffffffu, value, lane_mask, width);
}
template <class T>
__device__ inline T __shfl(T value, int src_lane, int width = warpSize) {
    return __shfl_sync(0xffffffffu, value, src_lane, width);
}
#endif
