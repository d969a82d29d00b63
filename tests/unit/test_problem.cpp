// Problem validation, layout strides, and the FLOP and byte counts fmha.exe reports.
#include <gtest/gtest.h>

#include "fmha/problem.h"

#include <cmath>

namespace fmha {
namespace {

Problem make(int b, int h, int h_kv, int s_q, int s_kv, int d, bool causal = false) {
    Problem p;
    p.batch = b, p.heads_q = h, p.heads_kv = h_kv, p.seqlen_q = s_q, p.seqlen_kv = s_kv, p.head_dim = d;
    if (causal) p.mask = AttentionMask::causal();
    return p;
}

TEST(Problem, HeadsKind) {
    EXPECT_EQ(make(1, 8, 8, 1, 1, 64).heads_kind(), HeadsKind::mha);
    EXPECT_EQ(make(1, 8, 2, 1, 1, 64).heads_kind(), HeadsKind::gqa);
    EXPECT_EQ(make(1, 8, 1, 1, 1, 64).heads_kind(), HeadsKind::mqa);
    EXPECT_EQ(make(1, 1, 1, 1, 1, 64).heads_kind(), HeadsKind::mha);
}

TEST(Problem, ValidAndInvalid) {
    EXPECT_TRUE(make(30720, 32, 32, 1, 2, 256).validate().empty());
    EXPECT_FALSE(make(0, 32, 32, 1, 2, 256).validate().empty());
    EXPECT_FALSE(make(1, -3, 1, 1, 2, 256).validate().empty());
    EXPECT_FALSE(make(1, 32, 32, 1, 0, 256).validate().empty());
    // seqlen_q and KV heads follow -s and -h when not given: the error names only the flag given.
    EXPECT_EQ(make(1, 32, 32, 0, 0, 256).validate(), std::vector<std::string>{"seqlen_kv (-s) must be positive (got 0)"});
    EXPECT_EQ(make(1, 0, 0, 4, 4, 256).validate(), std::vector<std::string>{"heads (-h) must be positive (got 0)"});
    EXPECT_EQ(make(1, 8, 8, -1, 4, 256).validate(), std::vector<std::string>{"seqlen_q (-s-q) must be positive (got -1)"});
    EXPECT_FALSE(make(1, 32, 5, 1, 2, 256).validate().empty());            // 32 % 5
    EXPECT_TRUE(make(1, 8, 8, 9, 4, 64, true).validate().empty());          // causal, s_q > s_kv: empty rows
    EXPECT_TRUE(make(1, 8, 8, 9, 4, 64, false).validate().empty());         // cross attention is fine
    EXPECT_FALSE(make(1 << 30, 1 << 14, 1 << 14, 1 << 14, 1 << 14, 256).validate().empty());  // offsets overflow
    Problem window = make(1, 8, 8, 4, 4, 64);
    window.mask = AttentionMask::local(3, 5);  // two-sided, no causal mask
    EXPECT_TRUE(window.validate().empty());
    window.mask.right = -2;
    EXPECT_EQ(window.validate(), std::vector<std::string>{"window sides must be >= 0, or -1 for unbounded (got left 3, right -2)"});
    Problem packed = make(1, 8, 2, 4, 4, 64);
    packed.layout = Layout::qkv_packed;
    EXPECT_FALSE(packed.validate().empty());  // packed QKV cannot hold GQA
}

TEST(Problem, AlibiSlopesAreTheStandardGeometricSequence) {
    const std::vector<float> eight = alibi_slopes(8);  // 2^-1 .. 2^-8
    ASSERT_EQ(eight.size(), 8u);
    for (int h = 0; h < 8; ++h) EXPECT_FLOAT_EQ(eight[h], std::ldexp(1.f, -(h + 1)));
    const std::vector<float> sixteen = alibi_slopes(16);  // 2^-0.5 .. 2^-8
    EXPECT_FLOAT_EQ(sixteen[0], std::exp2(-0.5f));
    EXPECT_FLOAT_EQ(sixteen[15], std::ldexp(1.f, -8));
    // 12 heads: the 8 of n = 8, then every other slope of n = 16 (2^-0.5, 2^-1.5, ...).
    const std::vector<float> twelve = alibi_slopes(12);
    ASSERT_EQ(twelve.size(), 12u);
    for (int h = 0; h < 8; ++h) EXPECT_FLOAT_EQ(twelve[h], eight[h]);
    for (int h = 8; h < 12; ++h) EXPECT_FLOAT_EQ(twelve[h], sixteen[2 * (h - 8)]);
    EXPECT_EQ(alibi_slopes(1), std::vector<float>{1.f / 256.f});
}

TEST(Problem, PagedKvCacheShapeAndStrides) {
    Problem p = make(3, 8, 2, 1, 100, 64);
    p.page_size = 32;  // 4 pages per sequence of 100 keys, one spare page in the pool
    const PagedKvShape shape = paged_kv_shape(p);
    EXPECT_EQ(shape.max_pages_per_seq, 4);
    EXPECT_EQ(shape.pages, 3 * 4 + 1);
    EXPECT_EQ(buffer_sizes(p).k, shape.pages * 32 * 2 * 64);
    // [pages, page_size, h_kv, d]: the batch stride is the page stride.
    const LayoutStrides s = layout_strides(p);
    EXPECT_EQ(5 * s.k.batch + 1 * s.k.head + 7 * s.k.row + 3, ((5 * 32 + 7) * 2 + 1) * 64 + 3);
    EXPECT_EQ(s.v.batch, s.k.batch);
    const FwdParams f = shape_params(p);
    EXPECT_EQ(f.page_size, 32);
    EXPECT_EQ(f.max_pages_per_seq, 4);
    EXPECT_EQ(f.block_table, nullptr);  // pointers come from the caller
    EXPECT_EQ(paged_kv_shape(make(3, 8, 2, 1, 100, 64)).pages, 0);
}

// A plan is made from shape_params, before the launch's ALiBi slopes or cu_seqlens exist: the
// parameters say that they will come, so that the plan takes the launch's variant and workspace.
TEST(Problem, ShapeParamsSayWhichOptionsComeAsPointers) {
    Problem p = make(2, 8, 2, 1, 700, 128);
    EXPECT_FALSE(shape_params(p).pointer_options);
    p.alibi = true;
    EXPECT_TRUE(shape_params(p).pointer_options);
    EXPECT_EQ(shape_params(p).alibi_slopes, nullptr);  // pointers come from the caller
    p.alibi = false, p.layout = Layout::packed;
    EXPECT_TRUE(shape_params(p).pointer_options);
    p.layout = Layout::bshd, p.softcap = 30.f;  // a value, already in the parameters
    EXPECT_FALSE(shape_params(p).pointer_options);
}

TEST(Problem, SoftcapMustBeFiniteAndNonNegative) {
    Problem p = make(1, 8, 8, 1, 4, 64);
    p.softcap = 50.f;
    EXPECT_TRUE(p.validate().empty());
    EXPECT_NE(p.describe().find("softcap=50"), std::string::npos);
    p.softcap = -1.f;
    EXPECT_FALSE(p.validate().empty());
    p.softcap = INFINITY;
    EXPECT_FALSE(p.validate().empty());
}

TEST(Problem, DefaultScaleIsInverseSqrtHeadDim) {
    EXPECT_FLOAT_EQ(make(1, 1, 1, 1, 1, 256).softmax_scale(), 1.f / 16.f);
    Problem p = make(1, 1, 1, 1, 1, 256);
    p.scale = 0.5f;
    EXPECT_FLOAT_EQ(p.softmax_scale(), 0.5f);
}

TEST(Problem, LayoutStridesAddressTheSameLogicalElement) {
    // Element (b=1, h=2, s=3, c=5) of Q in each layout.
    Problem p = make(2, 4, 4, 6, 6, 16);
    p.layout = Layout::bhsd;
    LayoutStrides s = layout_strides(p);
    EXPECT_EQ(1 * s.q.batch + 2 * s.q.head + 3 * s.q.row + 5, ((1 * 4 + 2) * 6 + 3) * 16 + 5);
    p.layout = Layout::bshd;
    s = layout_strides(p);
    EXPECT_EQ(1 * s.q.batch + 2 * s.q.head + 3 * s.q.row + 5, ((1 * 6 + 3) * 4 + 2) * 16 + 5);
    p.layout = Layout::qkv_packed;  // [b, s, 3, h, d]: K is slot 1
    s = layout_strides(p);
    EXPECT_EQ(s.k_offset + 1 * s.k.batch + 2 * s.k.head + 3 * s.k.row + 5, (((1 * 6 + 3) * 3 + 1) * 4 + 2) * 16 + 5);
    EXPECT_EQ(buffer_sizes(p).q, 3 * 2 * 6 * 4 * 16);
}

TEST(Problem, BottomRightCausalVisibility) {
    Problem p = make(1, 1, 1, 2, 5, 64, true);
    // s_q = 2, s_kv = 5: row 0 sees keys 0..3, row 1 sees 0..4.
    EXPECT_EQ(visible_keys(p, 0, 0, 2, 5).first, 0);
    EXPECT_EQ(visible_keys(p, 0, 0, 2, 5).last, 3);
    EXPECT_EQ(visible_keys(p, 1, 1, 2, 5).last, 4);
    p.mask = AttentionMask::causal(2);  // the 2 keys ending at the diagonal
    EXPECT_EQ(visible_keys(p, 0, 0, 2, 5).first, 2);
    EXPECT_EQ(visible_keys(p, 0, 0, 2, 5).last, 3);
    EXPECT_EQ(visible_keys(p, 0, 1, 2, 5).first, 2);  // rows 0 and 1 together: keys 2..4
    EXPECT_EQ(visible_keys(p, 0, 1, 2, 5).last, 4);
    // s_q = 5 > s_kv = 2: row 0's diagonal is key -3, so it sees nothing.
    const KeyRange none = visible_keys(p, 0, 0, 5, 2);
    EXPECT_LT(none.last, none.first);
    p.mask = AttentionMask::none();
    EXPECT_EQ(visible_keys(p, 0, 0, 5, 2).first, 0);
    EXPECT_EQ(visible_keys(p, 0, 0, 5, 2).last, 1);
}

TEST(Problem, TwoSidedWindowVisibility) {
    // s_q = 4, s_kv = 10: row i's diagonal is key i + 6. Window (2 left, 1 right): keys i+4 .. i+7.
    Problem p = make(1, 1, 1, 4, 10, 64);
    p.mask = AttentionMask::local(2, 1);
    EXPECT_EQ(visible_keys(p, 0, 0, 4, 10).first, 4);
    EXPECT_EQ(visible_keys(p, 0, 0, 4, 10).last, 7);
    EXPECT_EQ(visible_keys(p, 3, 3, 4, 10).last, 9);  // clipped at the last key
    // One side unbounded: (-1 left, 0 right) is causal; (1 left, -1 right) sees every key after i+5.
    p.mask = AttentionMask::local(1, -1);
    EXPECT_EQ(visible_keys(p, 0, 0, 4, 10).first, 5);
    EXPECT_EQ(visible_keys(p, 0, 0, 4, 10).last, 9);
    EXPECT_EQ(p.mask.kernel_mask(), Mask::causal);  // every bounded window takes a masked kernel
    EXPECT_EQ(AttentionMask::none().kernel_mask(), Mask::nomask);
    // A right window past the keys' end: row 0 of s_q = 6 over s_kv = 2 has its diagonal at -4;
    // with 2 keys to the right it still sees none, and row 3 (diagonal -1) sees keys 0..1.
    p.mask = AttentionMask::local(0, 2);
    const KeyRange none = visible_keys(p, 0, 0, 6, 2);
    EXPECT_LT(none.last, none.first);
    EXPECT_EQ(visible_keys(p, 3, 3, 6, 2).first, 0);
    EXPECT_EQ(visible_keys(p, 3, 3, 6, 2).last, 1);
    // FwdParams' window: unbounded sides become the sequence sizes.
    p.mask = AttentionMask::causal();
    const KeyWindow keys = p.mask.keys(4, 10);
    EXPECT_EQ(keys.left, 10);
    EXPECT_EQ(keys.right, 0);
}

TEST(Counts, HeadlineConfigMovesThreeGigabytes) {
    // SPEC config 3: b 30720, h 32, s_q 1, s_kv 2, d 256, fp16 -> 3.02 GB.
    const Problem p = make(30720, 32, 32, 1, 2, 256);
    const double q = 30720.0 * 32 * 1 * 256 * 2, kv = 30720.0 * 32 * 2 * 256 * 2;
    EXPECT_DOUBLE_EQ(byte_count(p, {}), 2 * q + 2 * kv);
    EXPECT_NEAR(byte_count(p, {}) / 1e9, 3.02, 0.01);
    EXPECT_DOUBLE_EQ(flop_count(p, {}), 30720.0 * 32 * 1 * 2 * 4 * 256);
}

TEST(Counts, KvCountedOncePerKvHeadAndOnlyUnmaskedFlops) {
    const Problem gqa = make(2, 8, 2, 4, 4, 64);
    EXPECT_DOUBLE_EQ(byte_count(gqa, {}), 2.0 * 64 * (2 * 2 * 4 * 8 + 2 * 2 * 4 * 2));
    const Problem causal = make(1, 1, 1, 4, 4, 64, true);
    EXPECT_DOUBLE_EQ(flop_count(causal, {}), (1 + 2 + 3 + 4) * 4.0 * 64);
    SeqLens lens{{1, 3}, {2, 3}};
    const Problem varlen = make(2, 1, 1, 3, 3, 64);
    EXPECT_DOUBLE_EQ(flop_count(varlen, lens), (1 * 2 + 3 * 3) * 4.0 * 64);
}

}  // namespace
}  // namespace fmha
