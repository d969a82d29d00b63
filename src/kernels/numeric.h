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

// exp(x) = exp2(x * kLog2e): scores are kept in the log2 domain.
inline constexpr float kLog2e = 1.4426950408889634f;

// One online-softmax step: raises a row's running maximum to include step_max and returns the
// factor that rescales what was accumulated under the old one. `reference` is what the step's
// scores subtract before exp2: the new maximum, or 0 while every key so far is masked (-inf),
// so that no inf - inf appears.
__device__ inline float raise_max(float& running_max, float step_max, float& reference) {
    const float new_max = fmaxf(running_max, step_max);
    reference = new_max == -INFINITY ? 0.f : new_max;
    const float rescale = exp2f(running_max - reference);
    running_max = new_max;
    return rescale;
}

// Two floats rounded to one register of two packed elements (lo in the low half).
template <class Numeric>
__device__ inline uint32_t pack2(float lo, float hi) {
    return uint32_t(Numeric::pack(lo)) | uint32_t(Numeric::pack(hi)) << 16;
}

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
