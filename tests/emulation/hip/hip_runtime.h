// The HIP subset that kernels/mmaprefill/mfma_kernel.h uses, on the host, for
// tests/emulation/mfma_prefill.cpp: each lane of a block is a std::thread (threadIdx is
// thread-local), __shared__ is static, __syncthreads a barrier of the block, and the wave's
// collectives (shuffles, MFMA) exchange values through per-wave slots between two barriers of
// the wave. MFMA is computed from the documented layouts (kernels/mma/mfma.h states them; the
// hardware's are taken as given here, as its unit test takes them): what this checks is the
// main loop's use of them, its LDS staging, masks, softmax and stores. Needs Clang (vector
// types, _Float16 on x86: Clang 15 or later) and C++20 (<barrier>).
#pragma once

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>

#define __HIP_PLATFORM_AMD__ 1
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __launch_bounds__(...)

struct dim3 {
    unsigned x = 0, y = 0, z = 0;
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 gridDim;

struct uint4 {
    uint32_t x, y, z, w;
};
struct uint2 {
    uint32_t x, y;
};
struct float2 {
    float x, y;
};
struct float4 {
    float x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
inline uint2 make_uint2(uint32_t x, uint32_t y) { return {x, y}; }
inline float2 make_float2(float x, float y) { return {x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }

using __half = _Float16;
struct __half2 {
    _Float16 x, y;
};
inline float2 __half22float2(__half2 h) { return {float(h.x), float(h.y)}; }
inline float __half2float(__half h) { return float(h); }
inline __half __ushort_as_half(uint16_t bits) { return __builtin_bit_cast(__half, bits); }
inline uint16_t __half_as_ushort(__half h) { return __builtin_bit_cast(uint16_t, h); }
inline __half __float2half_rn(float x) { return _Float16(x); }
inline float __uint_as_float(uint32_t u) { return __builtin_bit_cast(float, u); }
inline uint32_t __float_as_uint(float f) { return __builtin_bit_cast(uint32_t, f); }
inline uint32_t __byte_perm(uint32_t a, uint32_t b, uint32_t selector) {
    const uint64_t bytes = uint64_t(b) << 32 | a;
    uint32_t result = 0;
    for (int i = 0; i < 4; ++i) result |= uint32_t(bytes >> (8 * ((selector >> (4 * i)) & 7)) & 0xff) << (8 * i);
    return result;
}
inline float __log2f(float x) { return std::log2(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline int min(int a, int b) { return std::min(a, b); }
inline int max(int a, int b) { return std::max(a, b); }
inline int __ffs(int x) { return __builtin_ffs(x); }  // 1 + the lowest set bit's index, 0 for 0

// The block being run: its barrier, and per wave a barrier and the slots of its exchanges.
// Shuffles take waves of `lanes` (64, or RDNA's 32: then up to 8 waves; MFMA only at 64).
struct EmulatedBlock {
    static constexpr int kWaves = 4, kLanes = 64;
    std::barrier<>* block;
    std::barrier<>* wave[2 * kWaves];
    float values[kWaves][kLanes];
    uint64_t a[kWaves][kLanes], b[kWaves][kLanes];
    int lanes = kLanes;
};
inline EmulatedBlock* emulated_block;

inline void __syncthreads() { emulated_block->block->arrive_and_wait(); }

// Every lane of the wave publishes x, then reads lane `source(lane)`'s.
template <class Source>
inline float wave_exchange(float x, Source source) {
    const int lanes = emulated_block->lanes, w = threadIdx.x / lanes, lane = threadIdx.x % lanes;
    float* slots = &emulated_block->values[0][0] + w * lanes;
    slots[lane] = x;
    emulated_block->wave[w]->arrive_and_wait();
    const float y = slots[source(lane)];
    emulated_block->wave[w]->arrive_and_wait();
    return y;
}
inline float __shfl_xor(float x, int mask, int = 64) {
    return wave_exchange(x, [&](int lane) { return lane ^ mask; });
}
inline float __shfl(float x, int source, int width = 64) {
    return wave_exchange(x, [&](int lane) { return lane / width * width + source % width; });
}
#define __builtin_amdgcn_readfirstlane(x) (x)  // the kernel reads only wave-uniform values with it

using EmulatedAccumulator = float __attribute__((ext_vector_type(16)));

// One 32 x 32 x (2 kItems) MFMA of the wave, kItems 16-bit values per lane and operand:
// A[i][k] in lane i + 32 (k / kItems), item k % kItems; B[k][j] in lane j + 32 (k / kItems);
// D[i][j] in lane j + 32 ((i / 4) % 2), register 4 (i / 8) + i % 4.
template <int kItems, class Widen>
inline EmulatedAccumulator emulated_mfma(uint64_t a, uint64_t b, EmulatedAccumulator c, Widen widen) {
    const int w = threadIdx.x / EmulatedBlock::kLanes, lane = threadIdx.x % EmulatedBlock::kLanes;
    emulated_block->a[w][lane] = a, emulated_block->b[w][lane] = b;
    emulated_block->wave[w]->arrive_and_wait();
    for (int r = 0; r < 16; ++r) {
        const int i = 8 * (r / 4) + 4 * (lane / 32) + r % 4, j = lane % 32;
        float sum = 0.f;
        for (int k = 0; k < 2 * kItems; ++k) {
            const int shift = 16 * (k % kItems);
            sum += widen(uint16_t(emulated_block->a[w][i + 32 * (k / kItems)] >> shift)) *
                   widen(uint16_t(emulated_block->b[w][j + 32 * (k / kItems)] >> shift));
        }
        c[r] += sum;
    }
    emulated_block->wave[w]->arrive_and_wait();
    return c;
}
inline float widen_fp16(uint16_t bits) { return float(__ushort_as_half(bits)); }
inline float widen_bf16(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }

using EmulatedHalves = _Float16 __attribute__((ext_vector_type(4)));
using EmulatedShorts = short __attribute__((ext_vector_type(4)));
using EmulatedShortPair = short __attribute__((ext_vector_type(2)));
inline EmulatedAccumulator emulated_mfma_f16(EmulatedHalves a, EmulatedHalves b, EmulatedAccumulator c, int, int, int) {
    return emulated_mfma<4>(__builtin_bit_cast(uint64_t, a), __builtin_bit_cast(uint64_t, b), c, widen_fp16);
}
inline EmulatedAccumulator emulated_mfma_bf16_1k(EmulatedShorts a, EmulatedShorts b, EmulatedAccumulator c, int, int, int) {
    return emulated_mfma<4>(__builtin_bit_cast(uint64_t, a), __builtin_bit_cast(uint64_t, b), c, widen_bf16);
}
inline EmulatedAccumulator emulated_mfma_bf16_x4(EmulatedShortPair a, EmulatedShortPair b, EmulatedAccumulator c, int, int,
                                                 int) {
    return emulated_mfma<2>(__builtin_bit_cast(uint32_t, a), __builtin_bit_cast(uint32_t, b), c, widen_bf16);
}
#define __builtin_amdgcn_mfma_f32_32x32x8f16 emulated_mfma_f16
#define __builtin_amdgcn_mfma_f32_32x32x8bf16_1k emulated_mfma_bf16_1k
#define __builtin_amdgcn_mfma_f32_32x32x4bf16 emulated_mfma_bf16_x4
