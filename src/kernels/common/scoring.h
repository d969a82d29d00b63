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
        // tanh saturates to +-1 for large arguments, so a capped score never overflows exp2.
        const float s = cap_log2 != 0.f ? cap_log2 * tanhf(dot * cap_inv) : dot * scale_log2;
        return s - slope_log2 * float(abs(diagonal - key));
    }
};

}  // namespace fmha
