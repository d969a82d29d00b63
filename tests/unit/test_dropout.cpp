// The dropout generator (kernels/common/dropout.h) on the host: Philox4x32-10 against
// Random123's known answers, the element-to-call mapping the kernels' layouts rely on, and the
// keep rate within its statistical bound. No GPU needed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <set>
#include <utility>

#include "fmha/heuristics.h"
#include "fmha/problem.h"
#include "kernels/common/dropout.h"

namespace fmha {
namespace {

void expect_words(const PhiloxWords& got, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    EXPECT_EQ(got.w[0], a);
    EXPECT_EQ(got.w[1], b);
    EXPECT_EQ(got.w[2], c);
    EXPECT_EQ(got.w[3], d);
}

// Random123's kat_vectors for philox4x32_10 (counter, key -> output).
TEST(Dropout, PhiloxMatchesKnownAnswers) {
    expect_words(philox4x32_10(0, 0, 0, 0, 0, 0), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
    expect_words(philox4x32_10(~0u, ~0u, ~0u, ~0u, ~0u, ~0u), 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
    expect_words(philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u), 0xd16cfe09u,
                 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

// Each call's four words are the columns 16 m + 8 c + 2 t + e (c, e in {0, 1}) of one t: the
// four a thread holds of a 16-key block in wgmma's and mma.sync's layouts. Every column of a row
// is one (call, word) and every (call, word) one column.
TEST(Dropout, EachColumnIsOneWordOfOneCall) {
    std::set<std::pair<uint32_t, int>> seen;
    for (int j = 0; j < 256; ++j) {
        EXPECT_TRUE(seen.insert({dropout_column_counter(j), dropout_word(j)}).second) << j;
        const int t = (j >> 1) & 3, block = j >> 4;
        for (int c = 0; c < 2; ++c)
            for (int e = 0; e < 2; ++e) {
                const int column = 16 * block + 8 * c + 2 * t + e;
                EXPECT_EQ(dropout_column_counter(column), dropout_column_counter(j));
                EXPECT_EQ(dropout_word(column), 2 * c + e);
            }
    }
}

// The keep rate over a million elements within 6 sigma of 1 - p; rows, heads and seeds differ.
TEST(Dropout, KeepRateWithinItsBound) {
    const float p = 0.1f;
    const Dropout dropout = Dropout::of(p, 0x1234567890abcdefull, 12);
    int64_t kept = 0, n = 0;
    for (int stream = 0; stream < 4; ++stream)
        for (int i = 0; i < 256; ++i)
            for (int j = 0; j < 1024; ++j, ++n) kept += dropout.keeps(dropout.row(stream, i), j);
    const double sigma = std::sqrt(n * p * (1.0 - p));
    EXPECT_NEAR(double(kept), n * (1.0 - p), 6 * sigma);
    EXPECT_FLOAT_EQ(dropout.keep_scale, 1.f / 0.9f);
    // Another seed keeps other elements.
    const Dropout other = Dropout::of(p, 0x1234567890abcdeeull, 12);
    int differ = 0;
    for (int j = 0; j < 1024; ++j) differ += dropout.keeps(dropout.row(0, 0), j) != other.keeps(other.row(0, 0), j);
    EXPECT_GT(differ, 50);
}

// Only the tensor-core prefill family applies dropout, and not beside softcapping or ALiBi.
TEST(Dropout, OnlyTheTensorCorePrefillFamilyTakesIt) {
    Problem p;
    p.dtype = DType::bf16;
    p.head_dim = 128;
    p.seqlen_q = p.seqlen_kv = 256;
    p.dropout = 0.1f;
    const KernelKey mma{DType::bf16, 128, HeadsKind::gqa, Mask::nomask, Family::mmaprefill, Arch::sm90};
    const KernelKey prefill{DType::bf16, 128, HeadsKind::gqa, Mask::nomask, Family::prefill, Arch::sm90};
    std::string why;
    EXPECT_TRUE(kernel_supports(mma, p, &why)) << why;
    EXPECT_FALSE(kernel_supports(prefill, p, &why));
    EXPECT_NE(why.find("applies dropout"), std::string::npos) << why;
    // Beside softcapping and ALiBi, and at every head_dim (d200 on the d256 kernel).
    p.softcap = 30.f;
    p.alibi = true;
    EXPECT_TRUE(kernel_supports(mma, p, &why)) << why;
    p.head_dim = 200;
    const KernelKey d256{DType::bf16, 256, HeadsKind::gqa, Mask::nomask, Family::mmaprefill, Arch::sm90};
    EXPECT_TRUE(kernel_supports(d256, p, &why)) << why;
    // The MFMA loop's d256 kernels are compiled without it (registers): declined, with the reason.
    const KernelKey mfma_d256{DType::bf16, 256, HeadsKind::gqa, Mask::nomask, Family::mmaprefill, Arch::gfx90a};
    EXPECT_FALSE(kernel_supports(mfma_d256, p, &why));
    EXPECT_NE(why.find("MFMA loop applies dropout up to head_dim 128"), std::string::npos) << why;
    p.dropout = 1.f;
    EXPECT_FALSE(p.validate().empty());
}

}  // namespace
}  // namespace fmha
