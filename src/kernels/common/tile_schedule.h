// Prefill work tiles and their order. A tile is (batch, KV head, head tile, query block): the
// query rows of `heads_per_tile` heads of one KV head's group times `rows_per_head` positions,
// flattened head-major into the tile's rows. Long sequences take one head per tile; sequences
// shorter than a tile pack several heads of a GQA group into it, so one K/V read serves them all.
//
// Order (blocks start roughly in index order): the tiles that read one KV head's K/V run side
// by side, so K/V come from DRAM about once and then from L2. Causal launches also take the
// query blocks that see the most keys first (longest processing time first, so that the last
// wave is short), within sections of KV heads whose K/V fit in a share of L2 together
// (docs/mmaprefill.md).
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "fmha/params.h"

namespace fmha {

// The K/V bytes a causal section of KV heads may hold: a quarter of an H100's 50 MB L2.
inline constexpr int64_t kSectionKVBytes = int64_t(12) << 20;

struct PrefillTiling {
    int rows_per_head;     // positions of one head in a tile
    int heads_per_tile;    // query heads of one group in a tile
    int head_tiles;        // tiles per group of query heads
    int query_blocks;      // tiles along the positions
    int64_t tiles;
    int section_heads;     // longest first: (batch, KV head) pairs per section; 0: query blocks fastest

    static PrefillTiling of(const FwdParams& p, int block_rows, bool causal) {
        PrefillTiling t;
        const int group = p.heads_q / p.heads_kv;
        const bool pack = p.seqlen_q < block_rows && group > 1;
        t.rows_per_head = pack ? p.seqlen_q : block_rows;
        t.heads_per_tile = pack ? (group < block_rows / p.seqlen_q ? group : block_rows / p.seqlen_q) : 1;
        t.head_tiles = (group + t.heads_per_tile - 1) / t.heads_per_tile;
        t.query_blocks = (p.seqlen_q + t.rows_per_head - 1) / t.rows_per_head;
        const int64_t pairs = int64_t(p.batch) * p.heads_kv;
        t.tiles = pairs * t.head_tiles * t.query_blocks;
        const int64_t kv_bytes = int64_t(p.seqlen_kv) * p.head_dim * 2 * 2;  // K and V of one KV head
        t.section_heads = 0;
        if (causal && t.query_blocks > 1) t.section_heads = int(kv_bytes < kSectionKVBytes ? kSectionKVBytes / kv_bytes : 1);
        return t;
    }
};

// One tile, located.
struct PrefillTile {
    int64_t batch;
    int head_kv;
    int head0;     // first query head
    int heads;     // query heads in this tile (the group's last tile may hold fewer)
    int position0; // first position of each head
};

// Tile `index` of a launch whose tiles fit 32 bits (the launcher checks): 32-bit divisions are
// a few instructions, 64-bit ones a subroutine call.
__device__ inline PrefillTile locate_tile(const PrefillTiling& t, int index, int heads_q, int heads_kv) {
    int query_block, pair_tile;  // pair_tile: (batch, KV head, head tile), head tiles fastest
    if (t.section_heads == 0) {  // query blocks fastest
        query_block = index % t.query_blocks;
        pair_tile = index / t.query_blocks;
    } else {  // sections of KV heads; in each, the last query block of every head first
        const int section_pair_tiles = int(t.section_heads) * t.head_tiles;
        const int section = index / (section_pair_tiles * t.query_blocks);
        const int first_pair_tile = section * section_pair_tiles;
        const int pair_tiles_here = min(section_pair_tiles, int(t.tiles / t.query_blocks) - first_pair_tile);
        const int within = index - first_pair_tile * t.query_blocks;
        query_block = t.query_blocks - 1 - within / pair_tiles_here;
        pair_tile = first_pair_tile + within % pair_tiles_here;
    }
    PrefillTile tile;
    const int head_tile = pair_tile % t.head_tiles;
    tile.head_kv = pair_tile / t.head_tiles % heads_kv;
    tile.batch = pair_tile / t.head_tiles / heads_kv;
    const int group = heads_q / heads_kv;
    tile.head0 = tile.head_kv * group + head_tile * t.heads_per_tile;
    tile.heads = min(t.heads_per_tile, group - head_tile * t.heads_per_tile);
    tile.position0 = query_block * t.rows_per_head;
    return tile;
}

// A persistent grid's tiles: in round r, block b takes tile r x blocks + b, or, in odd rounds,
// the mirror image r x blocks + (blocks - 1 - b), so that over a list of tiles in decreasing
// length each block's total stays near the average (a block taking the longest tile of one
// round takes the shortest of the next). -1 past the last tile.
__device__ inline int persistent_tile(int round, int block, int blocks, int64_t tiles) {
    const int64_t index = int64_t(round) * blocks + (round % 2 == 0 ? block : blocks - 1 - block);
    return index < tiles ? int(index) : -1;
}

}  // namespace fmha
