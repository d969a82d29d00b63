// The online softmax in fp32, as every family keeps it: per query row a running maximum and a
// running sum of exp2(score - maximum), scores in the log2 domain (scale x log2(e) folded in).
// Partial results (of key slices or key splits) carry their log2-sum-exp and merge by it.
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>

namespace fmha {

// exp(x) = exp2(x * kLog2e): scores are kept in the log2 domain.
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

// 2^x by the special-function unit, flushing subnormal results to zero (probabilities that
// small add nothing); exp2f would add a range fix-up to every score. AMD: v_exp_f32, where the
// compiler has its builtin (clang 17).
__device__ inline float exp2_approx(float x) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#elif __has_builtin(__builtin_amdgcn_exp2f)
    return __builtin_amdgcn_exp2f(x);
#else
    return exp2f(x);
#endif
}

// Scores known to lie in [-bound, bound] (log2 domain; softcapped scores without ALiBi: bound =
// softcap x log2(e)) need no running maximum: exp2(score - offset(bound)) stays between 2^kBottom
// and 2^kTop for every score, so probabilities never overflow, stay normal in fp32 and bf16 (a
// probability times a value above 2^-40 stays normal too), and nothing accumulated needs a
// rescale. fp16's range (2^-14 to 2^16) holds no useful bound. docs/decisions.md, "Softcapped
// scores without a running maximum".
struct BoundedScores {
    static constexpr float kTop = 64.f;      // 2^64 x keys x |V| stays below fp32's 2^128 for keys x |V| < 2^64
    static constexpr float kBottom = -86.f;  // 2^-86 x |V| stays normal for |V| >= 2^-40
    __host__ __device__ static bool fit(float bound) { return 2.f * bound <= kTop - kBottom; }
    __host__ __device__ static float offset(float bound) { return fmaxf(0.f, bound - kTop); }
};

// One online-softmax step: raises a row's running maximum to include step_max and returns the
// factor that rescales what was accumulated under the old one. `reference` is what the step's
// scores subtract before exp2: the new maximum, or 0 while every key so far is masked (-inf),
// so that no inf - inf appears. kOnlyStep: the row's first and only step (one-step variants):
// nothing is accumulated yet, so the factor is 1, without an exp2 (docs/decisions.md).
template <bool kOnlyStep = false>
__device__ inline float raise_max(float& running_max, float step_max, float& reference) {
    const float new_max = kOnlyStep ? step_max : fmaxf(running_max, step_max);
    reference = new_max == -INFINITY ? 0.f : new_max;
    const float rescale = kOnlyStep ? 1.f : exp2f(running_max - reference);
    running_max = new_max;
    return rescale;
}

// Merging another state (other_max, its sum and accumulators) into a running one: raises the
// running maximum and returns the weights of both sides, sum = sum * mine + other_sum * theirs.
struct MergeWeights {
    float mine, theirs;
};
__device__ inline MergeWeights merge_max(float& running_max, float other_max) {
    float reference;
    const float mine = raise_max(running_max, other_max, reference);
    return {mine, exp2f(other_max - reference)};
}

// A row's log2-sum-exp from its state, -inf where it saw no key (a partial with no weight). A
// row's sum is at least 1 (its maximum contributes exp2(0)), so the hardware's approximate
// log2 is exact to a few ulp here.
__device__ inline float partial_lse(float row_max, float row_sum) {
    return row_sum > 0.f ? row_max + __log2f(row_sum) : -INFINITY;
}

// The same in natural log, as FwdParams::lse holds it.
__device__ inline float natural_lse(float row_max, float row_sum) {
    return row_sum > 0.f ? (row_max + __log2f(row_sum)) * kLn2 : -INFINITY;
}

}  // namespace fmha
