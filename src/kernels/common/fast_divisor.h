// Division by a divisor fixed for a launch: a multiply-high, an add and a shift instead of a
// division, whose reciprocal would queue on the special-function unit behind the softmax's
// exponentials (docs/decisions.md). The round-up method of Granlund and Montgomery
// ("Division by invariant integers using multiplication", 1994) for 32-bit words.
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

namespace fmha {

struct FastDivisor {
    uint32_t divisor = 1, multiplier = 1, shift = 0;

    FastDivisor() = default;
    // 1 <= d < 2^31: shift = ceil(log2 d), multiplier = floor(2^32 (2^shift - d) / d) + 1.
    __host__ __device__ explicit FastDivisor(int d) : divisor(uint32_t(d)) {
        while ((uint64_t(1) << shift) < divisor) ++shift;
        multiplier = uint32_t((uint64_t(1) << 32) * ((uint64_t(1) << shift) - divisor) / divisor + 1);
    }
    // n / divisor for 0 <= n < 2^31 (the sum below then stays within 32 bits).
    __host__ __device__ int divide(int n) const {
        const uint32_t high = uint32_t(uint64_t(uint32_t(n)) * multiplier >> 32);
        return int((high + uint32_t(n)) >> shift);
    }
};

}  // namespace fmha
