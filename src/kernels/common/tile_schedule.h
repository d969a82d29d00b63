// Prefill work tiles and their order. A tile is (batch, KV head, head tile, query block): the
// query rows of `heads_per_tile` heads of one KV head's group times `rows_per_head` positions,
// flattened head-major into the tile's rows. Long sequences take one head per tile; sequences
// shorter than a tile pack several heads of a GQA group into it, so one K/V read serves them all.
//
// Order (blocks start roughly in index order): the tiles that read one KV head's K/V run side
// by side, so K/V come from DRAM about once and then from L2. Causal launches of one block per
// tile take the query blocks that see the most keys first (longest processing time first, so
// that the last wave is short), within sections of KV heads whose K/V fit in a share of L2
// together. Persistent causal launches pair each query block with its mirror image (q and
// query_blocks - 1 - q), so that every unit a block takes costs about the same
// (docs/mmaprefill.md). Causal query blocks of one head end at the sequence's end, so that a
// partial block is the first, which sees the fewest keys, rather than the last, which sees them
// all with few of its consumers busy.
//
// Packed batches (FwdParams::cu_seqlens_q) are laid out by the lengths, which only the device
// knows: sequence b takes "virtual" query blocks of rows_per_head rows (sequence.h:
// packed_tile_sequence), and a tile finds its sequence by a binary search (packed_sequence()). So a batch
// costs what its sequences cost, whatever their mix, with no tile per padded position. Their
// tiles run virtual block by block, every head of a block side by side: a causal sequence's
// blocks go from its end back (TileWork), so a long prompt's dearest tiles start first.
#pragma once

#include <hip/hip_runtime.h>

#include <algorithm>
#include <cstdint>

#include "fmha/params.h"
#include "kernels/common/fast_divisor.h"
#include "kernels/common/sequence.h"

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
    bool end_aligned;      // query block q's rows end (query_blocks - q) x rows_per_head before the sequence's end
    bool persistent;       // blocks take units in rounds (else one block per tile)
    int tiles_per_unit;    // 2: a unit is a query block and its mirror (persistent causal), else 1 (no other value)
    int64_t units;         // tiles / tiles_per_unit
    int heads_kv, group;   // KV heads, query heads per KV head
    int pair_tiles;        // (batch, KV head, head tile) triples: tiles / query_blocks
    // The divisions locate_tile() makes, by this launch's divisors.
    FastDivisor by_query_blocks, by_halves, by_head_tiles, by_heads_kv, by_section_tiles, by_section_pair_tiles;
    bool packed;           // Q packed: query_blocks are the batch's virtual ones, and a pair_tile has batch 0
    FastDivisor by_rows_per_head, by_pair_tiles;  // packed: a virtual block's first row; the heads of a virtual block
    FastDivisor by_block_tokens;                  // packed: P(b)'s division (packed_sequence())

    // The family's tile: `block_rows` query rows; a persistent grid pays where tiles see few
    // key tiles: `persistent_max_query_blocks`; pairs pay where tiles outnumber the
    // multiprocessors (else they halve the blocks at work).
    static PrefillTiling of(const FwdParams& p, int block_rows, bool causal, int persistent_max_query_blocks,
                            int multiprocessors) {
        PrefillTiling t;
        const int group = p.heads_q / p.heads_kv;
        t.heads_kv = p.heads_kv, t.group = group;
        const bool pack = p.seqlen_q < block_rows && group > 1;
        t.rows_per_head = pack ? p.seqlen_q : block_rows;
        t.heads_per_tile = pack ? (group < block_rows / p.seqlen_q ? group : block_rows / p.seqlen_q) : 1;
        t.head_tiles = (group + t.heads_per_tile - 1) / t.heads_per_tile;
        t.query_blocks = (p.seqlen_q + t.rows_per_head - 1) / t.rows_per_head;
        t.end_aligned = causal && t.heads_per_tile == 1;
        t.packed = p.cu_seqlens_q != nullptr;
        // A packed batch's tiles differ in cost (sequences of any length, virtual blocks that run
        // empty), which fixed rounds do not balance: persistent only where no tile sees many keys.
        const int key_blocks = (p.seqlen_kv + block_rows - 1) / block_rows;
        t.persistent = t.query_blocks <= persistent_max_query_blocks && (!t.packed || key_blocks <= persistent_max_query_blocks);
        // P(b) = b + cu[b] / block_tokens; where no sequence outgrows a tile's positions, a divisor
        // past the token count gives each sequence exactly one virtual block (P(b) = b).
        const int block_tokens = p.seqlen_q <= t.rows_per_head && p.total_q < INT32_MAX ? p.total_q + 1 : t.rows_per_head;
        if (t.packed) t.query_blocks = p.batch + p.total_q / block_tokens;  // P(batch)
        const int64_t pairs = int64_t(t.packed ? 1 : p.batch) * p.heads_kv;
        const bool many = pairs * t.head_tiles * t.query_blocks > multiprocessors;
        t.tiles_per_unit = t.persistent && causal && t.query_blocks > 1 && many && !t.packed ? 2 : 1;
        // Paired: (query_blocks + 1) / 2 units per head tile, the middle one of an odd count alone.
        const int unit_blocks = t.tiles_per_unit == 2 ? (t.query_blocks + 1) / 2 * 2 : t.query_blocks;
        t.tiles = pairs * t.head_tiles * unit_blocks;
        t.units = t.tiles / t.tiles_per_unit;
        const int64_t kv_bytes = int64_t(p.seqlen_kv) * p.head_dim * 2 * 2;  // K and V of one KV head
        t.section_heads = 0;
        if (causal && t.tiles_per_unit == 1 && t.query_blocks > 1 && !t.packed)
            t.section_heads = int(kv_bytes < kSectionKVBytes ? kSectionKVBytes / kv_bytes : 1);
        t.pair_tiles = int(pairs * t.head_tiles);
        const int64_t section_pair_tiles = std::min<int64_t>(int64_t(t.section_heads) * t.head_tiles, t.pair_tiles);
        t.by_query_blocks = FastDivisor(t.query_blocks);
        t.by_halves = FastDivisor((t.query_blocks + 1) / 2);
        t.by_head_tiles = FastDivisor(t.head_tiles);
        t.by_heads_kv = FastDivisor(p.heads_kv);
        t.by_section_pair_tiles = FastDivisor(int(std::max<int64_t>(section_pair_tiles, 1)));
        t.by_section_tiles = FastDivisor(int(std::max<int64_t>(section_pair_tiles * t.query_blocks, 1)));
        t.by_rows_per_head = FastDivisor(t.rows_per_head);
        t.by_block_tokens = FastDivisor(block_tokens);
        t.by_pair_tiles = FastDivisor(t.pair_tiles);
        return t;
    }
};

// One tile, located.
struct PrefillTile {
    int64_t batch;
    int head_kv;
    int head0;     // first query head
    int heads;     // query heads in this tile (the group's last tile may hold fewer)
    int position0; // first position of each head, before end alignment (first_position())
    bool exists;   // false for the empty second half of a paired unit (an odd count's middle block)
};

// Tile `index` of a launch whose tiles fit 31 bits (the launcher checks), by the launch's fast
// divisors: a tile's placement is on each consumer's path from one tile to the next.
__host__ __device__ inline PrefillTile locate_tile(const PrefillTiling& t, int index) {
    int query_block, pair_tile;  // pair_tile: (batch, KV head, head tile), head tiles fastest
    bool exists = true;
    if (t.tiles_per_unit == 2) {  // unit u: the long query block, then its mirror
        const int unit = index / 2;
        pair_tile = t.by_halves.divide(unit);
        const int mirror = unit - pair_tile * int(t.by_halves.divisor);
        query_block = index % 2 == 0 ? t.query_blocks - 1 - mirror : mirror;
        exists = index % 2 == 0 || mirror != t.query_blocks - 1 - mirror;
    } else if (t.packed) {  // heads fastest
        query_block = t.by_pair_tiles.divide(index);
        pair_tile = index - query_block * t.pair_tiles;
    } else if (t.section_heads == 0) {  // query blocks fastest
        pair_tile = t.by_query_blocks.divide(index);
        query_block = index - pair_tile * t.query_blocks;
    } else {  // sections of KV heads; in each, the last query block of every head first
        const int section_pair_tiles = int(t.by_section_pair_tiles.divisor);
        const int section = t.by_section_tiles.divide(index);
        const int first_pair_tile = section * section_pair_tiles;
        const int within = index - first_pair_tile * t.query_blocks;
        int rank;  // of the query block, counted from the last
        if (first_pair_tile + section_pair_tiles <= t.pair_tiles) {
            rank = t.by_section_pair_tiles.divide(within);
            pair_tile = first_pair_tile + within - rank * section_pair_tiles;
        } else {  // the last section, cut short
            const int pair_tiles_here = t.pair_tiles - first_pair_tile;
            rank = within / pair_tiles_here;
            pair_tile = first_pair_tile + within % pair_tiles_here;
        }
        query_block = t.query_blocks - 1 - rank;
    }
    PrefillTile tile;
    const int kv_pair = t.by_head_tiles.divide(pair_tile);  // (batch, KV head)
    const int head_tile = pair_tile - kv_pair * t.head_tiles;
    const int batch = t.by_heads_kv.divide(kv_pair);
    tile.head_kv = kv_pair - batch * t.heads_kv;
    tile.batch = batch;
    tile.head0 = tile.head_kv * t.group + head_tile * t.heads_per_tile;
    tile.heads = min(t.heads_per_tile, t.group - head_tile * t.heads_per_tile);
    tile.position0 = query_block * t.rows_per_head;
    tile.exists = exists;
    return tile;
}

// A packed batch's virtual query block `block` (PrefillTiling::packed): its sequence (the last b
// with P(b) <= block; or `known`, where the caller has it), and the sequence's first virtual
// block and count of them.
struct PackedBlock {
    int sequence, first, count;
};
__host__ __device__ inline PackedBlock packed_sequence(const PrefillTiling& t, const int* cu_seqlens, int batch, int block,
                                                       int known = -1) {
    const auto divide = [&](int rows) { return t.by_block_tokens.divide(rows); };
    const int sequence = known >= 0 ? known : packed_tile_sequence(cu_seqlens, batch, block, divide);
    const int first = sequence + divide(cu_seqlens[sequence]);
    return {sequence, first, sequence + 1 + divide(cu_seqlens[sequence + 1]) - first};
}

// The position of a tile's first row in its sequence of len_q positions: negative where an
// end-aligned tile begins before the sequence (its rows there do not exist).
__host__ __device__ inline int first_position(const PrefillTiling& t, const PrefillTile& tile, int len_q) {
    return t.end_aligned ? tile.position0 - (t.query_blocks * t.rows_per_head - len_q) : tile.position0;
}

// The round of a block's step `step`: a unit is one or two tiles, so a shift rather than a
// division (a tile's placement is on each consumer's path from one tile to the next).
__host__ __device__ inline int round_of(const PrefillTiling& t, int step) { return step >> (t.tiles_per_unit - 1); }

// Whether a block's steps go on to `step`: some block of the grid takes a unit in its round.
// (The division stays: with round_of here ptxas spills in Hopper's d64 consumers.)
__host__ __device__ inline bool has_step(const PrefillTiling& t, int step, int blocks) {
    return int64_t(step / t.tiles_per_unit) * blocks < t.units;
}

// The tile a persistent block takes at its step `step`, or -1 past the last: units of
// tiles_per_unit tiles in rounds; in round r, block b takes unit r x blocks + b, or, in odd
// rounds, the mirror image r x blocks + (blocks - 1 - b), so that where units differ in length
// (variable sequence lengths) a block taking a long unit in one round tends to take a short one
// in the next. A grid of one block per tile takes tile blockIdx.x at step 0.
__host__ __device__ inline int persistent_tile(const PrefillTiling& t, int step, int block, int blocks) {
    const int round = round_of(t, step);
    const int64_t unit = int64_t(round) * blocks + (round % 2 == 0 ? block : blocks - 1 - block);
    return unit < t.units ? int(unit) * t.tiles_per_unit + (step & (t.tiles_per_unit - 1)) : -1;
}

}  // namespace fmha
