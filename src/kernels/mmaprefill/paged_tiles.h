// K and V tiles the wgmma family's producer warpgroup places in the shared-memory ring itself: a
// paged KV cache's, and (element rows: a head_dim that is not a multiple of 8, whose rows TMA
// cannot take) every tile of K and V, loaded element by element (common/element_rows.h) on the
// same grid of key tiles, their rows a stride apart or in pages, and the consumers' Q rows.
// Paged launches walk key tiles on a grid of kBlockKeys from key 0 (TileWork::tiles_end), so
// that a tile is whole pages, or part of one: a tile whose keys are all in the sequence comes by
// TMA, one box of gcd(page_size, kBlockKeys) rows per page part, from a map of the cache's pages. The tile
// that reaches past the sequence's keys, and every tile of pages too small for boxes to keep up
// (TileShape::copied_pages), the producer warpgroup copies itself (cp.async), each
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

template <int kBlockKeys, int kHeadDim, bool kCopiesTiles>
struct PagedTiles {
    static constexpr int kThreads = wgmma::kThreads;  // the producer warpgroup
    static constexpr int kAtoms = (kHeadDim + wgmma::kAtomColumns - 1) / wgmma::kAtomColumns;
    static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks

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

    // Chunks of a row one thread copies from one address, kChunksPerRow / run threads apart (a
    // warp's copy instruction reads whole spans of rows). A producer that copies whole tiles of
    // small pages (kCopiesTiles) copies 4 where whole passes of rows still fill the tile, else 2,
    // its passes unrolled: one chunk a row, one row at a time, was bound by the loop's own chain
    // of address arithmetic (docs/mmaprefill.md, "Paged KV"). Otherwise (a sequence's last tile;
    // element rows, whose chunks pass through registers) 1, a pass at a time, in fewer registers.
    __host__ __device__ static constexpr bool whole_passes(int run) {
        return kChunksPerRow % run == 0 && kThreads % (kChunksPerRow / run) == 0 &&
               kBlockKeys % (kThreads / (kChunksPerRow / run)) == 0;
    }
    __host__ __device__ static constexpr bool fast(bool elements) { return kCopiesTiles && !elements; }
    __host__ __device__ static constexpr int run(bool elements) { return !fast(elements) ? 1 : whole_passes(4) ? 4 : whole_passes(2) ? 2 : 1; }
    static_assert(whole_passes(1), "whole rows per pass, whole passes per tile");

    // Where a copy places a row's chunks in the tile: the swizzled layout a box writes (chunk c of
    // row r: atom c / 8, 16-byte column (c % 8) ^ (r % 8)). row_offset: chunk `first` of row `row`;
    // chunk_offset: chunk first + step from first's place (an offset, or an address aligned like the
    // tile), for a step whose bits lie above first's: they XOR into the swizzle and step over atoms.
    static constexpr int kAtomBytes = kBlockKeys * wgmma::kRowBytes;
    __host__ __device__ static constexpr uint32_t row_offset(int row, int first) {
        return first / 8 * kAtomBytes + row * wgmma::kRowBytes + (first ^ row) % 8 * 16;
    }
    __host__ __device__ static constexpr uint32_t chunk_offset(uint32_t first_place, int step) {
        return (first_place ^ step % 8 * 16) + step / 8 * kAtomBytes;
    }

    // The same keys of a K or V tensor copied row by row, keys from `end` on as zeros; `pages`
    // places the rows (StepPages: pages of the cache, s.batch between them; or, without a block
    // table, the sequence's rows a stride apart). Each lane holds one of the tile's pages (a tile
    // spans at most kBlockKeys / 16 + 1), each row takes its own by a shuffle.
    // Vector rows: cp.async, the barrier `full` taking this thread's arrival once its copies have
    // landed; offsets inside a page in 32 bits (the launcher checks that they fit). kElements:
    // element rows through registers, then a plain arrival.
    template <bool kElements>
    __device__ static void copy(uint32_t full, uint32_t destination, const void* tensor, const TensorStrides s,
                                const int* block_table, StepPages pages, int head, int k0, int end, int head_dim) {
        constexpr int kRun = run(kElements), kThreadsPerRow = kChunksPerRow / kRun;
        constexpr int kRowsPerPass = kThreads / kThreadsPerRow;
        const int thread = threadIdx.x % kThreads, first = thread % kThreadsPerRow;  // chunks first + kThreadsPerRow * j
        const int first_page = k0 >> pages.shift;
        const int page = block_table ? block_table[pages.entry + min(first_page + threadIdx.x % 32, (end - 1) >> pages.shift)]
                                     : pages.entry;
        const int column = head * int(s.head) + 8 * first, in_page = int((1u << pages.shift) - 1u);  // inside a page
        constexpr int kUnroll = fast(kElements) ? kBlockKeys / kRowsPerPass : 1;
#pragma unroll kUnroll
        for (int pass = 0; pass < kBlockKeys / kRowsPerPass; ++pass) {
            const int row = thread / kThreadsPerRow + pass * kRowsPerPass, key = k0 + row, inside = min(key, end - 1);
            const int row_page = __shfl_sync(0xffffffffu, page, (inside >> pages.shift) - first_page);
            const uint16_t* from = static_cast<const uint16_t*>(tensor) + int64_t(row_page) * int(s.batch) +
                                   (column + (inside & in_page) * int(s.row));
            const uint32_t to = destination + row_offset(row, first);
            const int valid = key < end ? head_dim - 8 * first : 0;  // elements of the row from chunk `first` on
#pragma unroll
            for (int j = 0; j < kRun; ++j) {
                const int step = kThreadsPerRow * j;  // chunk first + step
                const uint32_t to_chunk = chunk_offset(to, step);
                if constexpr (kElements)
                    hopper::store_shared_16(to_chunk, load_chunk_elements(from + 8 * step, valid - 8 * step));
                else
                    copy_async_prefix(to_chunk, from + 8 * step, 2 * min(max(valid - 8 * step, 0), 8));
            }
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
