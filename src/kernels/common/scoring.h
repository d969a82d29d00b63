// The scoring options of FwdParams (logit softcapping, ALiBi) as kernels apply them: a query
// row's score of one key, in the log2 domain the online softmax keeps (params.h has the rule).
// The reference (src/reference/) keeps its own arithmetic so that it stays an independent check.
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>

#include "fmha/params.h"
#include "kernels/common/mask.h"
#include "kernels/common/online_softmax.h"

namespace fmha {

// Whether a launch asks for any run-time option that the plain kernels do not take. Families
// test it once per launch, so that launches without one run code that has none of them. (A
// paged problem's shape_params() has its page size before it has a block table: plans made
// from them already count it.)
__host__ __device__ inline bool has_run_time_options(const FwdParams& p) {
    return p.softcap != 0.f || p.alibi_slopes != nullptr || p.block_table != nullptr || p.page_size != 0;
}

// One query row's scoring: the softcap and its head's ALiBi slope, both pre-multiplied by
// log2(e), and the row's diagonal, from which ALiBi measures distances.
struct RowScoring {
    float scale_log2;  // softmax scale x log2(e)
    float cap_log2;    // softcap x log2(e); 0: no softcapping
    float cap_inv;     // scale / softcap
    float slope_log2;  // ALiBi slope x log2(e); 0: no ALiBi
    int diagonal;

    // Takes values, not the params struct: a reference to a kernel argument costs a stack copy on AMD.
    // A row that does not exist (row.valid false) may have a head past the last: it reads no slope.
    __device__ static RowScoring of(float scale, float softcap, const float* alibi_slopes, int head, const MaskRow& row) {
        RowScoring r;
        r.scale_log2 = scale * kLog2e;
        r.cap_log2 = softcap * kLog2e;
        r.cap_inv = softcap != 0.f ? scale / softcap : 0.f;
        r.slope_log2 = alibi_slopes && row.valid ? alibi_slopes[head] * kLog2e : 0.f;
        r.diagonal = row.diagonal;
        return r;
    }

    // The score of `key` from the row's dot product with it, in the log2 domain.
    __device__ float log2_score(float dot, int key) const {
        const float s = cap_log2 != 0.f ? cap_log2 * tanh_of(dot * cap_inv) : dot * scale_log2;
        return s - slope_log2 * float(abs(diagonal - key));
    }

    // tanh(x) = 1 - 2 / (exp(2x) + 1): one exp2 and one division, where the library's tanhf
    // holds more registers (AMD's CUDA-core prefill lost an occupancy step to it). Saturates to
    // +-1 (exp2 to inf or 0), so a capped score never overflows; near 0 its absolute error is
    // a few 1e-8, below the scores' own rounding.
    __device__ static float tanh_of(float x) { return 1.f - 2.f / (exp2f(x * (2.f * kLog2e)) + 1.f); }
};

}  // namespace fmha
