// The scoring options of FwdParams (logit softcapping, ALiBi) as kernels apply them: a query
// row's score of one key, in the log2 domain the online softmax keeps (params.h has the rule).
// The reference (src/reference/) keeps its own arithmetic so that it stays an independent check.
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>

#include "fmha/params.h"
#include "kernels/common/element_rows.h"
#include "kernels/common/mask.h"
#include "kernels/common/online_softmax.h"

namespace fmha {

// Whether a launch asks for any run-time option that the plain kernels do not take (packed
// batches among them: their sequences' places are loaded per work item; dropout and element
// rows too). Families test it once per launch, so that launches without one run code that has
// none of them. (A paged problem's shape_params() has its page size before it has a block
// table: plans made from them already count it.)
__host__ __device__ inline bool has_run_time_options(const FwdParams& p) {
    return p.softcap != 0.f || p.alibi_slopes != nullptr || p.block_table != nullptr || p.page_size != 0 ||
           p.cu_seqlens_q != nullptr || p.cu_seqlens_kv != nullptr || p.dropout.p != 0.f || element_rows(p.head_dim) ||
           p.pointer_options;
}

// Whether a paged KV cache is the launch's only run-time option (as above, a page size alone
// counts); the launcher's question, on the host.
inline bool pages_only(const FwdParams& p) {
    FwdParams unpaged = p;
    unpaged.block_table = nullptr, unpaged.page_size = 0;
    return (p.block_table != nullptr || p.page_size != 0) && !has_run_time_options(unpaged);
}

// Sequence b's ALiBi slopes (FwdParams::alibi_slopes: the same [heads_q] for every sequence, or
// row b of [batch, heads_q]), or nullptr without ALiBi. Takes values: a reference to a kernel
// argument costs a stack copy on AMD.
__host__ __device__ inline const float* sequence_slopes(const float* alibi_slopes, int batch_stride, int64_t batch) {
    return alibi_slopes ? alibi_slopes + batch * batch_stride : nullptr;
}

// tanh(x) as tanh_of_scaled(kTanhScale x). NVIDIA's special-function unit has tanh itself
// (tanh.approx.f32: relative error at most about 2^-11, below the scores' bf16 rounding and at
// fp16's): one instruction where 1 - 2 / (exp(2x) + 1) takes two (an exp2 and a reciprocal),
// and those units, which the softmax's exp2 also needs, bound the d64 and d128 tensor-core
// loops with softcapping (docs/decisions.md). Elsewhere tanh comes from exp2, which takes
// 2 log2(e) x: 1 - 2 / (2^y + 1), one exp2 and one fast division, where the library's tanhf
// holds more registers (AMD's CUDA-core prefill lost an occupancy step to it). Both saturate
// to +-1, so a capped score never overflows.
#if defined(__HIP_PLATFORM_NVIDIA__)
inline constexpr float kTanhScale = 1.f;
__device__ inline float tanh_of_scaled(float x) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
#else
inline constexpr float kTanhScale = 2.f * kLog2e;
__device__ inline float tanh_of_scaled(float y) { return 1.f - __fdividef(2.f, exp2_approx(y) + 1.f); }
#endif

// The launch-wide part of the rule: the scale and the softcap, pre-multiplied by log2(e). The
// tensor-core decode holds one of these and each row's ALiBi slope (RowScoring: per row).
struct ScoreRule {
    float dot_scale;  // what a dot product is multiplied by: scale x log2(e), or with
                      // softcapping, tanh_of_scaled's argument per unit: kTanhScale scale / softcap
    float cap_log2;   // softcap x log2(e); 0: no softcapping

    __device__ static ScoreRule of(float scale, float softcap) {
        return {softcap != 0.f ? kTanhScale * scale / softcap : scale * kLog2e, softcap * kLog2e};
    }

    // The score of a dot product before ALiBi, in the log2 domain: scale dot, or
    // softcap tanh(scale dot / softcap).
    __device__ float capped(float dot) const {
        const float x = dot * dot_scale;
        return cap_log2 != 0.f ? cap_log2 * tanh_of_scaled(x) : x;
    }

    // A row's ALiBi slope x log2(e) (0: no ALiBi). A row that does not exist (row.valid false)
    // may have a head past the last: it reads no slope.
    __device__ static float slope_log2(const float* alibi_slopes, int head, const MaskRow& row) {
        return alibi_slopes && row.valid ? alibi_slopes[head] * kLog2e : 0.f;
    }

    // The ALiBi bias of `key` for a row at `diagonal`, to subtract from its score.
    __device__ static float bias(float slope_log2, int diagonal, int key) { return slope_log2 * float(abs(diagonal - key)); }
};

// The scoring options' state for MMA accumulator fragments (the tensor-core prefill family,
// whose main loop applies them to a tile's elements): the launch's rule and the ALiBi slope of
// each of a thread's kRows rows.
template <int kRows>
struct FragmentScoring {
    ScoreRule rule;
    float slope_log2[kRows];  // each row's ALiBi slope x log2(e); 0 without ALiBi

    // Per launch: the rule; per work tile: each row's slope (head: its query head; a row that
    // does not exist reads none).
    __device__ void init(float scale, float softcap) { rule = ScoreRule::of(scale, softcap); }
    __device__ void set_row(int r, const float* alibi_slopes, int head, bool exists) {
        slope_log2[r] = alibi_slopes && exists ? alibi_slopes[head] * kLog2e : 0.f;
    }
};

// One query row's scoring, for the CUDA-core kernels: ScoreRule's rule with its values held per
// row (the softcap and its head's ALiBi slope, both pre-multiplied by log2(e), and the row's
// diagonal, from which ALiBi measures distances): holding a ScoreRule instead cost the
// CUDA-core prefill's options kernel registers (docs/decisions.md).
struct RowScoring {
    float scale_log2;  // softmax scale x log2(e)
    float cap_log2;    // softcap x log2(e); 0: no softcapping
    float cap_inv;     // kTanhScale x scale / softcap
    float slope_log2;  // ALiBi slope x log2(e); 0: no ALiBi
    int diagonal;

    // Takes values, not the params struct: a reference to a kernel argument costs a stack copy on AMD.
    __device__ static RowScoring of(float scale, float softcap, const float* alibi_slopes, int head, const MaskRow& row) {
        RowScoring r;
        r.scale_log2 = scale * kLog2e;
        r.cap_log2 = softcap * kLog2e;
        r.cap_inv = softcap != 0.f ? kTanhScale * scale / softcap : 0.f;
        r.slope_log2 = ScoreRule::slope_log2(alibi_slopes, head, row);
        r.diagonal = row.diagonal;
        return r;
    }

    // The score of `key` from the row's dot product with it, in the log2 domain.
    __device__ float log2_score(float dot, int key) const {
        const float s = cap_log2 != 0.f ? cap_log2 * tanh_of_scaled(dot * cap_inv) : dot * scale_log2;
        return s - ScoreRule::bias(slope_log2, diagonal, key);
    }
};

}  // namespace fmha
