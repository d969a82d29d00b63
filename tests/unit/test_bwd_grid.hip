// The backward's grid (kernels/mmabwd/block_steps.h: KeyTile): every key tile of every (KV head,
// sequence) pair is one block, a pair's tiles start in order (the deterministic loop's turns wait
// on lower tiles), and the blocks that run at once share few pairs (their Q, dO and dQ rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "kernels/mmabwd/block_steps.h"

namespace fmha {
namespace {

BwdParams padded(int batch, int heads_kv, int seqlen_kv) {
    BwdParams p{};
    p.batch = batch, p.heads_q = 2 * heads_kv, p.heads_kv = heads_kv, p.seqlen_q = seqlen_kv, p.seqlen_kv = seqlen_kv;
    p.head_dim = 128;
    return p;
}

struct Shape {
    int batch, heads_kv, seqlen_kv, keys;
};
constexpr Shape kShapes[] = {
    {16, 16, 1024, 128}, {4, 16, 4096, 128}, {1, 16, 16384, 128}, {9, 5, 300, 128},  // ends in a group of 2
    {1, 1, 64, 64},      {3, 7, 1000, 64},   {200, 1, 100, 64},   {2, 8, 70000, 128},
};

TEST(BackwardGrid, EveryKeyTileOnceAndEachPairsTilesInOrder) {
    for (const Shape& s : kShapes) {
        const BwdParams p = padded(s.batch, s.heads_kv, s.seqlen_kv);
        const int tiles = (s.seqlen_kv + s.keys - 1) / s.keys, blocks = int(mmabwd::KeyTile::count(p, s.keys));
        ASSERT_EQ(blocks, tiles * s.heads_kv * s.batch);
        std::map<std::pair<int, int>, int> next_tile;  // per (sequence, KV head)
        for (int block = 0; block < blocks; ++block) {
            const mmabwd::KeyTile t = mmabwd::KeyTile::of(block, p, s.keys);
            ASSERT_TRUE(t.batch >= 0 && t.batch < s.batch && t.head_kv >= 0 && t.head_kv < s.heads_kv) << "block " << block;
            const int expected = next_tile[std::make_pair(t.batch, t.head_kv)]++;
            ASSERT_EQ(t.index, expected) << "block " << block << " of b" << s.batch << " s" << s.seqlen_kv;
        }
        ASSERT_EQ(next_tile.size(), size_t(s.batch) * s.heads_kv);
        for (const auto& [pair, count] : next_tile) ASSERT_EQ(count, tiles);
    }
}

TEST(BackwardGrid, AWaveOfBlocksSharesItsPairs) {
    constexpr int kWave = mmabwd::KeyTile::kWaveBlocks;
    for (const Shape& s : kShapes) {
        const BwdParams p = padded(s.batch, s.heads_kv, s.seqlen_kv);
        const int tiles = (s.seqlen_kv + s.keys - 1) / s.keys, blocks = int(mmabwd::KeyTile::count(p, s.keys));
        const int group = std::min(s.batch * s.heads_kv, (kWave + tiles - 1) / tiles);
        for (int first = 0; first < blocks; first += 7) {  // windows of a wave at many offsets
            std::set<std::pair<int, int>> pairs;
            for (int block = first; block < std::min(blocks, first + kWave); ++block) {
                const mmabwd::KeyTile t = mmabwd::KeyTile::of(block, p, s.keys);
                pairs.insert({t.batch, t.head_kv});
            }
            ASSERT_LE(int(pairs.size()), 2 * group) << "blocks " << first << ".. of b" << s.batch << " s" << s.seqlen_kv;
        }
    }
}

}  // namespace
}  // namespace fmha
