// Online softmax over query rows whose scores lie in MMA accumulator fragments: each thread
// holds a few elements of kRows rows, and the kLanesPerRow lanes sharing a row are adjacent
// (xor-shuffle partners). Scores stay in the log2 domain, scaled by scale x log2(e) inside the
// exponent (one fused multiply-add per score). The scale must be positive: the row maximum is
// taken before scaling.
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>

#include "kernels/group.h"
#include "kernels/common/online_softmax.h"

namespace fmha {

template <int kRows, int kLanesPerRow>
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
#pragma unroll
        for (int r = 0; r < kRows; ++r) tile_max[r] = -INFINITY;
#pragma unroll
        for (int e = 0; e < N; ++e) tile_max[row_of(e)] = fmaxf(tile_max[row_of(e)], s[e]);
        float reference[kRows];  // what a row's scaled scores subtract (raise_max)
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
            rescale[r] = raise_max(max[r], Group<kLanesPerRow>::max(tile_max[r]) * scale_log2, reference[r]);
            sum[r] *= rescale[r];
        }
#pragma unroll
        for (int e = 0; e < N; ++e) {
            s[e] = exp2_approx(fmaf(s[e], scale_log2, -reference[row_of(e)]));
            sum[row_of(e)] += s[e];
        }
    }

    // The row's whole sum of exponentials (every lane of the row gets it).
    __device__ float total(int r) const { return Group<kLanesPerRow>::sum(sum[r]); }

    // The row's log-sum-exp in natural log (FwdParams::lse), from its total.
    __device__ float lse(int r, float total_sum) const { return natural_lse(max[r], total_sum); }
};

}  // namespace fmha
