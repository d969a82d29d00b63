// Memory accesses the compiler must not cache, reorder or elide.
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>
#include <type_traits>

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
#elif defined(FMHA_EMULATED_MMA_SYNC)  // tests/emulation: a plain load, each lane a thread
    return *shared;
#else
    static_assert(sizeof(Vector) == 0, "written for NVIDIA archs only so far");
    return *shared;
#endif
}

// kBytes (16 or 4) from global to shared memory without passing through registers (cp.async,
// sm_80 on; 16 bytes through L2 only, 4 through L1, the only kind of that size), or zeros where
// !valid (nothing is read then). Complete once copy_async_wait_all() and a barrier have passed.
// Elsewhere (and in the host emulation) a plain copy.
template <int kBytes>
__device__ inline void copy_async(void* shared, const void* global, bool valid) {
    static_assert(kBytes == 16 || kBytes == 4, "a 16-byte vector or a 4-byte word");
#if defined(__HIP_PLATFORM_NVIDIA__)
    if constexpr (kBytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(uint32_t(__cvta_generic_to_shared(shared))),
                     "l"(global), "r"(valid ? 16 : 0));
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(uint32_t(__cvta_generic_to_shared(shared))),
                     "l"(global), "r"(valid ? 4 : 0));
#else
    using Word = std::conditional_t<kBytes == 16, uint4, uint32_t>;
    *static_cast<Word*>(shared) = valid ? *static_cast<const Word*>(global) : Word{};
#endif
}

// Waits for this thread's asynchronous copies (the others' need a barrier after it).
__device__ inline void copy_async_wait_all() {
#if defined(__HIP_PLATFORM_NVIDIA__)
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

}  // namespace fmha
