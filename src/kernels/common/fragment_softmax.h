// Online softmax over query rows whose scores lie in MMA accumulator fragments: each thread
// holds a few elements of kRows rows, and the lanes sharing a row form a RowLanes group (its
// max and sum reduce over them): adjacent lanes in wgmma's layout (Group<4>), the lane pair at
// xor distance 32 in MFMA's transposed scores (XorPair<32>). Scores stay in the log2 domain,
// scaled by scale x log2(e) inside the exponent (one fused multiply-add per score). The scale
// must be positive: the row maximum is taken before scaling.
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>

#include "kernels/group.h"
#include "kernels/common/online_softmax.h"

namespace fmha {

template <int kRows, class RowLanes>
struct FragmentSoftmax {
    float max[kRows];  // running maximum of the scaled scores seen so far; -inf before any key
    float sum[kRows];  // this thread's share of the running sum of exponentials

    __device__ void init() {
#pragma unroll
        for (int r = 0; r < kRows; ++r) max[r] = -INFINITY, sum[r] = 0.f;
    }

    // Turns one tile's scores into probabilities relative to the new running maxima, adds them
    // to the sums, and returns in `rescale` the factor for what was accumulated before.
    // row_of(e): which of the thread's rows element e belongs to (a constant per e).
    template <int N, class RowOf>
    __device__ void update(float (&s)[N], float scale_log2, float (&rescale)[kRows], RowOf row_of) {
        float tile_max[kRows];
        reduce_rows<4>(s, row_of, [](float a, float b) { return fmaxf(a, b); }, tile_max);
        float reference[kRows];  // what a row's scaled scores subtract (raise_max)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
            rescale[r] = raise_max(max[r], RowLanes::max(tile_max[r]) * scale_log2, reference[r]);
#pragma unroll
        for (int e = 0; e < N; ++e) s[e] = exp2_approx(fmaf(s[e], scale_log2, -reference[row_of(e)]));
        add_to_sums(s, rescale, row_of);
    }

    // The same where row r's scores are scale_log2 x s + offset[r]: a term all of this thread's
    // scores of the row share (ALiBi's per-row part in the wgmma loop), at no instruction per
    // score. The lanes of a row may have offsets of their own: each lane's maximum is scaled and
    // offset before the row's maximum is taken over them. A body of its own: the update above
    // written as this one with zero offsets spilled d256's causal serving kernels.
    template <int N, class RowOf>
    __device__ void update(float (&s)[N], float scale_log2, float (&rescale)[kRows], RowOf row_of, const float (&offset)[kRows]) {
        float tile_max[kRows];
        reduce_rows<4>(s, row_of, [](float a, float b) { return fmaxf(a, b); }, tile_max);
        float addend[kRows];  // the row's offset less what its scores subtract (raise_max)
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            float reference;
            rescale[r] = raise_max(max[r], RowLanes::max(fmaf(tile_max[r], scale_log2, offset[r])), reference);
            addend[r] = offset[r] - reference;
        }
#pragma unroll
        for (int e = 0; e < N; ++e) s[e] = exp2_approx(fmaf(s[e], scale_log2, addend[row_of(e)]));
        add_to_sums(s, rescale, row_of);
    }

    // The update for scores that need no running maximum (BoundedScores): s holds each score
    // less `offset`, the row's maximum stays at it (for the LSE), and nothing is rescaled.
    template <int N, class RowOf>
    __device__ void update_bounded(float (&s)[N], float offset, float (&rescale)[kRows], RowOf row_of) {
#pragma unroll
        for (int e = 0; e < N; ++e) s[e] = exp2_approx(s[e]);
        float tile_sum[kRows];
        reduce_rows<1>(s, row_of, [](float a, float b) { return a + b; }, tile_sum);
#pragma unroll
        for (int r = 0; r < kRows; ++r) sum[r] += tile_sum[r], max[r] = offset, rescale[r] = 1.f;
    }

    // A tile's probabilities into the running sums, rescaled.
    template <int N, class RowOf>
    __device__ void add_to_sums(const float (&s)[N], const float (&rescale)[kRows], RowOf row_of) {
        float tile_sum[kRows];  // one chain: the exponentials it waits for come one by one anyway
        reduce_rows<1>(s, row_of, [](float a, float b) { return a + b; }, tile_sum);
#pragma unroll
        for (int r = 0; r < kRows; ++r) sum[r] = fmaf(sum[r], rescale[r], tile_sum[r]);
    }

    // Each of the thread's rows reduced over its elements of s by op, in kChains interleaved
    // chains: one serial chain of N / kRows dependent instructions puts its whole latency on
    // every step (docs/mmaprefill.md). row_of is constant per element once unrolled, and so is
    // `seen`.
    template <int kChains, int N, class RowOf, class Op>
    __device__ static void reduce_rows(const float (&s)[N], RowOf row_of, Op op, float (&out)[kRows]) {
        static_assert(N / kRows >= kChains, "a chain per element at least");
        float chain[kRows][kChains];
        int seen[kRows] = {};
#pragma unroll
        for (int e = 0; e < N; ++e) {
            const int r = row_of(e), c = seen[r] % kChains;
            chain[r][c] = seen[r] < kChains ? s[e] : op(chain[r][c], s[e]);
            ++seen[r];
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            out[r] = chain[r][0];
#pragma unroll
            for (int c = 1; c < kChains; ++c) out[r] = op(out[r], chain[r][c]);
        }
    }

    // The row's whole sum of exponentials (every lane of the row gets it).
    __device__ float total(int r) const { return RowLanes::sum(sum[r]); }

    // The row's log-sum-exp in natural log (FwdParams::lse), from its total.
    __device__ float lse(int r, float total_sum) const { return natural_lse(max[r], total_sum); }
};

}  // namespace fmha
