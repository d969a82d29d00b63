// K and V tiles of a paged KV cache into the wgmma family's shared-memory ring. TMA copies one
// box per tile, which pages narrower than a tile (or tiles that do not start on a page, as the
// key tiles walked back from a row's last key do) break apart; so for paged launches the whole
// producer warpgroup copies the tile's 16-byte chunks itself (cp.async), each row found through
// the block table, into the swizzled layout a TMA box would have. Keys before the sequence and
// head-dim columns past a smaller head_dim are zeros. A tile's full barrier counts one arrival
// per producer thread, made once its copies have landed and been fenced for the async proxy
// that wgmma reads through; arrivals lag one tile, so that a tile's copies are in flight while
// the next one's are issued (docs/mmaprefill.md, "Paged KV").
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "fmha/params.h"
#include "kernels/common/memory.h"
#include "kernels/mma/wgmma.h"
#include "platform/hip_on_cuda/hopper.h"

namespace fmha {
namespace mmaprefill {

template <int kBlockKeys, int kHeadDim>
struct PagedTileCopier {
    static constexpr int kThreads = wgmma::kThreads;  // the producer warpgroup
    static constexpr int kChunksPerRow = kHeadDim / 8;

    // Keys [k0, k0 + kBlockKeys) of a K or V tensor's KV head `head` (strides s; s.batch: between
    // pages) into `destination`, found through block_table[first_entry + key / page_size], as
    // this thread's newest group of copies. A thread copies one row, its page looked up once, in
    // few registers (the producer has 24 at d128, tiles.h): strides in 32 bits (the launcher
    // checks that they fit). A warp's copy reads half of 32-byte sectors of 32 rows;
    // the copies go through L1, where its next copy finds the other halves.
    __device__ static void copy(uint32_t destination, const void* tensor, const TensorStrides s, const int* block_table,
                                int first_entry, int page_size, int head, int k0, int head_dim) {
        static_assert(kBlockKeys <= kThreads, "a row per producer thread");
        const int row = threadIdx.x % kThreads, key = k0 + row, inside = max(key, 0);
        if (row < kBlockKeys) {
            const int page = __ldg(block_table + first_entry + (inside >> (__ffs(page_size) - 1)));
            const uint16_t* source = static_cast<const uint16_t*>(tensor) + int64_t(page) * int(s.batch) +
                                     (head * int(s.head) + (inside & (page_size - 1)) * int(s.row));
            // 16-byte chunk c of the row: swizzle atom c / 8, its 16-byte column (c % 8) ^ (row % 8).
            const uint32_t row_start = destination + row * wgmma::kRowBytes;
            int left = key < 0 ? 0 : 2 * head_dim;  // bytes of the row still to read
#pragma unroll 1
            for (int chunk = 0; chunk < kChunksPerRow; ++chunk, source += 8, left -= 16)
                copy_async_prefix(row_start + chunk / 8 * kBlockKeys * wgmma::kRowBytes + ((chunk ^ row) % 8) * 16, source,
                                  min(max(left, 0), 16));
        }
        copy_async_commit();
    }
    // After a copy: the arrival on the barrier of the tile copied before it, whose copies have
    // landed by now; after the last copy, on its own.
    __device__ static void arrive_after_previous(uint32_t previous) {
        copy_async_wait<1>();
        arrive(previous);
    }
    __device__ static void arrive_after_last(uint32_t last) {
        copy_async_wait<0>();
        arrive(last);
    }

  private:
    __device__ static void arrive(uint32_t full) {
        hopper::fence_async_shared();  // the copies, visible to wgmma's reads
        hopper::barrier_arrive(full);
    }
};

}  // namespace mmaprefill
}  // namespace fmha
