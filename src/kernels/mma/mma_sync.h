// NVIDIA's warp-wide mma.sync (sm_80 on; archs whose matrix core is mma_sync or wgmma, see
// has_mma_sync()). Fragment layouts are the PTX ISA's for m16n8k16 with lane = 4 * g + t
// (g = lane / 4 "group", t = lane % 4 "thread in group"); each 32-bit register holds two
// 16-bit elements, the lower-indexed one in the low half:
//   A (16 x 16, row-major):  a0 = A[g][2t..2t+1], a1 = A[g+8][2t..], a2 = A[g][2t+8..], a3 = A[g+8][2t+8..]
//   B (16 x 8, by column):   b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g]
//   C (16 x 8, fp32):        c0, c1 = C[g][2t], C[g][2t+1];  c2, c3 = C[g+8][2t], C[g+8][2t+1]
// Other archs never instantiate these: doing so is a compile error.
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "fmha_catalogue.h"

namespace fmha {

// acc += A * B, fp16 or bf16 inputs, fp32 accumulation.
template <DType kDType>
__device__ inline void mma_16x8x16(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    if constexpr (kDType == DType::fp16) {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
            : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
#else
    static_assert(kDType != kDType, "mma.sync is an NVIDIA instruction");
#endif
}

// Transposes the 8 x 8 matrix of 16-bit elements the warp holds, one register per lane:
// lane 4 * r + t holds row r, columns 2t and 2t + 1 (movmatrix: a C fragment becomes a B one).
template <DType kDType>
__device__ inline uint32_t transpose_8x8(uint32_t x) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    uint32_t y;
    asm("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(y) : "r"(x));
    return y;
#else
    static_assert(kDType != kDType, "movmatrix is an NVIDIA instruction");
    return x;
#endif
}

}  // namespace fmha
