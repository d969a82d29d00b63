// The host reference and the host fp16/bf16 conversions, against cases worked by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "fmha/host_numeric.h"
#include "reference/host_reference.h"

namespace fmha {
namespace {

TEST(HostNumeric, HalfKnownValues) {
    EXPECT_EQ(float_to_half(1.f), 0x3c00);
    EXPECT_EQ(float_to_half(-2.f), 0xc000);
    EXPECT_EQ(float_to_half(65504.f), 0x7bff);
    EXPECT_EQ(float_to_half(1e6f), 0x7c00);                      // overflow -> inf
    EXPECT_EQ(float_to_half(std::ldexp(1.f, -24)), 0x0001);     // smallest subnormal
    EXPECT_EQ(float_to_half(1.f + std::ldexp(1.f, -11)), 0x3c00);  // tie rounds to even
    EXPECT_EQ(float_to_half(1.f + 3 * std::ldexp(1.f, -11)), 0x3c02);
    EXPECT_FLOAT_EQ(half_to_float(0x3555), 0.333251953125f);
    EXPECT_TRUE(std::isnan(half_to_float(0xffff)));              // the poison pattern
    EXPECT_TRUE(std::isnan(bf16_to_float(0xffff)));
}

TEST(HostNumeric, RoundTripsEveryFiniteHalfAndBf16) {
    for (uint32_t bits = 0; bits < 0x10000; ++bits) {
        const uint16_t h = static_cast<uint16_t>(bits);
        if ((h & 0x7c00) != 0x7c00) EXPECT_EQ(float_to_half(half_to_float(h)), h) << std::hex << bits;
        if ((h & 0x7f80) != 0x7f80) EXPECT_EQ(float_to_bf16(bf16_to_float(h)), h) << std::hex << bits;
    }
    EXPECT_EQ(float_to_bf16(1.f + std::ldexp(1.f, -8)), 0x3f80);  // tie rounds to even
}

Problem make(int s_q, int s_kv, int d, bool causal) {
    Problem p;
    p.batch = 1, p.heads_q = 1, p.heads_kv = 1, p.seqlen_q = s_q, p.seqlen_kv = s_kv, p.head_dim = d;
    if (causal) p.mask = AttentionMask::causal();
    return p;
}

TEST(HostReference, OneKeyReturnsItsValue) {
    const Problem p = make(1, 1, 4, false);
    const auto o = host_reference(p, {}, {1, 2, 3, 4}, {5, 6, 7, 8}, {0.5f, -1, 2, 3});
    EXPECT_EQ(o, (std::vector<float>{0.5f, -1, 2, 3}));
}

TEST(HostReference, EqualScoresAverageTheValues) {
    const Problem p = make(1, 3, 2, false);
    const auto o = host_reference(p, {}, {0, 0}, {1, 2, 3, 4, 5, 6}, {3, 0, 6, 3, 0, 9});
    EXPECT_FLOAT_EQ(o[0], 3.f);
    EXPECT_FLOAT_EQ(o[1], 4.f);
}

TEST(HostReference, SoftmaxWeightsFollowTheScores) {
    // Scores 0 and ln(3) * sqrt(d) / sqrt(d): weights 1/4 and 3/4.
    Problem p = make(1, 2, 1, false);
    p.scale = 1.f;
    const auto o = host_reference(p, {}, {std::log(3.f)}, {0, 1}, {4, 8});
    EXPECT_NEAR(o[0], 0.25 * 4 + 0.75 * 8, 1e-5);
}

TEST(HostReference, BottomRightCausalAndEmptyRows) {
    // s_q = 2, s_kv = 3: row 0 sees keys 0..1, row 1 sees 0..2. Equal scores: averages.
    const Problem p = make(2, 3, 1, true);
    const auto o = host_reference(p, {}, {0, 0}, {1, 1, 1}, {2, 4, 9});
    EXPECT_FLOAT_EQ(o[0], 3.f);
    EXPECT_FLOAT_EQ(o[1], 5.f);
    // With a window of 1 each row sees only its diagonal key.
    Problem w = p;
    w.mask = AttentionMask::causal(1);
    const auto ow = host_reference(w, {}, {0, 0}, {1, 1, 1}, {2, 4, 9});
    EXPECT_FLOAT_EQ(ow[0], 4.f);
    EXPECT_FLOAT_EQ(ow[1], 9.f);
    // Variable lengths: batch 1 has one query row and one key; its other rows stay zero.
    Problem v = make(2, 3, 1, false);
    v.batch = 2;
    const auto ov = host_reference(v, {{2, 1}, {3, 1}}, {0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}, {2, 4, 9, 7, 8, 8});
    EXPECT_FLOAT_EQ(ov[0], 5.f);
    EXPECT_FLOAT_EQ(ov[2], 7.f);
    EXPECT_FLOAT_EQ(ov[3], 0.f);
}

TEST(HostReference, LogSumExpInNaturalLog) {
    // Scores (scale 1) 0 and ln(3): lse = ln(1 + 3). One key: its score. No key: -inf.
    Problem p = make(1, 2, 1, false);
    p.scale = 1.f;
    std::vector<float> lse;
    host_reference(p, {}, {std::log(3.f)}, {0, 1}, {4, 8}, &lse);
    ASSERT_EQ(lse.size(), 1u);
    EXPECT_NEAR(lse[0], std::log(4.0), 1e-6);
    // Bottom-right causal, s_q = 2 over 2 keys with a window of 1: each row sees one key.
    Problem c = make(2, 2, 1, true);
    c.scale = 0.5f, c.mask = AttentionMask::causal(1);
    host_reference(c, {}, {2, 4}, {1, 3}, {0, 0}, &lse);
    EXPECT_EQ(lse, (std::vector<float>{0.5f * 2 * 1, 0.5f * 4 * 3}));
    // Variable lengths: batch 1 has one query row and its second row sees nothing (-inf).
    Problem v = make(2, 3, 1, false);
    v.batch = 2, v.scale = 1.f;
    host_reference(v, {{2, 1}, {3, 1}}, {0, 0, 0, 0}, {1, 1, 1, 1, 1, 1}, {2, 4, 9, 7, 8, 8}, &lse);
    ASSERT_EQ(lse.size(), 4u);
    EXPECT_NEAR(lse[0], std::log(3.0), 1e-6);  // three equal scores of 0
    EXPECT_NEAR(lse[2], 0.0, 1e-6);            // one key, score 0
    EXPECT_EQ(lse[3], -INFINITY);
}

TEST(HostReference, GqaQueryHeadsShareTheirKvHead) {
    Problem p = make(1, 1, 1, false);
    p.heads_q = 4, p.heads_kv = 2;
    const auto o = host_reference(p, {}, {1, 1, 1, 1}, {0, 0}, {10, 20});
    EXPECT_EQ(o, (std::vector<float>{10, 10, 20, 20}));
}

TEST(HostReference, SoftcapBoundsTheScores) {
    // Scores (scale 1) 0 and 10 capped at 2: 0 and 2 tanh(5); weights 1 : exp(2 tanh(5)).
    Problem p = make(1, 2, 1, false);
    p.scale = 1.f, p.softcap = 2.f;
    std::vector<float> lse;
    const auto o = host_reference(p, {}, {10}, {0, 1}, {4, 8}, &lse);
    const double w = std::exp(2 * std::tanh(5.0));
    EXPECT_NEAR(o[0], (4 + 8 * w) / (1 + w), 1e-5);
    EXPECT_NEAR(lse[0], std::log(1 + w), 1e-6);
    // The cap applies to the scaled score: scale 0.5 on q.k = 20 is the same score 10.
    p.scale = 0.5f;
    EXPECT_NEAR(host_reference(p, {}, {20}, {0, 1}, {4, 8})[0], (4 + 8 * w) / (1 + w), 1e-5);
}

TEST(HostReference, AlibiPenalisesDistanceFromTheDiagonal) {
    // One head (slope 2^-8), one query over 3 keys of equal score: the query's diagonal is
    // key 2, so key j is weighted exp(-(2 - j) / 256).
    Problem p = make(1, 3, 1, false);
    p.alibi = true;
    const auto o = host_reference(p, {}, {0}, {1, 1, 1}, {3, 5, 7});
    const double w0 = std::exp(-2 / 256.0), w1 = std::exp(-1 / 256.0);
    EXPECT_NEAR(o[0], (3 * w0 + 5 * w1 + 7) / (w0 + w1 + 1), 1e-5);
    // Two heads (slopes 1/16, 1/256) and a query row above the diagonal of a longer key
    // range: s_q = 2, s_kv = 3, row 0's diagonal is key 1 and key 2 lies beyond it, at distance 1.
    Problem two = make(2, 3, 1, false);
    two.heads_q = two.heads_kv = 2, two.alibi = true;
    const auto o2 = host_reference(two, {}, {0, 0, 0, 0}, std::vector<float>(6, 1.f), {3, 5, 7, 3, 5, 7});
    const double a = std::exp(-1 / 16.0);  // keys 0 and 2 of row 0, head 0
    EXPECT_NEAR(o2[0], (3 * a + 5 + 7 * a) / (2 * a + 1), 1e-5);
    // After the softcap: cap 1 on scores 0 leaves 0, so the same weights.
    p.softcap = 1.f;
    EXPECT_NEAR(host_reference(p, {}, {0}, {1, 1, 1}, {3, 5, 7})[0], o[0], 1e-6);
}

TEST(HostReference, IsInvariantToShiftingAllScores) {
    // Softmax(s + c) = softmax(s): large common offsets must not overflow.
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1, 1);
    Problem p = make(1, 16, 8, false);
    p.scale = 1.f;
    std::vector<float> q(8), k(16 * 8), v(16 * 8);
    for (auto* t : {&q, &k, &v})
        for (float& x : *t) x = u(rng);
    q[0] = 1.f;
    auto shifted = k;
    for (int j = 0; j < 16; ++j) shifted[j * 8] += 500.f;  // adds 500 to every score
    const auto a = host_reference(p, {}, q, k, v), b = host_reference(p, {}, q, shifted, v);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4) << i;
}

}  // namespace
}  // namespace fmha
