// Element types: storage as raw 16-bit patterns, arithmetic in fp32.
#pragma once

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

#include <cmath>
#include <cstdint>

#include "fmha_catalogue.h"

namespace fmha {

template <DType kDType>
struct DTypeTraits;

template <>
struct DTypeTraits<DType::fp16> {
    // Two packed elements -> two floats.
    __device__ static inline float2 unpack2(uint32_t bits) {
        __half2 h;
        __builtin_memcpy(&h, &bits, sizeof(h));
        return __half22float2(h);
    }
    __device__ static inline float unpack1(uint16_t bits) { return __half2float(__ushort_as_half(bits)); }
    __device__ static inline uint16_t pack(float x) { return __half_as_ushort(__float2half_rn(x)); }
    static constexpr DType dtype = DType::fp16;
};

template <>
struct DTypeTraits<DType::bf16> {
    // bf16 is the top half of an fp32: widening is exact, narrowing rounds to nearest even.
    __device__ static inline float2 unpack2(uint32_t bits) {
        return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
    }
    __device__ static inline float unpack1(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }
    // Where the arch converts (sm_80 on), one instruction: the same rounding, NaN stays NaN.
    __device__ static inline uint16_t pack(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        uint16_t bits;
        asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(bits) : "f"(x));
        return bits;
#else
        const uint32_t u = __float_as_uint(x);
        if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays NaN
        return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
#endif
    }
    static constexpr DType dtype = DType::bf16;
};

// Eight packed elements (one 16-byte vector) -> eight floats.
template <class Numeric>
__device__ inline void unpack8(const uint4& w, float (&out)[8]) {
    const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const float2 f = Numeric::unpack2(words[i]);
        out[2 * i] = f.x;
        out[2 * i + 1] = f.y;
    }
}

// Two floats rounded to one register of two packed elements (lo in the low half): where the arch
// converts pairs (sm_80 on), one instruction with pack()'s rounding.
template <class Numeric>
__device__ inline uint32_t pack2(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t bits;
    if constexpr (Numeric::dtype == DType::bf16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(bits) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(bits) : "f"(hi), "f"(lo));
    return bits;
#else
    return uint32_t(Numeric::pack(lo)) | uint32_t(Numeric::pack(hi)) << 16;
#endif
}

// The low (high) 16-bit halves of a and b, as one register {a, b}.
__device__ inline uint32_t low_halves(uint32_t a, uint32_t b) { return __byte_perm(a, b, 0x5410); }
__device__ inline uint32_t high_halves(uint32_t a, uint32_t b) { return __byte_perm(a, b, 0x7632); }

// Eight elements from a 16-byte aligned address -> eight floats.
template <class Numeric>
__device__ inline void unpack8(const uint16_t* src, float (&out)[8]) {
    unpack8<Numeric>(*reinterpret_cast<const uint4*>(src), out);
}

// Eight floats, each times `scale`, rounded to one 16-byte vector of elements.
template <class Numeric>
__device__ inline uint4 pack8(const float (&in)[8], float scale) {
    uint32_t words[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
        words[i] = pack2<Numeric>(in[2 * i] * scale, in[2 * i + 1] * scale);
    return make_uint4(words[0], words[1], words[2], words[3]);
}

}  // namespace fmha
