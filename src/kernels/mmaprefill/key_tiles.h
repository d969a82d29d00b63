// The key tiles of a tensor-core prefill work tile, as every main loop of the family walks
// them: from the last key tile back to the first (the tiles that cross the diagonal first;
// every tile ends inside the sequence, and keys at negative positions are zeros, masked), and
// per consumer (a wgmma warpgroup, an MFMA wave) the range its rows see and which tiles need
// the mask (docs/mmaprefill.md).
#pragma once

#include <hip/hip_runtime.h>

#include <type_traits>

#include "fmha/params.h"
#include "kernels/common/mask.h"
#include "kernels/common/sequence.h"
#include "kernels/common/tile_schedule.h"

namespace fmha {
namespace mmaprefill {

// Where a packed batch's sequence starts in its tensors, in rows of Q/O and of K/V (TileWork).
struct PackedRows {
    int q_row0, kv_row0;
};
struct PaddedRows {};

// One work tile as producer and consumers both derive it: its rows, its sequence's lengths, and
// the key tiles its rows see, walked back from tiles_end: kv_end, or (on_pages: a paged cache)
// kv_end rounded up to a whole tile, so that tiles lie on a grid of block_keys from key 0 and
// each holds whole pages or part of one (paged_tiles.h); keys past kv_end are then masked.
// kPacked: the launch may be a packed batch (PrefillTiling::packed); kernels built without it
// hold none of its state.
template <bool kMasked, bool kPacked = true>
struct TileWork : std::conditional_t<kPacked, PackedRows, PaddedRows> {
    PrefillTile tile;   // position0: first_position(), negative where the tile begins before the sequence
    int len_q, len_kv;
    KeyMask<kMasked> mask;
    int last_position;  // of the tile's rows that exist
    int kv_end;         // one past the last key some row sees
    int tiles_end;      // one past the last key tile's last key
    int key_tiles;      // 0 where no row sees a key
    bool has_rows;      // false where the tile lies past its sequence's length

    // sequence: a packed tile's, where the caller knows it (a claimed tile's, from the producer), else -1.
    __device__ static TileWork of(const FwdParams& p, const PrefillTiling& tiling, int index, int block_keys,
                                  bool on_pages = false, int sequence = -1) {
        TileWork w;
        w.tile = locate_tile(tiling, index);
        const int* cu_seqlens_q = packed_only<kPacked>(p.cu_seqlens_q);
        const int* cu_seqlens_kv = packed_only<kPacked>(p.cu_seqlens_kv);
        int block = 0;  // packed: the tile's query block in its sequence
        if constexpr (kPacked) {
            if (tiling.packed) {  // a virtual query block: its sequence, and its place in it
                const int virtual_block = tiling.by_rows_per_head.divide(w.tile.position0);
                const PackedBlock found = packed_sequence(tiling, cu_seqlens_q, p.batch, virtual_block, sequence);
                w.tile.batch = found.sequence;
                block = virtual_block - found.first;
                w.tile.position0 = block * tiling.rows_per_head;
            }
            w.q_row0 = cu_seqlens_q ? cu_seqlens_q[w.tile.batch] : 0;
            w.kv_row0 = cu_seqlens_kv ? cu_seqlens_kv[w.tile.batch] : 0;
        }
        w.len_q = sequence_length(p.seqlens_q, cu_seqlens_q, w.tile.batch, p.seqlen_q);
        w.len_kv = sequence_length(p.seqlens_kv, cu_seqlens_kv, w.tile.batch, p.seqlen_kv);
        // End-aligned packed blocks run from the sequence's end back, the most keys first.
        if (kMasked && kPacked && tiling.packed && tiling.end_aligned)
            w.tile.position0 = w.len_q - (block + 1) * tiling.rows_per_head;
        else if (kMasked)
            w.tile.position0 = first_position(tiling, w.tile, w.len_q);
        w.has_rows = w.tile.exists && w.tile.position0 < w.len_q && (!kMasked || w.tile.position0 + tiling.rows_per_head > 0);
        w.mask = KeyMask<kMasked>::of(w.len_q, w.len_kv, p.window);
        w.last_position = min(w.tile.position0 + tiling.rows_per_head, w.len_q) - 1;
        int kv_begin = 0;
        w.kv_end = 0;
        if (w.has_rows) w.mask.key_range(inside(w.tile.position0), w.last_position, kv_begin, w.kv_end);
        w.key_tiles = (w.kv_end - kv_begin + block_keys - 1) / block_keys;
        w.tiles_end = w.kv_end;
        if (on_pages && w.key_tiles > 0) {
            w.tiles_end = (w.kv_end + block_keys - 1) / block_keys * block_keys;
            w.key_tiles = w.tiles_end / block_keys - kv_begin / block_keys;
        }
        return w;
    }
    // TMA coordinates (row, batch) of the sequence's row `row` in Q/O and in K/V: packed tensors
    // are one batch of all their rows.
    __device__ int q_row(int row) const {
        if constexpr (kPacked) return this->q_row0 + row;
        return row;
    }
    __device__ int kv_row(int row) const {
        if constexpr (kPacked) return this->kv_row0 + row;
        return row;
    }
    __device__ int q_batch(const FwdParams& p) const { return kPacked && p.cu_seqlens_q ? 0 : int(tile.batch); }
    __device__ int kv_batch(const FwdParams& p) const { return kPacked && p.cu_seqlens_kv ? 0 : int(tile.batch); }
    __device__ int first_key(int i, int block_keys) const { return tiles_end - (i + 1) * block_keys; }
    // Only masked tiles are end-aligned (PrefillTiling::of), so only theirs may begin before the
    // sequence: the first position at or after `position` inside it, and whether a row exists.
    __device__ static int inside(int position) { return kMasked ? max(position, 0) : position; }
    __device__ bool has_position(int position) const { return (!kMasked || position >= 0) && position < len_q; }
};

// What a consumer's main loop needs of a work tile, in few registers: where its key tiles are,
// which of them its rows (a warpgroup's 64, a wave's 32) see at all ([begin, end): the others
// it only hands back or skips), and which of those cross the mask (judged from the positions
// the rows span; all of a packed tile's positions). A thread holds kThreadRows rows.
template <bool kMasked, int kThreadRows>
struct KeyTiles {
    int tiles_end, count;
    int seen_end;      // one past the last key some row of the work tile sees
    int begin, end;    // the key tiles some row of this consumer sees
    int masked_above;  // key tiles reaching past this key need the mask (the window's right edge)
    int masked_below;  // and so do those starting at or before this one (its left edge; keys before the sequence)
    KeyWindow window;
    int diagonal[kThreadRows];  // of this thread's rows
    int first_diagonal, last_diagonal;  // of the consumer's first and last rows (unmasked launches read them)

    // row0: the consumer's first row in the tile, of consumer_rows.
    template <class Work>
    __device__ static KeyTiles of(const Work& w, const PrefillTiling& tiling, int row0, int consumer_rows,
                                  KeyWindow window, const int (&position)[kThreadRows], int block_keys) {
        KeyTiles k;
        k.tiles_end = w.tiles_end, k.seen_end = w.kv_end, k.count = w.key_tiles, k.window = window;
        const bool packed = tiling.heads_per_tile > 1;
        const int first = w.inside(packed ? w.tile.position0 : w.tile.position0 + row0);
        const int last = packed ? w.last_position : min(w.tile.position0 + row0 + consumer_rows - 1, w.len_q - 1);
        k.masked_above = kMasked ? w.mask.diagonal(first) + window.right : w.len_kv - 1;
        k.masked_below = kMasked ? max(w.mask.diagonal(last) - window.left - 1, -1) : -1;
        for (int h = 0; h < kThreadRows; ++h) k.diagonal[h] = w.mask.diagonal(position[h]);
        k.first_diagonal = w.mask.diagonal(first), k.last_diagonal = w.mask.diagonal(last);
        int lo = 0, hi = 0;
        if (first <= last) w.mask.key_range(first, last, lo, hi);
        // Key tile i holds keys [tiles_end - (i + 1) block_keys, tiles_end - i block_keys).
        k.begin = lo < hi ? (k.tiles_end - hi) / block_keys : 0;
        k.end = lo < hi ? min(k.count, (k.tiles_end - 1 - lo) / block_keys + 1) : 0;
        return k;
    }
    __device__ int first_key(int i, int block_keys) const { return tiles_end - (i + 1) * block_keys; }
    // Without a mask only the tiles reaching before key 0 or past seen_end (= len_kv) need it,
    // which spares registers the bounds would hold through the main loop.
    __device__ bool needs_mask(int i, int block_keys) const {
        const int k0 = first_key(i, block_keys);
        const bool outside = k0 < 0 || k0 + block_keys > seen_end;
        return kMasked ? outside || k0 + block_keys - 1 > masked_above || k0 <= masked_below : outside;
    }
    // needs_mask(), and with `one_sided` also the tiles holding keys on both sides of some row's
    // diagonal, so that each of the others lies on one side of every row's (ALiBi's linear form in
    // wgmma_kernel.h): past the first row's diagonal and at or before the last row's. Masked
    // launches take every tile past the first row's (derived from masked_above: no register more
    // through the loop; the causal mask takes them anyway, a window reaching past it adds some).
    __device__ bool needs_mask(int i, int block_keys, bool one_sided) const {
        const int k0 = first_key(i, block_keys), k_last = k0 + block_keys - 1;
        const bool crossing = kMasked ? k_last > masked_above - window.right : k_last > first_diagonal && k0 <= last_diagonal;
        return needs_mask(i, block_keys) || (one_sided && crossing);
    }
    // Keys outside [0, seen_end) and the shared mask rule are left to check.
    __device__ bool sees(int h, int key) const {
        return MaskRow{diagonal[h], unsigned(key) < unsigned(seen_end)}.template sees<kMasked>(key, window);
    }
};

}  // namespace mmaprefill
}  // namespace fmha
