// The scoring options (softcapping, ALiBi; common/scoring.h states the rule) in the backward's
// main loops, which recompute P from the forward's LSE and multiply dS by the capped score's
// derivative.
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>

#include "kernels/common/online_softmax.h"
#include "kernels/common/scoring.h"

namespace fmha {
namespace mmabwd {

// One step's rule (a step is rows of one query head), for the probabilities recomputed from the
// forward's LSE and for the derivative of the capped score, 1 - tanh^2, by which dS is multiplied
// before dQ and dK.
struct StepScoring {
    ScoreRule rule;
    float slope_log2;  // the step's head's ALiBi slope x log2(e); 0 without ALiBi
    float distance0;   // the thread's first element's diagonal - key

    // slopes: the sequence's (sequence_slopes()), or nullptr; distance0: as the field.
    __device__ static StepScoring of(float scale, float softcap, const float* slopes, int head, int distance0) {
        return {ScoreRule::of(scale, softcap), slopes ? slopes[head] * kLog2e : 0.f, float(distance0)};
    }

    __device__ bool capped() const { return rule.cap_log2 != 0.f; }
    // Without softcapping: a dot product's score in the log2 domain.
    __device__ float score(float dot) const { return dot * rule.dot_scale; }
    // With softcapping, in two parts, so that a loop can take the first while other work runs:
    // a dot product's tanh ...
    __device__ float tanh(float dot) const { return tanh_of_scaled(dot * rule.dot_scale); }
    // ... then its score, and *score_grad = d score / d (scale dot) = 1 - tanh^2 (a masked
    // element's tanh may be -inf: its score is -inf and its factor 0).
    __device__ float capped_score(float tanh, float* score_grad) const {
        *score_grad = fmaxf(1.f - tanh * tanh, 0.f);
        return rule.cap_log2 * tanh;
    }
    // P from an element's score before ALiBi and its row's LSE x log2(e); `offset`: how much
    // further its key is from its row's diagonal than the thread's first element's (rows down
    // minus keys right), a constant of an unrolled loop, so that ALiBi's |diagonal - key| costs
    // no integer conversion an element (a quarter-rate instruction, as the exponential).
    __device__ float probability(float score, float lse_log2, int offset) const {
        return exp2_approx(score - slope_log2 * fabsf(distance0 + float(offset)) - lse_log2);
    }
};

}  // namespace mmabwd
}  // namespace fmha
