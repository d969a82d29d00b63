// K and V tiles of a paged KV cache and of element rows (a head_dim that is not a multiple of 8,
// whose rows TMA cannot take), which the wgmma family's producer places in the shared-memory ring.
// Paged launches walk key tiles on a grid of kBlockKeys from key 0 (TileWork::tiles_end), so
// that a tile is whole pages, or part of one, each part a TMA box from a map of the cache's
// pages. The first thread of each of the producer's first issuers() warps issues every
// issuers()-th part: a thread's TMA issues are serial, and a tile of small pages is many boxes
// (docs/decisions.md, "Paged boxes from several producer warps"). Thread 0 takes the tile that
// reaches past the sequence's keys whole, a part straddling the end in boxes of 8 rows and of
// one row, those past the sequence at page -1, outside the map, which TMA fills with zeros (the
// cache holds whatever there, and P.V would take NaN in V through a masked key's zero). Element
// rows the producer warpgroup copies row by row into the swizzled layout a box would have (zeros
// past the sequence), fencing them for wgmma's reads through the async proxy; their tiles' full
// barriers count one arrival per producer thread (docs/mmaprefill.md, "Paged KV").
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "fmha/params.h"
#include "kernels/common/element_rows.h"
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
    static constexpr int kWarps = kThreads / 32;
    static constexpr int kAtoms = (kHeadDim + wgmma::kAtomColumns - 1) / wgmma::kAtomColumns;
    static constexpr int kChunksPerRow = kHeadDim / 8;  // 16-byte chunks

    // Rows per box: the largest power of two dividing both (page sizes are powers of two).
    __host__ __device__ static int box_rows(int page_size) { return min(page_size, kBlockKeys & -kBlockKeys); }
    // Producer warps issuing a tile's boxes: one per part, at most the warpgroup's (more warps
    // than parts, idle, cost the rest 1-3%: docs/decisions.md); from log2(page_size), no division.
    __host__ __device__ static constexpr int log2_of(int n) { return n > 1 ? 1 + log2_of(n / 2) : 0; }
    __host__ __device__ static int issuers(int page_shift) {
        return min(kWarps, kBlockKeys >> min(page_shift, log2_of(kBlockKeys & -kBlockKeys)));
    }
    static constexpr int kGroupRows = 8;  // rows per box of a part reaching past the keys (a swizzle atom's)
    static_assert(kBlockKeys % kGroupRows == 0, "whole groups of rows per tile");

    // The boxes of keys [k0, k0 + kBlockKeys) where they reach past the sequence's end kv_end:
    // box(kind, row, page_row) places `row` of the tile and the rows after it, kind 0 a part
    // (box_rows), 1 a group (kGroupRows), 2 one row, from the page holding tile row page_row, or
    // past the keys where page_row is -1. Host-callable: the unit tests check that every row
    // comes once, from its page or as zeros.
    template <class Box>
    __host__ __device__ static void plan_last(int page_size, int k0, int kv_end, Box&& box) {
        const int rows = box_rows(page_size);
#pragma unroll 1
        for (int part = 0; part < kBlockKeys; part += rows) {
            const int in_part = kv_end - k0 - part;  // rows of the part in the sequence
            if (in_part >= rows || in_part <= 0) {
                box(0, part, in_part > 0 ? part : -1);
                continue;
            }
#pragma unroll 1
            for (int row = part; row < part + rows; row += kGroupRows) {
                const int in_group = kv_end - k0 - row;
                if (in_group >= kGroupRows || in_group <= 0) {
                    box(1, row, in_group > 0 ? part : -1);
                } else {
#pragma unroll 1
                    for (int r = 0; r < kGroupRows; ++r) box(2, row + r, r < in_group ? part : -1);
                }
            }
        }
    }

    // Keys [k0, k0 + kBlockKeys) of KV head `head` into `destination`: issuer `issuer`'s parts of
    // issuers(pages.shift); the first issuer (kFirst: thread 0, its own copy of the walk, whose
    // registers are few) arms the barrier `full` and takes the whole of a tile reaching past
    // kv_end (plan_last()).
    // maps: a K or V cache's pages ({head_dim, page_size, heads, pages}) in boxes of a part, of
    // kGroupRows rows and of one row (TensorMaps). (Reading the parts' table entries first, or by
    // a warp's lanes, measured slower: docs/decisions.md.)
    template <bool kFirst>
    __device__ static void load(uint32_t full, uint32_t destination, const CUtensorMap* maps, const int* block_table,
                                StepPages pages, int page_size, int head, int k0, int kv_end, int issuer) {
        const auto page_of = [&](int row) { return __ldg(block_table + pages.entry + ((k0 + row) >> pages.shift)); };
        const auto box = [&](const CUtensorMap* map, int row, int on_page) {
            for (int atom = 0; atom < kAtoms; ++atom)
                hopper::tma_load_4d(destination + (atom * kBlockKeys + row) * wgmma::kRowBytes, map, atom * wgmma::kAtomColumns,
                                    (k0 + row) & (page_size - 1), head, on_page, full);
        };
        if (kFirst) hopper::barrier_arrive_expect(full, kAtoms * kBlockKeys * wgmma::kRowBytes);
        if (k0 + kBlockKeys <= kv_end) {
            const int rows = box_rows(page_size);
#pragma unroll 1
            for (int row = issuer * rows; row < kBlockKeys; row += rows * issuers(pages.shift)) box(maps, row, page_of(row));
        } else if (kFirst) {
            plan_last(page_size, k0, kv_end, [&](int kind, int row, int page_row) { box(maps + kind, row, page_row < 0 ? -1 : page_of(page_row)); });
        }
    }

    // Where a copy places chunk `chunk` of row `row` in the tile: the swizzled layout a box
    // writes (atom chunk / 8, 16-byte column (chunk % 8) ^ (row % 8)).
    static constexpr int kAtomBytes = kBlockKeys * wgmma::kRowBytes;
    static constexpr int kRowsPerPass = kThreads / kChunksPerRow;
    __host__ __device__ static constexpr uint32_t row_offset(int row, int chunk) {
        return chunk / 8 * kAtomBytes + row * wgmma::kRowBytes + (chunk ^ row) % 8 * 16;
    }
    static_assert(kThreads % kChunksPerRow == 0 && kBlockKeys % kRowsPerPass == 0, "whole rows per pass, whole passes per tile");

    // Keys [k0, k0 + kBlockKeys) of an element-row K or V tensor copied by the warpgroup, a
    // 16-byte chunk per thread and row through registers, keys from `end` on as zeros; `pages`
    // places the rows (StepPages: pages of the cache, s.batch between them; or, without a block
    // table, the sequence's rows a stride apart). Each lane holds one of the tile's pages (a tile
    // spans at most kBlockKeys / 16 + 1), each row takes its own by a shuffle. Then a fence for
    // wgmma's reads and a plain arrival.
    __device__ static void copy(uint32_t full, uint32_t destination, const void* tensor, const TensorStrides s,
                                const int* block_table, StepPages pages, int head, int k0, int end, int head_dim) {
        const int thread = threadIdx.x % kThreads, chunk = thread % kChunksPerRow;
        const int first_page = k0 >> pages.shift;
        const int page = block_table ? block_table[pages.entry + min(first_page + threadIdx.x % 32, (end - 1) >> pages.shift)]
                                     : pages.entry;
        const int column = head * int(s.head) + 8 * chunk, in_page = int((1u << pages.shift) - 1u);  // inside a page
#pragma unroll 1
        for (int pass = 0; pass < kBlockKeys / kRowsPerPass; ++pass) {
            const int row = thread / kChunksPerRow + pass * kRowsPerPass, key = k0 + row, inside = min(key, end - 1);
            const int row_page = __shfl_sync(0xffffffffu, page, (inside >> pages.shift) - first_page);
            const uint16_t* from = static_cast<const uint16_t*>(tensor) + int64_t(row_page) * int(s.batch) +
                                   (column + (inside & in_page) * int(s.row));
            hopper::store_shared_16(destination + row_offset(row, chunk),
                                    load_chunk_elements(from, key < end ? head_dim - 8 * chunk : 0));
        }
        hopper::fence_async_shared();  // the tile's stores, before wgmma reads it through the async proxy
        hopper::barrier_arrive(full);
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
