// K and V tiles of a paged KV cache and of element rows (a head_dim that is not a multiple of 8,
// whose rows TMA cannot take), which the wgmma family's producer places in the shared-memory ring.
// Paged launches walk key tiles on a grid of kBlockKeys from key 0 (TileWork::tiles_end), so
// that a tile is whole pages, or part of one, each part a TMA box from a map of the cache's
// pages. One producer thread issues them, as it does every contiguous tile; the tile that
// reaches past the sequence's keys it takes in boxes of 8 rows and of one row, those past the
// sequence at page -1, outside the map, which TMA fills with zeros (the cache holds whatever
// there, and P.V would take NaN in V through a masked key's zero). Where one thread cannot keep
// up or does not fit (TileShape::copied_pages, warpgroup_pages), the producer warpgroup loads the
// tiles, copying small pages and a sequence's last tile row by row into the swizzled layout a box
// would have (zeros past the sequence), and element rows likewise; a tile's full barrier then
// counts one arrival per producer thread, a copy's the hardware's once the thread's copies have
// landed, and the consumers fence those tiles for wgmma's reads through the async proxy
// (docs/mmaprefill.md, "Paged KV").
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

// kCopiedPages: pages of up to this many keys are copied, every tile (TileShape::copied_pages).
template <int kBlockKeys, int kHeadDim, int kCopiedPages>
struct PagedTiles {
    static constexpr bool kCopiesTiles = kCopiedPages > 0;
    static constexpr int kThreads = wgmma::kThreads;  // the producer warpgroup
    static constexpr int kAtoms = (kHeadDim + wgmma::kAtomColumns - 1) / wgmma::kAtomColumns;
    static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks

    // Rows per box: the largest power of two dividing both (page sizes are powers of two).
    __host__ __device__ static int box_rows(int page_size) { return min(page_size, kBlockKeys & -kBlockKeys); }
    static constexpr int kGroupRows = 8;  // rows per box of a sequence's last tile (a swizzle atom's)
    static_assert(kBlockKeys % kGroupRows == 0, "whole groups of rows per tile");

    // Keys [k0, k0 + kBlockKeys) of KV head `head` into `destination`, from one thread: the
    // tile's page parts; or, the tile reaching past kv_end, groups of rows, a group that
    // straddles kv_end row by row, each box past kv_end at page -1 (zeros). (Reading the parts'
    // table entries first, or by a warp's lanes, measured slower: docs/decisions.md.)
    // maps: a K or V cache's pages ({head_dim, page_size, heads, pages}) in boxes of a part, then
    // of kGroupRows rows, then of one row (TensorMaps).
    __device__ static void load(uint32_t full, uint32_t destination, const CUtensorMap* maps, const int* block_table,
                                StepPages pages, int page_size, int head, int k0, int kv_end) {
        const int rows = box_rows(page_size);
        const auto page_of = [&](int row) { return __ldg(block_table + pages.entry + ((k0 + row) >> pages.shift)); };
        const auto box = [&](const CUtensorMap* map, int row, int on_page) {
            for (int atom = 0; atom < kAtoms; ++atom)
                hopper::tma_load_4d(destination + (atom * kBlockKeys + row) * wgmma::kRowBytes, map, atom * wgmma::kAtomColumns,
                                    (k0 + row) & (page_size - 1), head, on_page, full);
        };
        hopper::barrier_arrive_expect(full, kAtoms * kBlockKeys * wgmma::kRowBytes);
        if (k0 + kBlockKeys <= kv_end) {
#pragma unroll 1
            for (int row = 0; row < kBlockKeys; row += rows) box(maps, row, page_of(row));
            return;
        }
        int on_page = -1;
#pragma unroll 1
        for (int row = 0; row < kBlockKeys; row += kGroupRows) {
            const int end = kv_end - k0 - row;  // rows of this group in the sequence
            if (end <= 0) on_page = -1;
            else if (row % rows == 0) on_page = page_of(row);  // a page part's first group
            if (end >= kGroupRows || end <= 0) {
                box(maps + 1, row, on_page);
            } else {
#pragma unroll 1
                for (int r = 0; r < kGroupRows; ++r) box(maps + 2, row + r, r < end ? on_page : -1);
            }
        }
    }

    // The same keys, all in the sequence, by the warpgroup: its first threads a page part each
    // (their table reads in parallel), the others arriving at once; the barrier counts the
    // warpgroup's arrivals (TileShape::warpgroup_pages: d64, whose pages of 16 are six parts a tile).
    __device__ static void load_by_warpgroup(uint32_t full, uint32_t destination, const CUtensorMap* map, const int* block_table,
                                             StepPages pages, int page_size, int head, int k0) {
        const int thread = threadIdx.x % kThreads, rows = box_rows(page_size);
        if (thread >= kBlockKeys / rows) {
            hopper::barrier_arrive(full);
            return;
        }
        const int key = k0 + thread * rows;
        const int page = __ldg(block_table + pages.entry + (key >> pages.shift));
        hopper::barrier_arrive_expect(full, kAtoms * rows * wgmma::kRowBytes);
        for (int atom = 0; atom < kAtoms; ++atom)
            hopper::tma_load_4d(destination + (atom * kBlockKeys + thread * rows) * wgmma::kRowBytes, map,
                                atom * wgmma::kAtomColumns, key & (page_size - 1), head, page, full);
    }

    // Chunks of a row one thread copies from one address, kChunksPerRow / run threads apart (a
    // warp's copy instruction reads whole spans of rows). A producer that copies whole tiles of
    // small pages (kCopiesTiles) copies 4 where whole passes of rows still fill the tile, else 2,
    // its passes unrolled: one chunk a row, one row at a time, was bound by the loop's own chain
    // of address arithmetic (docs/mmaprefill.md, "Paged KV"). Otherwise (element rows, whose
    // chunks pass through registers) 1, a pass at a time, in fewer registers.
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

    // Keys [k0, k0 + kBlockKeys) of a K or V tensor copied row by row by the warpgroup, keys from
    // `end` on as zeros; `pages` places the rows (StepPages: pages of the cache, s.batch between
    // them; or, without a block table, the sequence's rows a stride apart). Each lane holds one of the tile's pages (a tile
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
