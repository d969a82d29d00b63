// Memory accesses the compiler must not cache, reorder or elide.
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

namespace fmha {

// 16 (or 8) bytes of shared memory, read at every call (a volatile load): the compiler may not
// keep the value in registers instead, e.g. through the iterations of a loop.
template <class Vector>
__device__ inline Vector load_shared_volatile(const Vector* shared) {
    static_assert(sizeof(Vector) == 16 || sizeof(Vector) == 8, "one 16- or 8-byte vector");
#if defined(__HIP_PLATFORM_NVIDIA__)
    if constexpr (sizeof(Vector) == 16) {
        uint32_t w[4];
        asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                     : "r"(uint32_t(__cvta_generic_to_shared(shared))));
        return Vector{w[0], w[1], w[2], w[3]};
    } else {
        uint32_t w[2];
        asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "r"(uint32_t(__cvta_generic_to_shared(shared))));
        return Vector{w[0], w[1]};
    }
#else
    static_assert(sizeof(Vector) == 0, "written for NVIDIA archs only so far");
    return *shared;
#endif
}

}  // namespace fmha
