// K and V tiles the wgmma family's producer warpgroup places in the shared-memory ring itself: a
// paged KV cache's, and (element rows: a head_dim that is not a multiple of 8, whose rows TMA
// cannot take) every tile of K and V, loaded element by element (common/element_rows.h) on the
// same grid of key tiles, their rows a stride apart or in pages, and the consumers' Q rows.
// Paged launches walk key tiles on a grid of kBlockKeys from key 0 (TileWork::tiles_end), so
// that a tile is whole pages, or part of one: a tile whose keys are all in the sequence comes by
// TMA, one box of gcd(page_size, kBlockKeys) rows per page part, from a map of the cache's pages. The tile
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
#include "kernels/common/element_rows.h"
#include "kernels/common/memory.h"
#include "kernels/common/paged_kv.h"
#include "kernels/common/rows.h"
#include "kernels/common/tile_schedule.h"
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

    // The same keys of a K or V tensor copied row by row, keys from `end` on as zeros; `pages`
    // places the rows (StepPages: pages of the cache, s.batch between them; or, without a block
    // table, the sequence's rows a stride apart). Neighbouring threads copy one row's chunks, so
    // that a warp's copy reads whole rows; a thread keeps its chunk for every row it copies.
    // Vector rows: cp.async, the barrier `full` taking this thread's arrival once its copies have
    // landed; in few registers, offsets inside a page in 32 bits (the launcher checks that they
    // fit). kElements: element rows through registers, then a plain arrival.
    template <bool kElements>
    __device__ static void copy(uint32_t full, uint32_t destination, const void* tensor, const TensorStrides s,
                                const int* block_table, StepPages pages, int head, int k0, int end, int head_dim) {
        const int thread = threadIdx.x % kThreads, chunk = thread % kChunksPerRow;
        const int bytes = min(max(2 * head_dim - 16 * chunk, 0), 16);  // columns past a smaller head_dim: zeros
        const int column = head * int(s.head) + 8 * chunk;               // inside a page
        // 16-byte chunk c of row r: swizzle atom c / 8, its 16-byte column (c % 8) ^ (r % 8).
        const uint32_t atom = destination + chunk / 8 * kBlockKeys * wgmma::kRowBytes;
#pragma unroll 1
        for (int row = thread / kChunksPerRow; row < kBlockKeys; row += kRowsPerPass) {
            const int key = k0 + row, inside = min(key, end - 1);
            const uint32_t to = atom + row * wgmma::kRowBytes + ((chunk ^ row) % 8) * 16;
            const uint16_t* from = static_cast<const uint16_t*>(tensor) + int64_t(pages.page_of(block_table, inside)) * int(s.batch) +
                                   (column + (inside & int((1u << pages.shift) - 1u)) * int(s.row));
            if constexpr (kElements)
                hopper::store_shared_16(to, load_chunk_elements(from, key < end ? head_dim - 8 * chunk : 0));
            else
                copy_async_prefix(to, from, key < end ? bytes : 0);
        }
        if constexpr (kElements) {
            hopper::fence_async_shared();  // the tile's stores, before wgmma reads it through the async proxy
            hopper::barrier_arrive(full);
        } else {
            hopper::copy_async_arrive(full);
        }
    }

    // Element rows: a consumer warpgroup's Q rows [first_row, first_row + wgmma::kRows) of a
    // work tile, as the TMA box of Q would place them (tile row r: head r / rows_per_head of the
    // tile, position position0 + r % rows_per_head), zeros where the row does not exist; copied
    // by the warpgroup itself (the producer has too few registers), which then fences them for
    // wgmma and syncs on `barrier`.
    template <int kBlockRows, class Work>
    __device__ static void copy_q(uint32_t destination, const FwdParams& p, const PrefillTiling& tiling, const Work& work,
                                  int first_row, int barrier) {
        for (int n = threadIdx.x % wgmma::kThreads; n < wgmma::kRows * kChunksPerRow; n += wgmma::kThreads) {
            const int row = first_row + n / kChunksPerRow, column = n % kChunksPerRow * 8;
            const int head_in_tile = row / tiling.rows_per_head, position = work.tile.position0 + row % tiling.rows_per_head;
            uint4 chunk = make_uint4(0, 0, 0, 0);
            if (head_in_tile < work.tile.heads && work.has_position(position))
                chunk = load_chunk_elements(row_start(static_cast<const uint16_t*>(p.q), p.q_strides, p.cu_seqlens_q,
                                                      work.tile.batch, work.tile.head0 + head_in_tile, position) + column,
                                            p.head_dim - column);
            hopper::store_shared_16(destination + wgmma::swizzled_offset(kBlockRows, row, column), chunk);
        }
        hopper::fence_async_shared();
        hopper::named_barrier_sync(barrier, wgmma::kThreads);
    }
};

}  // namespace mmaprefill
}  // namespace fmha
