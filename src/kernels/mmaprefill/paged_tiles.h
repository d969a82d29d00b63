// K and V tiles of a paged KV cache into the wgmma family's shared-memory ring. Paged launches
// walk key tiles on a grid of kBlockKeys from key 0 (TileWork::tiles_end), so that a tile is
// whole pages, or part of one: a tile whose keys are all in the sequence comes by TMA, one box
// of gcd(page_size, kBlockKeys) rows per page part, from a map of the cache's pages. The tile
// that reaches past the sequence's keys the producer warpgroup copies itself (cp.async), each
// row found through the block table, into the swizzled layout a box would have, and zeros past
// the sequence (the cache holds whatever there, and P.V would take NaN in V through a masked
// key's zero). A tile's full barrier counts one arrival per producer thread either way; a copy's
// the hardware makes once the thread's copies have landed, and the consumers fence a paged
// launch's tiles for wgmma's reads through the async proxy (docs/mmaprefill.md, "Paged KV").
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
struct PagedTiles {
    static constexpr int kThreads = wgmma::kThreads;  // the producer warpgroup
    static constexpr int kAtoms = (kHeadDim + wgmma::kAtomColumns - 1) / wgmma::kAtomColumns;
    static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks
    static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
    static_assert(kThreads % kChunksPerRow == 0 && kBlockKeys % kRowsPerPass == 0, "whole rows per pass, whole passes per tile");

    // Rows per box: the largest power of two dividing both (page sizes are powers of two).
    __host__ __device__ static int box_rows(int page_size) { return min(page_size, kBlockKeys & -kBlockKeys); }

    // Keys [k0, k0 + kBlockKeys), all in the sequence, of KV head `head` from the map of a K or V
    // cache's pages ({head_dim, page_size, heads, pages}) into `destination`: the warpgroup's
    // first threads a page part each (its box in every head-dim atom), the others arriving at
    // once. (A thread per box, atoms apart, measured slower.)
    __device__ static void load(uint32_t full, uint32_t destination, const CUtensorMap* map, const int* block_table,
                                int first_entry, int page_size, int head, int k0) {
        const int thread = threadIdx.x % kThreads, rows = box_rows(page_size);
        if (thread >= kBlockKeys / rows) {
            hopper::barrier_arrive(full);
            return;
        }
        const int key = k0 + thread * rows;
        const int page = __ldg(block_table + first_entry + (key >> (__ffs(page_size) - 1)));
        hopper::barrier_arrive_expect(full, kAtoms * rows * wgmma::kRowBytes);
        for (int atom = 0; atom < kAtoms; ++atom)
            hopper::tma_load_4d(destination + (atom * kBlockKeys + thread * rows) * wgmma::kRowBytes, map,
                                atom * wgmma::kAtomColumns, key & (page_size - 1), head, page, full);
    }

    // The same keys of a K or V tensor (strides s; s.batch: between pages) copied row by row,
    // keys from `end` on as zeros; the barrier `full` takes this thread's arrival once its copies
    // have landed. Neighbouring threads copy one row's chunks, so that a warp's copy reads whole
    // rows; a thread keeps its chunk for every row it copies. In few registers: offsets inside a
    // page in 32 bits (the launcher checks that they fit).
    __device__ static void copy(uint32_t full, uint32_t destination, const void* tensor, const TensorStrides s,
                                const int* block_table, int first_entry, int page_size, int head, int k0, int end,
                                int head_dim) {
        const int thread = threadIdx.x % kThreads, chunk = thread % kChunksPerRow;
        const int bytes = min(max(2 * head_dim - 16 * chunk, 0), 16);  // columns past a smaller head_dim: zeros
        const int column = head * int(s.head) + 8 * chunk;               // inside a page
        // 16-byte chunk c of row r: swizzle atom c / 8, its 16-byte column (c % 8) ^ (r % 8).
        const uint32_t atom = destination + chunk / 8 * kBlockKeys * wgmma::kRowBytes;
#pragma unroll 1
        for (int row = thread / kChunksPerRow; row < kBlockKeys; row += kRowsPerPass) {
            const int key = k0 + row, inside = min(key, end - 1);
            const int page = __ldg(block_table + first_entry + (inside >> (__ffs(page_size) - 1)));
            copy_async_prefix(atom + row * wgmma::kRowBytes + ((chunk ^ row) % 8) * 16,
                              static_cast<const uint16_t*>(tensor) + int64_t(page) * int(s.batch) +
                                  (column + (inside & (page_size - 1)) * int(s.row)),
                              key < end ? bytes : 0);
        }
        hopper::copy_async_arrive(full);
    }
};

}  // namespace mmaprefill
}  // namespace fmha
