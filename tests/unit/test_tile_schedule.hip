// The prefill work tiles (kernels/common/tile_schedule.h): every (batch, query head, query
// block) is one tile of one block's steps, and persistent causal units cost alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

#include "kernels/common/tile_schedule.h"

namespace fmha {
namespace {

FwdParams shape(int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_kv) {
    FwdParams p{};
    p.batch = batch, p.heads_q = heads_q, p.heads_kv = heads_kv, p.seqlen_q = seqlen_q, p.seqlen_kv = seqlen_kv;
    p.head_dim = 128;
    return p;
}

// Walks every block's steps as the kernel does; counts each (batch, query head, position) row
// covered, and each block's key tiles (causal: a query block's rows see keys up to its last
// row's diagonal), and notes each tile's first row.
struct Coverage {
    std::map<std::tuple<int64_t, int, int>, int> rows;
    std::vector<int64_t> key_tiles_per_block;
    std::vector<int> first_rows;  // of every tile taken
};
Coverage walk(const FwdParams& p, const PrefillTiling& t, int blocks, bool causal, int block_keys) {
    Coverage c;
    c.key_tiles_per_block.assign(blocks, 0);
    for (int block = 0; block < blocks; ++block) {
        for (int step = 0; has_step(t, step, blocks); ++step) {
            const int index = persistent_tile(t, step, block, blocks);
            if (index < 0) continue;
            const PrefillTile tile = locate_tile(t, index);
            const int position0 = first_position(t, tile, p.seqlen_q);
            const int last = std::min(position0 + t.rows_per_head, p.seqlen_q) - 1;
            if (!tile.exists || std::max(position0, 0) > last) continue;
            const int keys = causal ? std::min(p.seqlen_kv, last + p.seqlen_kv - p.seqlen_q + 1) : p.seqlen_kv;
            c.key_tiles_per_block[block] += (keys + block_keys - 1) / block_keys;
            c.first_rows.push_back(std::max(position0, 0));
            for (int h = 0; h < tile.heads; ++h)
                for (int position = std::max(position0, 0); position <= last; ++position)
                    ++c.rows[{tile.batch, tile.head0 + h, position}];
        }
    }
    return c;
}

void expect_every_row_once(const FwdParams& p, const Coverage& c) {
    ASSERT_EQ(c.rows.size(), size_t(p.batch) * p.heads_q * p.seqlen_q);
    for (const auto& [row, count] : c.rows) ASSERT_EQ(count, 1) << "batch " << std::get<0>(row) << " head " << std::get<1>(row);
}

TEST(FastDivisor, DividesLikeTheDivisionOperator) {
    std::vector<int> divisors;
    for (int d = 1; d <= 300; ++d) divisors.push_back(d);
    for (int d : {511, 512, 513, 65535, 65536, 65537, 1000003, (1 << 30) - 1, 1 << 30, (1 << 30) + 1, INT32_MAX})
        divisors.push_back(d);
    uint32_t state = 12345;  // a fixed LCG: the same numerators every run
    for (int d : divisors) {
        const FastDivisor by(d);
        for (int n = 0; n < 5000; ++n) ASSERT_EQ(by.divide(n), n / d) << n << " / " << d;
        for (int i = 0; i < 5000; ++i) {
            state = state * 1664525u + 1013904223u;
            const int n = int(state >> 1);
            ASSERT_EQ(by.divide(n), n / d) << n << " / " << d;
        }
        for (int64_t n : {int64_t(INT32_MAX), int64_t(INT32_MAX) - 1, int64_t(d) - 1, int64_t(d), int64_t(d) + 1})
            if (n <= INT32_MAX) ASSERT_EQ(by.divide(int(n)), int(n) / d) << n << " / " << d;
    }
}

TEST(TileSchedule, PersistentCausalPairsEveryQueryBlockWithItsMirror) {
    for (int rows : {128, 192})
        for (int seqlen : {1024, 1000, 640, 200}) {  // even and odd query-block counts, partial blocks
            const FwdParams p = shape(3, 8, 2, seqlen, seqlen);
            const PrefillTiling t = PrefillTiling::of(p, rows, /*causal=*/true, 8, 7);
            ASSERT_TRUE(t.persistent);
            EXPECT_EQ(t.tiles_per_unit, 2) << seqlen;
            expect_every_row_once(p, walk(p, t, 7, true, 128));
        }
}

TEST(TileSchedule, NoPairsWhereTilesAreFewerThanMultiprocessors) {
    // 2 heads x 2 query blocks on 132 multiprocessors: pairs would leave half the tiles waiting.
    const FwdParams p = shape(1, 2, 2, 130, 130);
    const PrefillTiling t = PrefillTiling::of(p, 128, true, 8, 132);
    EXPECT_TRUE(t.persistent);
    EXPECT_EQ(t.tiles_per_unit, 1);
    EXPECT_EQ(t.units, 4);
    expect_every_row_once(p, walk(p, t, 4, true, 128));
}

TEST(TileSchedule, CausalQueryBlocksEndAtTheSequenceEnd) {
    // 1024 positions in 192-row tiles: the partial block (64 rows) is the first, which sees the
    // fewest keys; every other block holds 192 rows, the last ending at position 1023.
    const FwdParams p = shape(1, 1, 1, 1024, 1024);
    const PrefillTiling t = PrefillTiling::of(p, 192, true, 8, 1);
    EXPECT_TRUE(t.end_aligned);
    const Coverage c = walk(p, t, 1, true, 112);
    expect_every_row_once(p, c);
    std::vector<int> firsts = c.first_rows;
    std::sort(firsts.begin(), firsts.end());
    EXPECT_EQ(firsts, (std::vector<int>{0, 64, 256, 448, 640, 832}));
    EXPECT_EQ(c.key_tiles_per_block[0], 1 + 3 + 4 + 6 + 8 + 10);  // 64, 256, ... 1024 keys in tiles of 112

    const PrefillTiling plain = PrefillTiling::of(p, 192, false, 8, 1);  // without the mask, blocks start at 0
    EXPECT_FALSE(plain.end_aligned);
    EXPECT_EQ(walk(p, plain, 1, false, 112).first_rows.back(), 960);
}

TEST(TileSchedule, PairedUnitsBalanceTheBlocks) {
    // b4 h32 s1024, 128-row tiles on 132 blocks: a query block's key tiles range from 1 to 8;
    // each unit holds 9, so no block holds more than one unit above the average.
    const FwdParams p = shape(4, 32, 32, 1024, 1024);
    const PrefillTiling t = PrefillTiling::of(p, 128, true, 8, 132);
    const Coverage c = walk(p, t, 132, true, 128);
    expect_every_row_once(p, c);
    int64_t most = 0, total = 0;
    for (int64_t k : c.key_tiles_per_block) most = std::max(most, k), total += k;
    EXPECT_LE(most, total / 132 + 9);
    EXPECT_EQ(most % 9, 0);
}

TEST(TileSchedule, OneTilePerBlockAndPersistentNonCausalCoverEveryRow) {
    const FwdParams long_causal = shape(2, 4, 4, 4096, 4096);
    const PrefillTiling one_per_block = PrefillTiling::of(long_causal, 128, true, 8, 132);
    EXPECT_FALSE(one_per_block.persistent);
    EXPECT_GT(one_per_block.section_heads, 0);
    expect_every_row_once(long_causal, walk(long_causal, one_per_block, int(one_per_block.units), true, 128));

    const FwdParams short_plain = shape(5, 6, 3, 1000, 1000);
    const PrefillTiling persistent = PrefillTiling::of(short_plain, 192, false, 8, 11);
    EXPECT_TRUE(persistent.persistent);
    EXPECT_EQ(persistent.tiles_per_unit, 1);
    expect_every_row_once(short_plain, walk(short_plain, persistent, 11, false, 128));
}

TEST(TileSchedule, PackedGqaTilesCoverEveryHead) {
    const FwdParams p = shape(2, 12, 2, 40, 300);  // 6 heads per KV head, 40 positions: 3 heads per 128-row tile
    const PrefillTiling t = PrefillTiling::of(p, 128, true, 8, 5);
    EXPECT_EQ(t.heads_per_tile, 3);
    expect_every_row_once(p, walk(p, t, 5, true, 128));
}

// A packed batch's tiles differ in cost (one virtual block per sequence runs empty), which a
// persistent grid's fixed rounds do not balance: chunked prefill (few query blocks, many keys)
// takes a block per tile; short sequences with short keys stay persistent.
TEST(TileSchedule, PackedBatchesArePersistentOnlyWithFewKeys) {
    std::vector<int> cu = {0, 512, 1024, 1536, 2048};
    FwdParams chunks = shape(4, 32, 8, 512, 8192);
    chunks.cu_seqlens_q = cu.data(), chunks.total_q = cu.back();
    EXPECT_FALSE(PrefillTiling::of(chunks, 128, true, 8, 132).persistent);
    chunks.cu_seqlens_q = nullptr;  // the same shape padded: every tile alike, paired rounds
    EXPECT_TRUE(PrefillTiling::of(chunks, 128, true, 8, 132).persistent);

    FwdParams prompts = shape(4, 32, 8, 512, 512);
    prompts.cu_seqlens_q = cu.data(), prompts.total_q = cu.back();
    EXPECT_TRUE(PrefillTiling::of(prompts, 128, true, 8, 132).persistent);
}

// A packed batch (cu_seqlens): each virtual query block, placed as TileWork places it (its
// sequence by packed_sequence(), end-aligned from the sequence's end where causal), covers
// every (sequence, head, position) row once, and long and empty sequences among short ones cost
// no tiles per padded position.
TEST(TileSchedule, PackedBatchesCoverEveryRowOnce) {
    for (const bool causal : {false, true}) {
        for (const std::vector<int>& lengths : {std::vector<int>{1000, 0, 1, 129, 128, 7},
                                                std::vector<int>{5, 3, 40, 2}, std::vector<int>{4096},
                                                std::vector<int>{300, 20000, 1, 5000}}) {
            std::vector<int> cu = {0};
            for (int n : lengths) cu.push_back(cu.back() + n);
            FwdParams p = shape(int(lengths.size()), 8, 2, *std::max_element(lengths.begin(), lengths.end()), 1);
            p.cu_seqlens_q = cu.data();
            p.total_q = cu.back();
            const PrefillTiling t = PrefillTiling::of(p, 128, causal, 8, 132);
            EXPECT_EQ(t.query_blocks, p.seqlen_q <= t.rows_per_head ? p.batch : p.batch + p.total_q / t.rows_per_head);
            EXPECT_EQ(t.tiles, int64_t(t.query_blocks) * t.pair_tiles);
            std::map<std::tuple<int64_t, int, int>, int> rows;
            for (int index = 0; index < t.tiles; ++index) {
                const PrefillTile tile = locate_tile(t, index);
                const PackedBlock found = packed_sequence(t, cu.data(), p.batch, tile.position0 / t.rows_per_head);
                const int block = tile.position0 / t.rows_per_head - found.first, len = lengths[found.sequence];
                ASSERT_LT(block, found.count);
                const int first = t.end_aligned ? len - (block + 1) * t.rows_per_head : block * t.rows_per_head;
                for (int h = 0; h < tile.heads; ++h)
                    for (int i = std::max(first, 0); i < std::min(first + t.rows_per_head, len); ++i)
                        ++rows[{found.sequence, tile.head0 + h, i}];
            }
            ASSERT_EQ(rows.size(), size_t(p.total_q) * p.heads_q) << (causal ? "causal" : "no mask");
            for (const auto& [row, count] : rows) ASSERT_EQ(count, 1) << "sequence " << std::get<0>(row);
        }
    }
}

// The sequence of a virtual block (packed_tile_sequence's binary search) is the last b with
// P(b) = b + cu[b] / rows at or below it, as a scan finds it: batches of 1 to 3001 sequences
// around powers of two, empty sequences and runs of them, every block.
TEST(TileSchedule, PackedTileSequenceIsTheLastSequenceStartingAtOrBeforeTheBlock) {
    uint32_t state = 7;
    const auto next = [&] { return state = state * 1664525u + 1013904223u, int(state >> 8); };
    for (const int batch : {1, 2, 3, 7, 8, 9, 63, 64, 65, 255, 256, 513, 3001}) {
        for (const int rows : {64, 128}) {
            std::vector<int> cu = {0};
            for (int b = 0; b < batch; ++b) cu.push_back(cu.back() + (next() % 4 == 0 ? 0 : next() % 700));
            const auto divide = [&](int n) { return n / rows; };
            const int blocks = batch + cu.back() / rows;  // P(batch)
            int expected = 0;
            for (int block = 0; block < blocks; ++block) {
                while (expected + 1 < batch && expected + 1 + cu[expected + 1] / rows <= block) ++expected;
                ASSERT_EQ(packed_tile_sequence(cu.data(), batch, block, divide), expected)
                    << "batch " << batch << ", rows " << rows << ", block " << block;
            }
        }
    }
}

}  // namespace
}  // namespace fmha
