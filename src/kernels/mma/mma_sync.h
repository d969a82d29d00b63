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
#elif defined(FMHA_EMULATED_MMA_SYNC)  // tests/emulation: the documented layouts on the host
    emulated_mma_16x8x16<kDType>(acc, a, b);
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
#elif defined(FMHA_EMULATED_MMA_SYNC)
    return emulated_transpose_8x8(x);
#else
    static_assert(kDType != kDType, "movmatrix is an NVIDIA instruction");
    return x;
#endif
}

// Four 8 x 8 matrices of 16-bit elements from shared memory (ldmatrix .x4): lane l gives the
// address of row l % 8 of matrix l / 8; register j receives matrix j with lane 4 * r + t holding
// row r, columns 2t and 2t + 1, or, kTransposed, column r, rows 2t and 2t + 1. So a row-major
// tile read with kTransposed lands in the operand layout of its transpose.
template <bool kTransposed>
__device__ inline void load_matrices_x4(uint32_t (&r)[4], const void* row) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    if constexpr (kTransposed)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(address));
#elif defined(FMHA_EMULATED_MMA_SYNC)
    emulated_load_matrices_x4<kTransposed>(r, row);
#else
    static_assert(kTransposed != kTransposed, "ldmatrix is an NVIDIA instruction");
#endif
}

// The inverse of load_matrices_x4<false> (stmatrix .x4, sm_90 on): register j of lane 4 * r + t,
// row r, columns 2t and 2t + 1 of matrix j, goes to shared memory, lane l giving the address of
// row l % 8 of matrix l / 8. So C fragments, packed to 16 bits, leave as rows.
template <DType kDType>
__device__ inline void store_matrices_x4(const uint32_t (&r)[4], void* row) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};"
                 :: "r"(address), "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3]) : "memory");
#elif defined(FMHA_EMULATED_MMA_SYNC)
    emulated_store_matrices_x4(r, row);
#else
    static_assert(kDType != kDType, "stmatrix is an NVIDIA instruction");
#endif
}

// Operands of m16n8k16 from a row-major shared-memory matrix M (16-bit elements, `stride`
// elements a row), for the 16 x 16 block at (row0, col0):
//   A = the block                        load_a<false>      A = its transpose           load_a<true>
//   B of two n tiles, B[k][n] = M[n][k]  load_b_pair<false> B[k][n] = M[k][n]           load_b_pair<true>
// (B: registers 0, 1 are the first n tile's b0, b1; registers 2, 3 the second's.)
template <bool kTransposed>
__device__ inline void load_a(uint32_t (&a)[4], const uint16_t* m, int stride, int row0, int col0, int lane) {
    const int j = lane / 8, r = lane % 8;
    const int row = kTransposed ? row0 + r + 8 * (j / 2) : row0 + r + 8 * (j % 2);
    const int col = kTransposed ? col0 + 8 * (j % 2) : col0 + 8 * (j / 2);
    load_matrices_x4<kTransposed>(a, m + row * stride + col);
}
template <bool kTransposed>
__device__ inline void load_b_pair(uint32_t (&b)[4], const uint16_t* m, int stride, int row0, int col0, int lane) {
    const int j = lane / 8, r = lane % 8;
    const int row = kTransposed ? row0 + r + 8 * (j % 2) : row0 + r + 8 * (j / 2);
    const int col = kTransposed ? col0 + 8 * (j / 2) : col0 + 8 * (j % 2);
    load_matrices_x4<kTransposed>(b, m + row * stride + col);
}

// acc[2 i], acc[2 i + 1] += A * (the two n tiles of b).
template <DType kDType>
__device__ inline void mma_16x16x16(float (&acc0)[4], float (&acc1)[4], const uint32_t (&a)[4], const uint32_t (&b)[4]) {
    const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
    mma_16x8x16<kDType>(acc0, a, b0);
    mma_16x8x16<kDType>(acc1, a, b1);
}

}  // namespace fmha
