// The decode family's key-range variants (kernels/decode/shape.h): the limits the heuristic
// follows, per head dim, wave size and group width, and the shapes of the few-keys variant.
#include <gtest/gtest.h>

#include "fmha/params.h"
#include "kernels/common/scoring.h"
#include "kernels/config.h"
#include "kernels/decode/plan.h"
#include "kernels/decode/shape.h"

namespace fmha {
namespace decode {
namespace {

template <int kHeadDim, Arch kArch>
using Cfg = KernelConfig<DType::fp16, kHeadDim, HeadsKind::gqa, Mask::nomask, kArch>;

TEST(DecodeVariants, KeyRangesPickTheirVariant) {
    EXPECT_EQ(key_variant(1, 16), Keys::two);
    EXPECT_EQ(key_variant(2, 16), Keys::two);  // the headline shapes keep their variant
    EXPECT_EQ(key_variant(3, 16), Keys::few);
    EXPECT_EQ(key_variant(16, 16), Keys::few);
    EXPECT_EQ(key_variant(17, 16), Keys::many);
    EXPECT_EQ(key_variant(8, 8), Keys::few);
    EXPECT_EQ(key_variant(9, 8), Keys::many);
    EXPECT_EQ(key_variant(3, 2), Keys::many);  // a group too narrow for a few-keys step
    // Plain launches beside warp MMAs: the narrow few-keys ranges up to 8 keys for the rows
    // that passes of 8 would mostly leave empty (up to 4; at d128 and 5-8 keys up to 2), the
    // wide range for one row up to its 16 keys, the tensor-core variant (staged items) for the
    // rest; two keys keep theirs.
    EXPECT_EQ(key_variant(2, 16, true), Keys::two);
    EXPECT_EQ(key_variant(2, 16, true, 16), Keys::two);
    EXPECT_EQ(key_variant(3, 16, true), Keys::few);
    EXPECT_EQ(key_variant(4, 16, true, 4), Keys::few);
    EXPECT_EQ(key_variant(4, 16, true, 5), Keys::many);
    EXPECT_EQ(key_variant(4, 16, true, 12, false, 128), Keys::many);
    EXPECT_EQ(key_variant(3, 16, true, 8, false, 64), Keys::many);
    EXPECT_EQ(key_variant(3, 16, true, 9, false, 64), Keys::many);  // the staged pass of 16 rows
    EXPECT_EQ(key_variant(3, 16, true, 12, false, 64), Keys::many);
    EXPECT_EQ(key_variant(3, 16, true, 13, false, 64), Keys::many);
    EXPECT_EQ(key_variant(8, 16, true, 4, false, 64), Keys::few);
    EXPECT_EQ(key_variant(8, 16, true, 2, false, 128), Keys::few);
    EXPECT_EQ(key_variant(5, 16, true, 3, false, 128), Keys::many);
    EXPECT_EQ(key_variant(5, 16, true, 5, false, 64), Keys::many);
    EXPECT_EQ(key_variant(9, 16, true), Keys::few);      // one row: the wide range
    EXPECT_EQ(key_variant(16, 16, true), Keys::few);
    EXPECT_EQ(key_variant(17, 16, true), Keys::many);
    EXPECT_EQ(key_variant(9, 16, true, 2), Keys::many);
    EXPECT_EQ(narrow_few_range(3), 4);
    EXPECT_EQ(narrow_few_range(4), 4);
    EXPECT_EQ(narrow_few_range(5), 8);
    EXPECT_EQ(narrow_few_range(8), 8);
}

// Paged launches with no other option take the variant compiled with paging alone (decode.h,
// WithPages); a page size alone counts, as the workspace's plan has one before the block table.
TEST(DecodeVariants, PagesOnlyMeansNoOtherOption) {
    FwdParams p{};
    p.head_dim = 128;
    EXPECT_FALSE(pages_only(p));
    p.page_size = 16;
    EXPECT_TRUE(pages_only(p));
    const int table[1] = {0}, cu_seqlens[2] = {0, 1};
    const float slopes[1] = {0.5f};
    p.block_table = table;
    EXPECT_TRUE(pages_only(p));
    auto with = [&](auto change) {
        FwdParams q = p;
        change(q);
        return pages_only(q);
    };
    EXPECT_FALSE(with([](FwdParams& q) { q.softcap = 30.f; }));
    EXPECT_FALSE(with([&](FwdParams& q) { q.alibi_slopes = slopes; }));
    EXPECT_FALSE(with([&](FwdParams& q) { q.cu_seqlens_q = cu_seqlens; }));
    EXPECT_FALSE(with([](FwdParams& q) { q.dropout.p = 0.1f; }));
    EXPECT_FALSE(with([](FwdParams& q) { q.head_dim = 60; }));  // element rows
}

TEST(DecodeVariants, HeadDim256TakesManyRowsOnTheTensorCoreLoop) {
    // key_variant(keys, few_range, narrow ranges, rows, tensor-core loop): the wide few-keys
    // variant keeps one row, and two up to 5 keys; 3 rows from 3 keys, 2 from 6, go to the loop.
    EXPECT_EQ(key_variant(2, 8, false, 16, true), Keys::two);
    EXPECT_EQ(key_variant(8, 8, false, 1, true), Keys::few);
    EXPECT_EQ(key_variant(3, 8, false, 2, true), Keys::few);
    EXPECT_EQ(key_variant(5, 8, false, 2, true), Keys::few);
    EXPECT_EQ(key_variant(6, 8, false, 2, true), Keys::many);
    EXPECT_EQ(key_variant(3, 8, false, 3, true), Keys::many);
    EXPECT_EQ(key_variant(3, 8, false, 8, true), Keys::many);
    EXPECT_EQ(key_variant(3, 8, false, 8, false), Keys::few);  // no tensor-core loop (AMD)
}

TEST(DecodeVariants, StagedItemsTakeTwoRowTilesUpToHeadDim128) {
    // staged_row_tiles(keys, rows, head_dim): 16-row passes for 9-16 rows, at d64 at every key count.
    EXPECT_EQ(staged_row_tiles(12, 9, 64), 2);
    EXPECT_EQ(staged_row_tiles(3, 16, 64), 2);
    EXPECT_EQ(staged_row_tiles(16, 16, 64), 2);
    EXPECT_EQ(staged_row_tiles(12, 8, 64), 1);
    EXPECT_EQ(staged_row_tiles(3, 16, 128), 2);  // d128: up to 19 rows and keys together
    EXPECT_EQ(staged_row_tiles(10, 9, 128), 2);
    EXPECT_EQ(staged_row_tiles(4, 16, 128), 1);
    EXPECT_EQ(staged_row_tiles(11, 9, 128), 1);
    EXPECT_EQ(staged_row_tiles(3, 8, 128), 1);
    EXPECT_EQ(staged_row_tiles(5, 16, 256), 1);
}

TEST(DecodeVariants, StagedItemsOf16RowsTakeTheRowsAsMUpTo20RowsAndKeysAtD64And18AtD256) {
    // staged_rows_as_m(keys, rows, head_dim): 9-16 rows from 3 keys, up to 20 rows and keys
    // together at d64, 18 at d256; d128 keeps its two row tiles.
    EXPECT_TRUE(staged_rows_as_m(3, 9, 64));
    EXPECT_TRUE(staged_rows_as_m(4, 16, 64));
    EXPECT_TRUE(staged_rows_as_m(11, 9, 64));
    EXPECT_FALSE(staged_rows_as_m(12, 9, 64));
    EXPECT_FALSE(staged_rows_as_m(5, 16, 64));
    EXPECT_FALSE(staged_rows_as_m(2, 12, 64));
    EXPECT_FALSE(staged_rows_as_m(4, 8, 64));  // one row tile
    EXPECT_FALSE(staged_rows_as_m(3, 9, 128));
    EXPECT_TRUE(staged_rows_as_m(3, 9, 256));
    EXPECT_TRUE(staged_rows_as_m(9, 9, 256));
    EXPECT_TRUE(staged_rows_as_m(3, 15, 256));
    EXPECT_FALSE(staged_rows_as_m(3, 16, 256));
    EXPECT_FALSE(staged_rows_as_m(10, 9, 256));
    EXPECT_FALSE(staged_rows_as_m(2, 9, 256));
    EXPECT_FALSE(staged_rows_as_m(3, 8, 256));
}

TEST(DecodeVariants, StagedTilesHoldSeveralHeadsOfFewRowsAndKeys) {
    // staged_heads_per_tile(keys, rows, heads_kv, head_dim): 16 rows and 16 key slots shared by
    // the heads whose rows and keys fit a share (powers of two): from 3 keys and 3 rows (2 at
    // d256), up to 7 rows and 12 rows and keys together at d64, 8 at d128 and d256.
    EXPECT_EQ(staged_heads_per_tile(2, 4, 8, 64), 1);  // two keys keep their variant
    EXPECT_EQ(staged_heads_per_tile(3, 4, 8, 64), 4);
    EXPECT_EQ(staged_heads_per_tile(5, 4, 8, 64), 2);
    EXPECT_EQ(staged_heads_per_tile(3, 5, 8, 64), 2);
    EXPECT_EQ(staged_heads_per_tile(8, 4, 8, 64), 2);
    EXPECT_EQ(staged_heads_per_tile(8, 5, 8, 64), 1);
    EXPECT_EQ(staged_heads_per_tile(4, 8, 8, 64), 1);  // 8 rows keep the one-tile pass
    EXPECT_EQ(staged_heads_per_tile(4, 2, 8, 64), 1);  // 1 and 2 rows keep their variants
    EXPECT_EQ(staged_heads_per_tile(3, 9, 8, 64), 1);
    EXPECT_EQ(staged_heads_per_tile(3, 4, 1, 64), 1);  // one KV head: nothing to share
    EXPECT_EQ(staged_heads_per_tile(3, 4, 2, 64), 2);  // no more than the heads there are
    EXPECT_EQ(staged_heads_per_tile(3, 4, 3, 64), 4);
    EXPECT_EQ(staged_heads_per_tile(4, 4, 8, 128), 4);
    EXPECT_EQ(staged_heads_per_tile(5, 3, 8, 128), 2);
    EXPECT_EQ(staged_heads_per_tile(5, 4, 8, 128), 1);
    EXPECT_EQ(staged_heads_per_tile(3, 4, 8, 256), 4);
    EXPECT_EQ(staged_heads_per_tile(3, 2, 8, 256), 4);
    EXPECT_EQ(staged_heads_per_tile(6, 2, 8, 256), 2);
    EXPECT_EQ(staged_heads_per_tile(3, 1, 8, 256), 1);
    EXPECT_EQ(staged_heads_per_tile(4, 5, 8, 256), 1);
}

TEST(DecodeVariants, FewKeyRangesPerHeadDimAndWave) {
    // Warp32 (sm_90): 8 key vectors of K and V per lane, teams of one vector per lane.
    EXPECT_EQ((kFewKeyRange<Cfg<64, Arch::sm90>, 32>), 16);
    EXPECT_EQ((kFewKeyRange<Cfg<128, Arch::sm90>, 32>), 16);
    EXPECT_EQ((kFewKeyRange<Cfg<256, Arch::sm90>, 32>), 8);  // a d256 row takes the whole warp
    // Wave64 (CDNA): two teams of a group at every head dim.
    EXPECT_EQ((kFewKeyRange<Cfg<64, Arch::gfx90a>, 64>), 16);
    EXPECT_EQ((kFewKeyRange<Cfg<128, Arch::gfx90a>, 64>), 16);
    EXPECT_EQ((kFewKeyRange<Cfg<256, Arch::gfx90a>, 64>), 16);
    // Narrower groups (the group-width tests): fewer keys, never fewer than 4.
    EXPECT_EQ((kFewKeyRange<Cfg<128, Arch::sm90>, 8>), 4);
    EXPECT_EQ((kFewKeyRange<Cfg<256, Arch::sm90>, 16>), 4);
    EXPECT_EQ((kFewKeyRange<Cfg<64, Arch::sm90>, 8>), 8);
}

template <class T>
void expect_few_keys_shape(const char* what) {
    SCOPED_TRACE(what);
    EXPECT_TRUE(T::kShortKeys);  // one step: no loop, no key splits
    EXPECT_FALSE(kSplits<T>);
    FwdParams p{};  // few items, every key in the range: still one split
    p.batch = 1, p.heads_q = 8, p.heads_kv = 2, p.seqlen_q = 1, p.seqlen_kv = T::kKeyRange, p.head_dim = T::kHeadDim;
    EXPECT_EQ(make_plan<T>(p, int64_t(1) << 40).splits, 1);
    EXPECT_LE(T::kKeysPerSlice * T::kVecsPerLane, 8);  // the loads a lane holds at once
    EXPECT_EQ(T::kKeysPerStep, T::kKeyRange);
    EXPECT_GE(T::kKeyRange, 4);
    EXPECT_LE(T::kKeyRange, kMaxFewKeys);
    EXPECT_EQ(T::kGroupWidth, T::kTeamWidth * T::kSlices);
    EXPECT_GE(T::kTeamWidth * T::kVecsPerLane * T::kVec, T::kHeadDim);  // a team holds a row
}

TEST(DecodeVariants, FewKeysShapes) {
    expect_few_keys_shape<Traits<Cfg<64, Arch::sm90>, 32, 4, Keys::few>>("sm90 d64");
    expect_few_keys_shape<Traits<Cfg<128, Arch::sm90>, 32, 1, Keys::few>>("sm90 d128");
    expect_few_keys_shape<Traits<Cfg<256, Arch::sm90>, 32, 2, Keys::few>>("sm90 d256");
    expect_few_keys_shape<Traits<Cfg<128, Arch::sm90>, 8, 4, Keys::few>>("sm90 d128, groups of 8");
    expect_few_keys_shape<Traits<Cfg<64, Arch::gfx908>, 64, 4, Keys::few>>("gfx908 d64");
    expect_few_keys_shape<Traits<Cfg<256, Arch::gfx942>, 64, 4, Keys::few>>("gfx942 d256");
    expect_few_keys_shape<Traits<Cfg<128, Arch::gfx1100>, 32, 4, Keys::few>>("gfx1100 d128");
    // The narrow ranges beside warp MMAs: one team per work item, several items a warp.
    expect_few_keys_shape<Traits<Cfg<64, Arch::sm90>, 32, 4, Keys::few, 4>>("sm90 d64, 4 keys");
    expect_few_keys_shape<Traits<Cfg<128, Arch::sm90>, 32, 1, Keys::few, 8>>("sm90 d128, 8 keys");
    using Four = Traits<Cfg<128, Arch::sm90>, 32, 4, Keys::few, 4>;
    EXPECT_EQ(Four::kKeyRange, 4);
    EXPECT_EQ(Four::kGroupWidth, 8);  // as the two-key variant's: two vectors a lane
    EXPECT_EQ(Four::kVecsPerLane, 2);
    EXPECT_FALSE(Four::kSkipsEmptySlots);
    using Eight = Traits<Cfg<128, Arch::sm90>, 32, 4, Keys::few, 8>;
    EXPECT_EQ(Eight::kKeyRange, 8);
    EXPECT_EQ(Eight::kGroupWidth, 16);
    EXPECT_EQ(Eight::kVecsPerLane, 1);
    EXPECT_TRUE(Eight::kWidensQueryOnce);
    EXPECT_TRUE((Traits<Cfg<128, Arch::sm90>, 32, 4, Keys::few>::kSkipsEmptySlots));  // the 16-key range
    // The two-key variant is as it was: a team per group, two keys, two vectors a lane on warp32.
    using Two = Traits<Cfg<128, Arch::sm90>, 32, 4, Keys::two>;
    EXPECT_EQ(Two::kGroupWidth, 8);
    EXPECT_EQ(Two::kKeysPerStep, 2);
    EXPECT_EQ(Two::kVecsPerLane, 2);
}

}  // namespace
}  // namespace decode
}  // namespace fmha
