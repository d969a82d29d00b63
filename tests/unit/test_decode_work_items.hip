// Where a decode work item's rows lie (kernels/decode/work_item.h): each row's head and position
// by the plan's divisors, and a pass's key range from its first and last positions, against the
// rows one by one, for every pass of MHA, GQA and MQA groups, shorter sequences and windows.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "kernels/config.h"
#include "kernels/decode/plan.h"
#include "kernels/decode/shape.h"
#include "kernels/decode/tensor_core.h"
#include "kernels/decode/work_item.h"

namespace fmha {
namespace decode {
namespace {

FwdParams shape(int heads_q, int heads_kv, int seqlen_q, int seqlen_kv, KeyWindow window) {
    FwdParams p{};
    p.batch = 1, p.heads_q = heads_q, p.heads_kv = heads_kv, p.seqlen_q = seqlen_q, p.seqlen_kv = seqlen_kv;
    p.head_dim = 128, p.window = window;
    return p;
}

// The plan's row arithmetic, as make_plan sets it for passes of `rows`, without a device.
Plan row_plan(const FwdParams& p, int rows) {
    Plan plan{};
    plan.passes = (rows_per_kv_head(p) + rows - 1) / rows;
    plan.group_heads = p.heads_q / p.heads_kv;
    plan.rows_per_kv = rows_per_kv_head(p);
    plan.by_seqlen_q = FastDivisor(p.seqlen_q);
    return plan;
}

template <bool kMasked>
void check_passes(const FwdParams& p, int rows, int len_q, int len_kv) {
    const Plan plan = row_plan(p, rows);
    for (int head_kv = 0; head_kv < p.heads_kv; head_kv += p.heads_kv - 1 > 0 ? p.heads_kv - 1 : 1) {
        for (int pass = 0; pass < plan.passes; ++pass) {
            const WorkItem item{0, head_kv, 0, pass, len_q, len_kv, true};
            const std::string where = "h " + std::to_string(p.heads_q) + "/" + std::to_string(p.heads_kv) + " s_q " +
                                      std::to_string(p.seqlen_q) + " rows " + std::to_string(rows) + " len_q " +
                                      std::to_string(len_q) + " len_kv " + std::to_string(len_kv) + " window " +
                                      std::to_string(p.window.left) + "/" + std::to_string(p.window.right) + " pass " +
                                      std::to_string(pass) + (kMasked ? " masked" : "");
            VisibleKeys<kMasked> each;  // the rows one by one
            bool one_head = true;
            for (int r = 0; r < rows; ++r) {
                const int row = pass * rows + r;
                const QueryRow q = query_row(p, plan, item, row);
                ASSERT_EQ(q.head, head_kv * (p.heads_q / p.heads_kv) + row / p.seqlen_q) << where;
                ASSERT_EQ(q.position, row % p.seqlen_q) << where;
                ASSERT_EQ(q.valid, row < plan.rows_per_kv && row % p.seqlen_q < len_q) << where;
                if (row < plan.rows_per_kv) one_head = one_head && row / p.seqlen_q == pass * rows / p.seqlen_q;
                each.add(q, len_kv, p.window);
            }
            int lo, hi, each_lo, each_hi;
            each.key_range(len_kv, each_lo, each_hi);
            pass_key_range<kMasked>(p, plan, item, rows, lo, hi);
            if (one_head) {  // its rows' positions are one run: the same keys
                EXPECT_EQ(lo, each_lo) << where;
                EXPECT_EQ(hi, each_hi) << where;
            } else if (each_lo < each_hi) {  // across heads: every key some row sees, perhaps more
                EXPECT_LE(lo, each_lo) << where;
                EXPECT_GE(hi, each_hi) << where;
            }
            EXPECT_TRUE(lo < hi || lo == 0 && hi == 0) << where;
            EXPECT_TRUE(0 <= lo && hi <= len_kv) << where;
            const WorkItem past{0, head_kv, 0, pass, len_q, len_kv, false};  // past the last item
            pass_key_range<kMasked>(p, plan, past, rows, lo, hi);
            EXPECT_TRUE(lo == 0 && hi == 0) << where;
        }
    }
}

TEST(DecodeWorkItems, APassSeesTheKeysOfItsRows) {
    const std::pair<int, int> groups[] = {{8, 8}, {12, 4}, {32, 8}, {16, 1}};
    const KeyWindow windows[] = {KeyWindow::of(0, 0), KeyWindow::of(3, 0), KeyWindow::of(6, 2), KeyWindow::of(2, 9),
                                 KeyWindow::of(100000, 0), KeyWindow::of(100000, 100000)};
    for (auto [heads_q, heads_kv] : groups)
        for (int seqlen_q : {1, 2, 3, 5, 9, 12, 16})
            for (int rows : {1, 2, 4, 8})
                for (int len_q : {1, (seqlen_q + 1) / 2, seqlen_q})
                    for (int len_kv : {1, 7, 40, 300})
                        for (const KeyWindow& window : windows) {
                            const FwdParams p = shape(heads_q, heads_kv, seqlen_q, 300, window);
                            check_passes<true>(p, rows, len_q, len_kv);
                            check_passes<false>(p, rows, len_q, len_kv);
                        }
}

// A staged tile of several KV heads is one item: the plan counts tiles, the last one part empty.
TEST(DecodeWorkItems, TilesOfSeveralHeadsAreOneItemEach) {
    const FwdParams p = shape(28, 7, 1, 4, KeyWindow::of(0, 0));  // 4 rows per KV head at 4 keys
    using Packed = MmaTraits<KernelConfig<DType::bf16, 128, HeadsKind::gqa, Mask::causal, Arch::sm90>, 2, true, 4, 4>;
    const Plan plan = make_plan<Packed>(p, 2112);
    EXPECT_EQ(int(plan.by_kv_groups.divisor), 2);
    EXPECT_EQ(plan.passes, 1);
    EXPECT_EQ(plan.items, int64_t(p.batch) * 2);
}

TEST(DecodeWorkItems, APlanDividesByItsOwnCounts) {
    const FwdParams p = shape(32, 8, 3, 4096, KeyWindow::of(0, 0));
    for (int64_t groups : {8, 64, 2112}) {
        const Plan plan = make_plan<Traits<KernelConfig<DType::bf16, 128, HeadsKind::gqa, Mask::causal, Arch::sm90>, 32, 8, Keys::many>>(p, groups);
        EXPECT_EQ(int(plan.by_splits.divisor), plan.splits);
        EXPECT_EQ(int(plan.by_block_splits.divisor), plan.block_splits);
        EXPECT_EQ(int(plan.by_passes.divisor), plan.passes);
        EXPECT_EQ(int(plan.by_kv_groups.divisor), p.heads_kv);
        EXPECT_EQ(int(plan.by_seqlen_q.divisor), p.seqlen_q);
        EXPECT_EQ(plan.workspace_splits * plan.block_splits, plan.splits);
        EXPECT_EQ(plan.rows_per_kv, 12);
        EXPECT_EQ(plan.group_heads, 4);
    }
}

}  // namespace
}  // namespace decode
}  // namespace fmha
