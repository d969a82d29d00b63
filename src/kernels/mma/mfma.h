// AMD CDNA's matrix fused multiply-add (MFMA, wave64: gfx908, gfx90a, gfx942): one instruction
// per 32 x 32 output block and k step of 8, 16-bit inputs, fp32 accumulators.
//
// Layouts of the 32 x 32 x 8 instructions (lane l of the wavefront, item x of a lane's four
// 16-bit operand values, register r of its 16 accumulators):
//   A (32 x 8, row i, column k):  i = l % 32,  k = 4 (l / 32) + x
//   B (8 x 32, row k, column j):  k = 4 (l / 32) + x,  j = l % 32
//   D (32 x 32, fp32):            i = 8 (r / 4) + 4 (l / 32) + r % 4,  j = l % 32
// so the accumulators r = 4q .. 4q + 3 of a lane (rows 8q + 4 (l / 32) + 0..3 of its column)
// are, packed to 16 bits, exactly its B operand of a following MFMA's k step over those rows:
// scores become probabilities without moving between lanes (docs/mmaprefill.md).
//
// Instructions: fp16 v_mfma_f32_32x32x8f16 on all three; bf16 v_mfma_f32_32x32x8bf16_1k on
// gfx90a and gfx942, and on gfx908, which lacks it, two v_mfma_f32_32x32x4bf16 per k step.
// Those take two items per lane, k = 2 (l / 32) + x: given items 2h and 2h + 1 of the step's
// operands, instruction h sums the step's k = 4 (k' / 2) + 2h + k' % 2 for its k' = 0..3, so
// the two together sum k = 0..7 once each (split_k below).
//
// The maps are constexpr functions of (lane, item or register), so a host test checks them
// (tests/unit/test_mfma_layout.cpp); the instruction wrappers exist on AMD only.
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "fmha_catalogue.h"

namespace fmha {
namespace mfma {

inline constexpr int kWaveLanes = 64;
inline constexpr int kBlock = 32;         // M = N of one instruction
inline constexpr int kK = 8;              // K of one k step
inline constexpr int kItems = 4;          // 16-bit operand values per lane and k step
inline constexpr int kAccumulators = 16;  // fp32 results per lane

// An element of a matrix: (row, column).
struct Index {
    int row, column;
};
__host__ __device__ constexpr Index a_element(int lane, int item) { return {lane % 32, 4 * (lane / 32) + item}; }
__host__ __device__ constexpr Index b_element(int lane, int item) { return {4 * (lane / 32) + item, lane % 32}; }
__host__ __device__ constexpr Index d_element(int lane, int r) { return {8 * (r / 4) + 4 * (lane / 32) + r % 4, lane % 32}; }
// The accumulator registers of D that are the B operand of a k step over D's rows 8q .. 8q + 7.
__host__ __device__ constexpr int b_register(int q, int item) { return 4 * q + item; }
// gfx908's bf16: the step's k that half-step instruction h reads as its own k' (see above).
__host__ __device__ constexpr int split_k(int h, int k_half) { return 4 * (k_half / 2) + 2 * h + k_half % 2; }

#if defined(__HIP_PLATFORM_AMD__)
using Accumulator = float __attribute__((ext_vector_type(16)));
// Four 16-bit values of a lane's A or B operand, the lowest k in the low half of the first word.
using Operand = uint32_t __attribute__((ext_vector_type(2)));

// acc += A B over one k step of 8.
template <DType kDType, Arch kArch>
__device__ inline void mma_32x32x8(Accumulator& acc, Operand a, Operand b) {
    using Halves = _Float16 __attribute__((ext_vector_type(4)));
    using Shorts = short __attribute__((ext_vector_type(4)));
    if constexpr (kDType == DType::fp16) {
        acc = __builtin_amdgcn_mfma_f32_32x32x8f16(__builtin_bit_cast(Halves, a), __builtin_bit_cast(Halves, b), acc, 0, 0, 0);
    } else if constexpr (kArch == Arch::gfx908) {
        const Shorts as = __builtin_bit_cast(Shorts, a), bs = __builtin_bit_cast(Shorts, b);
        acc = __builtin_amdgcn_mfma_f32_32x32x4bf16(as.xy, bs.xy, acc, 0, 0, 0);
        acc = __builtin_amdgcn_mfma_f32_32x32x4bf16(as.zw, bs.zw, acc, 0, 0, 0);
    } else {
        acc = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(__builtin_bit_cast(Shorts, a), __builtin_bit_cast(Shorts, b), acc, 0,
                                                       0, 0);
    }
}
#endif

}  // namespace mfma
}  // namespace fmha
