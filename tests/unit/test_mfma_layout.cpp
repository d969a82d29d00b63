// The MFMA fragment layouts (kernels/mma/mfma.h) against the text that documents them, and the
// properties the CDNA prefill main loop rests on: every matrix element in exactly one lane and
// item, the score accumulators as the next product's B operand, gfx908's two bf16 half steps
// covering the k step once. Host only: no GPU needed.
#include <gtest/gtest.h>

#include <set>
#include <utility>

#include "kernels/mma/mfma.h"

namespace fmha {
namespace {

using mfma::Index;

// Every (row, column) of a rows x columns matrix appears exactly once over (lane, slot).
template <class Map>
void expect_each_element_once(Map map, int slots, int rows, int columns) {
    std::set<std::pair<int, int>> seen;
    for (int lane = 0; lane < mfma::kWaveLanes; ++lane)
        for (int slot = 0; slot < slots; ++slot) {
            const Index e = map(lane, slot);
            ASSERT_TRUE(e.row >= 0 && e.row < rows && e.column >= 0 && e.column < columns) << lane << " " << slot;
            EXPECT_TRUE(seen.insert({e.row, e.column}).second) << "lane " << lane << ", slot " << slot << " repeats";
        }
    EXPECT_EQ(int(seen.size()), rows * columns);
}

TEST(MfmaLayout, EachOperandAndAccumulatorElementIsInOneLane) {
    expect_each_element_once(mfma::a_element, mfma::kItems, mfma::kBlock, mfma::kK);
    expect_each_element_once(mfma::b_element, mfma::kItems, mfma::kK, mfma::kBlock);
    expect_each_element_once(mfma::d_element, mfma::kAccumulators, mfma::kBlock, mfma::kBlock);
}

// The documented formulas, written out for a few lanes: A[i][k] in lane i + 32 (k / 4), item
// k % 4; D[i][j] in lane j + 32 ((i / 4) % 2), register 4 (i / 8) + i % 4.
TEST(MfmaLayout, MatchesTheDocumentedFormulas) {
    for (int i = 0; i < 32; ++i)
        for (int k = 0; k < 8; ++k) {
            const Index a = mfma::a_element(i + 32 * (k / 4), k % 4);
            EXPECT_EQ(a.row, i);
            EXPECT_EQ(a.column, k);
            const Index b = mfma::b_element(i + 32 * (k / 4), k % 4);
            EXPECT_EQ(b.row, k);
            EXPECT_EQ(b.column, i);
        }
    for (int i = 0; i < 32; ++i)
        for (int j = 0; j < 32; ++j) {
            const Index d = mfma::d_element(j + 32 * ((i / 4) % 2), 4 * (i / 8) + i % 4);
            EXPECT_EQ(d.row, i);
            EXPECT_EQ(d.column, j);
        }
    EXPECT_EQ(mfma::d_element(32, 0).row, 4);
    EXPECT_EQ(mfma::d_element(0, 4).row, 8);
    EXPECT_EQ(mfma::d_element(63, 15).row, 31);
    EXPECT_EQ(mfma::d_element(63, 15).column, 31);
}

// S^T = K Q^T leaves in lane l the scores of query l % 32; its registers 4q .. 4q + 3 are the
// lane's B operand (P^T) of k step q of O^T = V^T P^T over those 32 keys.
TEST(MfmaLayout, AccumulatorsAreTheNextProductsBOperand) {
    for (int lane = 0; lane < mfma::kWaveLanes; ++lane)
        for (int q = 0; q < mfma::kBlock / mfma::kK; ++q)
            for (int item = 0; item < mfma::kItems; ++item) {
                const Index d = mfma::d_element(lane, mfma::b_register(q, item));
                const Index b = mfma::b_element(lane, item);
                EXPECT_EQ(d.row, mfma::kK * q + b.row) << lane << " " << q << " " << item;
                EXPECT_EQ(d.column, b.column);
            }
}

// gfx908's bf16: v_mfma_f32_32x32x4bf16 holds A[i][k'] in lane i + 32 (k' / 2), item k' % 2.
// Half step h takes items 2h, 2h + 1 of the k step's operands; the k of the step it then reads
// as its k' is split_k(h, k'), for A and B alike, and the two half steps read each k once.
TEST(MfmaLayout, Gfx908Bf16HalfStepsCoverTheKStepOnce) {
    std::multiset<int> covered;
    for (int h = 0; h < 2; ++h)
        for (int k_half = 0; k_half < 4; ++k_half) {
            covered.insert(mfma::split_k(h, k_half));
            for (int i = 0; i < 32; ++i) {
                const int lane = i + 32 * (k_half / 2), item = 2 * h + k_half % 2;
                EXPECT_EQ(mfma::a_element(lane, item).column, mfma::split_k(h, k_half));
                EXPECT_EQ(mfma::b_element(lane, item).row, mfma::split_k(h, k_half));
            }
        }
    EXPECT_EQ(covered, (std::multiset<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

}  // namespace
}  // namespace fmha
