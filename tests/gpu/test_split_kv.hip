// Split-KV decode plans. A block's groups take consecutive splits of an item and merge them
// in shared memory; items with more splits than a block has groups also go through the
// workspace and the combine kernel. The plan's rule is checked on the host, and each of its
// shapes on the GPU against the reference.
#include <gtest/gtest.h>

#include "gpu_check.h"
#include "kernels/decode.h"

namespace fmha {
namespace {

#if defined(__HIP_PLATFORM_NVIDIA__)
constexpr Arch kArch = Arch::sm90;
#else
constexpr Arch kArch = Arch::gfx90a;
#endif

using Fp16Causal = KernelConfig<DType::fp16, 128, HeadsKind::gqa, Mask::causal, kArch>;  // tensor cores on NVIDIA
using Bf16Wide = KernelConfig<DType::bf16, 256, HeadsKind::gqa, Mask::nomask, kArch>;    // tensor cores on NVIDIA too
// Rows of 12 vectors: partials, merges and the combine on a row that is not a whole number of
// 64-column tiles or of lanes (the catalogue's head dims are, by default).
using Fp16Odd = KernelConfig<DType::fp16, 96, HeadsKind::gqa, Mask::nomask, kArch>;

// 8 query heads over 2 KV heads, one query position: 4 rows per KV head, one pass.
template <class Config>
Problem problem(int batch, int seqlen_kv) {
    Problem p;
    p.dtype = Config::dtype, p.head_dim = Config::head_dim;
    if (Config::mask == Mask::causal) p.mask = AttentionMask::causal();
    p.batch = batch, p.heads_q = 8, p.heads_kv = 2, p.seqlen_q = 1, p.seqlen_kv = seqlen_kv;
    return p;
}

TEST(SplitPlan, BlocksHoldWholeItemsOrWholeBlocksOfSplits) {
    using T = decode::Traits<Fp16Causal, wave_size(kArch), 4, decode::Keys::many>;
    constexpr int G = T::kGroups;
    const FwdParams p = shape_params(problem<Fp16Causal>(10, 100000));  // 20 items before splitting
    struct Expected {
        int64_t resident_groups;
        int splits;
    };
    const Expected cases[] = {
        {20, 1},                 // the items fill the device
        {79, 2},                 // 3 splits' worth: rounded to a power of two or whole blocks
        {20 * G, G},             // one block per item, no workspace
        {20 * (2 * G + 1), 2 * G},  // whole blocks of splits
        {20 * T::kMaxSplits, T::kMaxSplits},           // a whole wave at the usual cap
        {20 * 2 * T::kMaxSplits, 2 * T::kMaxSplits},   // few items: more, a whole wave
        {int64_t(1) << 40, T::kMaxWideSplits},
    };
    for (const Expected& c : cases) {
        const decode::Plan plan = decode::make_plan<T>(p, c.resident_groups);
        EXPECT_EQ(plan.splits, c.splits) << c.resident_groups << " resident groups";
        EXPECT_EQ(plan.block_splits, std::min(plan.splits, G));
        EXPECT_EQ(plan.items, 20 * plan.splits);
        EXPECT_EQ(workspace_bytes(p, plan.workspace_splits) > 0, plan.splits > G);
    }
    // Few keys cap the splits at one per kMinKeysPerSplit keys, rounded the same way (3 -> 2).
    const FwdParams short_range = shape_params(problem<Fp16Causal>(10, 3 * T::kMinKeysPerSplit));
    EXPECT_EQ(decode::make_plan<T>(short_range, int64_t(1) << 40).splits, 2);
    // Past kMaxSplits, splits of at least twice kMinKeysPerSplit keys: 300 of them, in whole blocks.
    const FwdParams past_cap = shape_params(problem<Fp16Causal>(10, 300 * 2 * T::kMinKeysPerSplit));
    EXPECT_EQ(decode::make_plan<T>(past_cap, int64_t(1) << 40).splits, 300 / G * G);
}

// Head dim 256 on warp MMAs where the arch has them: long key ranges, with run-time options
// too; its few-keys ranges for one row stay on CUDA cores (decode.h, kNarrowFewKeys).
TEST(SplitPlan, HeadDim256LongKeysTakeWarpMmasWhereTheArchHasThem) {
    const auto variant = [](const FwdParams& p) {
        return decode::with_variant<Bf16Wide, wave_size(kArch)>(p, [](auto traits) {
            using T = decltype(traits);
            return std::pair{T::kWarpMma, T::kKeys};
        });
    };
    FwdParams p = shape_params(problem<Bf16Wide>(1, 4096));
    EXPECT_EQ(variant(p), std::pair(has_mma_sync(kArch), decode::Keys::many));
    p.softcap = 30.f;
    EXPECT_EQ(variant(p), std::pair(has_mma_sync(kArch), decode::Keys::many));
    p.softcap = 0.f, p.seqlen_kv = 5, p.heads_kv = p.heads_q;  // 1 row per KV head at 5 keys: the few-keys variant
    EXPECT_EQ(variant(p), std::pair(false, decode::Keys::few));
    p.heads_kv = p.heads_q / 2;  // 2 rows: staged tiles of several KV heads, where there are warp MMAs (decode/shape.h)
    EXPECT_EQ(variant(p), has_mma_sync(kArch) ? std::pair(true, decode::Keys::many) : std::pair(false, decode::Keys::few));
}

// Batches that give each plan shape on this device, then the result against the reference.
template <class Config>
void check_plan_shapes() {
    const KernelKey key{Config::dtype, Config::head_dim, Config::heads, Config::mask, Family::decode, kArch};
    const KernelEntry kernel{key, &decode::launch<Config>, &decode::workspace_size<Config>};
    // Key counts that allow 5 splits (rounded to 4) and 20.
    constexpr int kMinKeys = decode::BlockShape::kMinKeysPerSplit;
    constexpr int kFiveSplits = 4 * kMinKeys + kMinKeys / 4, kTwentySplits = 19 * kMinKeys + kMinKeys / 2;
    // Groups per block of the variant a problem takes; the device's resident groups of the one
    // that takes a single item at kFiveSplits keys.
    const auto groups_of = [](const FwdParams& p) {
        return decode::with_variant<Config, wave_size(kArch)>(p, [](auto traits) { return decltype(traits)::kGroups; });
    };
    const int64_t resident = decode::with_variant<Config, wave_size(kArch)>(
        shape_params(problem<Config>(1, kFiveSplits)),
        [](auto traits) { return decode::resident_blocks<decltype(traits), Config>() * decltype(traits)::kGroups; });
    // Where the loop runs on warp MMAs up to head dim 128, blocks of 16 warps take the items whose
    // 16 splits reach every multiprocessor (2 KV heads per sequence).
    const bool wide = decode::kUsesWarpMma<Config, wave_size(kArch)> && decode::kHasWideBlocks<Config>;
    struct Shape {
        const char* what;
        int batch, seqlen_kv, splits;
    };
    const Shape shapes[] = {
        {"the splits of an item fill a block", 16, kFiveSplits, 4},
        // 2 KV heads per sequence: 2 to 4 resident groups per item.
        {"two splits per item", int(resident / 4), kFiveSplits, 2},
        {"blocks of splits combined in the workspace", 3, kTwentySplits, 20},
        {"an item's splits in one block of 16 warps", wide ? multiprocessor_count() / 2 : 0, kTwentySplits, 16},
        // Short key ranges: one such block an item from half of the resident wide blocks (one a
        // multiprocessor; 2 items a sequence), where blocks of four would take 20 splits and the
        // workspace.
        {"one block of 16 warps an item, short keys", wide ? (multiprocessor_count() + 3) / 4 : 0, kTwentySplits, 16},
    };
    for (const Shape& s : shapes) {
        if (s.batch == 0) continue;
        GpuCase c{problem<Config>(s.batch, s.seqlen_kv), {}, uint64_t(s.batch)};
        c.lse = true;  // each way of merging splits also yields the log-sum-exps
        const FwdParams params = shape_params(c.problem);
        const decode::Plan plan = decode::plan<Config>(params);
        const int groups = groups_of(params);
        if (s.splits == decode::kWideWarps) EXPECT_EQ(groups, decode::kWideWarps) << s.what << ": " << c.describe();
        EXPECT_EQ(plan.splits, s.splits) << s.what << ": " << c.describe();
        EXPECT_EQ(plan.block_splits, std::min(s.splits, groups)) << s.what << ": " << c.describe();
        EXPECT_EQ(plan.workspace_splits, s.splits / plan.block_splits) << s.what << ": " << c.describe();
        const CaseResult r = run_case(kernel, c);
        EXPECT_TRUE(r.passed) << s.what << ": " << r.message;
    }
}

TEST(SplitKv, EveryPlanShapeMatchesTheReference) {
    if (!test_device().found) GTEST_SKIP() << "no GPU: " << test_device().error;
    if (platform_of(*test_device().arch) != platform_of(kArch)) GTEST_SKIP() << "device of another platform";
    check_plan_shapes<Fp16Causal>();
    check_plan_shapes<Bf16Wide>();
    check_plan_shapes<Fp16Odd>();
}

}  // namespace
}  // namespace fmha
