// Element types: storage as raw 16-bit patterns, arithmetic in fp32.
#pragma once

#include <hip/hip_fp16.h>
#include <hip/hip_runtime.h>

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
};

template <>
struct DTypeTraits<DType::bf16> {
    // bf16 is the top half of an fp32: widening is exact, narrowing rounds to nearest even.
    __device__ static inline float2 unpack2(uint32_t bits) {
        return make_float2(__uint_as_float(bits << 16), __uint_as_float(bits & 0xffff0000u));
    }
    __device__ static inline float unpack1(uint16_t bits) { return __uint_as_float(uint32_t(bits) << 16); }
    __device__ static inline uint16_t pack(float x) {
        const uint32_t u = __float_as_uint(x);
        if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN stays NaN
        return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
};

// Eight elements from a 16-byte aligned address -> eight floats.
template <class Numeric>
__device__ inline void unpack8(const uint16_t* src, float (&out)[8]) {
    const uint4 w = *reinterpret_cast<const uint4*>(src);
    float2 f;
    f = Numeric::unpack2(w.x); out[0] = f.x; out[1] = f.y;
    f = Numeric::unpack2(w.y); out[2] = f.x; out[3] = f.y;
    f = Numeric::unpack2(w.z); out[4] = f.x; out[5] = f.y;
    f = Numeric::unpack2(w.w); out[6] = f.x; out[7] = f.y;
}

}  // namespace fmha
