// Hopper (sm_90a) asynchronous machinery as C++ functions, so that kernels hold no inline PTX:
// mbarriers, TMA tensor loads, proxy fences, named barriers, warpgroup register reallocation
// and the wgmma issue/commit/wait protocol (the wgmma statements themselves are generated:
// wgmma_instructions.h). NVIDIA builds only; the families that use it exist only for archs
// whose matrix core is wgmma (generator/archs.py).
#pragma once

#include <cuda.h>  // CUtensorMap (a type only: nothing links the driver library)

#include <cstdint>

#include "wgmma_instructions.h"

namespace fmha {
namespace hopper {

__device__ inline uint32_t shared_address(const void* pointer) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(pointer));
}

// ---- mbarriers: a 64-bit word in shared memory counting arrivals and transaction bytes.

__device__ inline void barrier_init(uint64_t* barrier, int arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_address(barrier)), "r"(arrivals));
}

// Makes initialised barriers visible to the async proxy (TMA) and the other threads; follow
// with __syncthreads().
__device__ inline void barrier_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

// The functions below take a barrier (or a destination) as a pointer, or as its shared-memory
// address: 32 bits, where registers are few (the producer warpgroup's).

// One arrival that also announces `bytes` of TMA transactions the phase must wait for.
__device__ inline void barrier_arrive_expect(uint32_t barrier, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(barrier), "r"(bytes) : "memory");
}
__device__ inline void barrier_arrive_expect(uint64_t* barrier, uint32_t bytes) {
    barrier_arrive_expect(shared_address(barrier), bytes);
}

// One arrival, at a barrier's shared-memory address.
__device__ inline void barrier_arrive(uint32_t barrier) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(barrier) : "memory");
}

// An arrival by the threads whose `predicate` holds, predicated inside the PTX rather than
// branched around: a branch between a wgmma's issue and its wait makes ptxas wait early.
__device__ inline void barrier_arrive_if(uint64_t* barrier, bool predicate) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.u32 p, %1, 0;\n"
        "@p mbarrier.arrive.shared::cta.b64 _, [%0];\n"
        "}\n" ::"r"(shared_address(barrier)),
        "r"(uint32_t(predicate))
        : "memory");
}

// Waits until the phase with this parity has completed. A fresh barrier is in phase 0, and
// parity 1 (the phase "before" it) counts as completed: producers start by waiting on that.
__device__ inline void barrier_wait(uint32_t barrier, uint32_t parity) {
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "wait_loop:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra wait_loop;\n"
        "}\n" ::"r"(barrier),
        "r"(parity)
        : "memory");
}
__device__ inline void barrier_wait(uint64_t* barrier, uint32_t parity) { barrier_wait(shared_address(barrier), parity); }

// ---- TMA: one box of a tensor map into shared memory, completing on a barrier.

// Coordinates are element indices per dimension, innermost first; boxes reaching outside the
// tensor (negative coordinates too) read zeros there.
__device__ inline void tma_load_4d(uint32_t destination, const CUtensorMap* map, int c0, int c1, int c2, int c3,
                                   uint32_t barrier) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4, %5}], [%6];" ::"r"(
            destination),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(barrier)
        : "memory");
}

// `bytes` (a multiple of 16) from global to shared memory, both addresses 16-byte aligned,
// completing on a barrier like tma_load_4d.
__device__ inline void bulk_load(uint32_t destination, const void* source, uint32_t bytes, uint32_t barrier) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(destination),
                 "l"(source), "r"(bytes), "r"(barrier)
                 : "memory");
}

// One box from shared memory into the tensor (rows outside it are not written), in a bulk
// group of the issuing thread: make the box's shared-memory writes visible to TMA first
// (fence_async_shared, then a barrier), commit after issuing, and wait for the group to have
// read the box before writing there again.
__device__ inline void tma_store_4d(const CUtensorMap* map, const void* source, int c0, int c1, int c2, int c3) {
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(shared_address(source)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
// Four 8x8 matrices of 16-bit elements from registers to shared memory (stmatrix): register j
// holds a thread's pair of matrix j in the mma.sync C-fragment layout (row lane / 4, columns
// 2 (lane % 4) and the next); lane l gives the address of row l % 8 of matrix l / 8.
__device__ inline void store_matrix_x4(uint32_t address, const uint32_t (&r)[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(address), "r"(r[0]), "r"(r[1]),
                 "r"(r[2]), "r"(r[3])
                 : "memory");
}
// Adds a box from shared memory into a 2-D fp32 tensor (element-wise, atomically per element),
// in a bulk group of the issuing thread, as tma_store_4d.
__device__ inline void tma_reduce_add_2d(const CUtensorMap* map, uint32_t source, int c0, int c1) {
    asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(source), "r"(c0), "r"(c1)
                 : "memory");
}
// 16 bytes to the shared-memory address `shared` (a thread's copy into a tile TMA would fill).
__device__ inline void store_shared_16(uint32_t shared, const uint4& value) {
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" ::"r"(shared), "r"(value.x), "r"(value.y), "r"(value.z),
                 "r"(value.w)
                 : "memory");
}
// One 32-bit word to the shared-memory address `shared` (a barrier, not the compiler, orders it
// with other threads' reads).
__device__ inline void store_shared(uint32_t shared, int value) {
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(shared), "r"(value) : "memory");
}
__device__ inline void fence_async_shared() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Orders this thread's global-memory accesses by the generic proxy with its bulk (TMA) ones.
__device__ inline void fence_async_global() { asm volatile("fence.proxy.async.global;" ::: "memory"); }
__device__ inline void bulk_commit() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Until this thread's committed stores have read their shared memory / have completed.
__device__ inline void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory"); }
__device__ inline void bulk_wait() { asm volatile("cp.async.bulk.wait_group 0;" ::: "memory"); }

__device__ inline void prefetch_tensor_map(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// ---- Named barriers (ids 1..15; 0 is __syncthreads): `threads` counts every participant.

__device__ inline void named_barrier_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ inline void named_barrier_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// ---- Register reallocation between warpgroups: every thread of a warpgroup executes it.

template <int kRegisters>
__device__ inline void release_registers() {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegisters));
}
template <int kRegisters>
__device__ inline void claim_registers() {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegisters));
}

// Two floats rounded to one register of two 16-bit elements, lo in the low half.
template <DType kDType>
__device__ inline uint32_t pack_pair(float lo, float hi) {
    uint32_t packed;
    if constexpr (kDType == DType::fp16)
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(packed) : "f"(hi), "f"(lo));
    return packed;
}

// The same value, which the compiler cannot see through: what is derived from it again is
// computed again instead of being kept in registers across the code in between.
__device__ inline int opaque(int x) {
    asm volatile("" : "+r"(x));
    return x;
}

// ---- wgmma protocol: fence, issue (wgmma_ss / wgmma_rs), commit, wait.

// Before the first wgmma that reads registers or accumulators written by ordinary code.
__device__ inline void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
// Closes the group of wgmmas issued since the last commit.
__device__ inline void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most kPending committed groups are still running.
template <int kPending>
__device__ inline void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving reads or writes of these registers across this point, so
// that accumulators of a running wgmma are touched only after its wait.
template <int N>
__device__ inline void pin_registers(float (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ inline void pin_registers(uint32_t (&r)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

}  // namespace hopper
}  // namespace fmha
