// Device-side helpers for checking kernels: random inputs, the reference forward pass, and
// the element-wise comparison. Written for obviousness, not speed, and independent of the
// kernel families (two-pass exact softmax in natural-exp fp32, one thread per query row).
#pragma once

#include <hip/hip_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "fmha/bwd_params.h"
#include "fmha/params.h"
#include "fmha_catalogue.h"

namespace fmha {

// Fills `count` elements with values uniform in [-range, range), a pure function of
// (seed, stream_id, index): the same call always yields the same data.
hipError_t fill_random(void* data, int64_t count, DType dtype, uint64_t seed, uint64_t stream_id, float range,
                       hipStream_t stream = nullptr);

// out: fp32 [batch, heads_q, seqlen_q, head_dim], contiguous. Rows past a sequence's length
// (variable lengths) are written as zeros. lse (optional): each row's softmax log-sum-exp in
// natural log, fp32 [batch, heads_q, seqlen_q]; -inf for a row that sees no key, and for rows
// past a sequence's length. The mask is params.window's, applied always (FwdParams::window:
// a problem without a mask has both sides unbounded). kept (with params.dropout.p > 0): uint8
// [batch, heads_q, seqlen_q, seqlen_kv], 1 where the dropout mask keeps an element
// (launch_dropout_mask, fmha/dropout_mask.h).
hipError_t reference_forward(const FwdParams& params, DType dtype, float* out, float* lse = nullptr,
                             hipStream_t stream = nullptr, const uint8_t* kept = nullptr);

// The backward's gradients in fp32, contiguous: dq [batch, heads_q, seqlen_q, head_dim], dk and
// dv [batch, heads_kv, seqlen_kv, head_dim] (summed over each KV head's query heads), from
// params' q, k, v and d_o (its o, lse and workspace are not read: the probabilities and
// rowsum(P * dP) are recomputed). Rows past a sequence's length and keys no row sees get
// zeros. kept: as reference_forward's, the forward's dropout mask. Synchronises the stream.
hipError_t reference_backward(const BwdParams& params, DType dtype, float* dq, float* dk, float* dv,
                              hipStream_t stream = nullptr, const uint8_t* kept = nullptr);

struct Tolerance {
    float atol, rtol;   // per element: |out - ref| <= atol + rtol * |ref|
    float rel_l2;       // whole tensor: ||out - ref|| / ||ref||
};
Tolerance default_tolerance(DType dtype);

// ||out - ref|| / ||ref|| from the squared sums. An all-zero reference has no relative error:
// the per-element tolerance (atol there) decides, so rounding noise around zero passes.
inline double relative_l2(double err_sq, double ref_sq) { return ref_sq > 0 ? std::sqrt(err_sq / ref_sq) : 0.0; }

struct CompareResult {
    int64_t checked = 0;       // elements compared (rows inside their sequence)
    int64_t nan_count = 0;     // NaN or inf in the output (poison left behind counts here)
    int64_t bad_count = 0;     // elements outside the per-element tolerance
    double max_abs_err = 0;
    int64_t worst_index = -1;  // logical [b, h, s, d] index of max_abs_err (or of a NaN)
    float worst_out = 0, worst_ref = 0;
    double rel_l2 = 0;
    float ref_max_abs = 0;     // the reference's largest magnitude over the elements compared

    int row_elements = 0;      // elements compared per row: head_dim for O, 1 for the log-sum-exps

    bool passed(const Tolerance& tol) const {
        return checked > 0 && nan_count == 0 && bad_count == 0 && rel_l2 <= tol.rel_l2;
    }
    std::string describe(const FwdParams& params) const;  // "max abs err ..., rel L2 ..., worst at b=.."
};

// Compares the kernel's output (params.o, in its layout) with the fp32 reference.
hipError_t compare_with_reference(const FwdParams& params, DType dtype, const float* reference,
                                  const Tolerance& tol, CompareResult* result);

// The log-sum-exps are fp32 results of fp32 arithmetic on the same inputs: they agree closely.
Tolerance lse_tolerance();

// Compares the kernel's log-sum-exps (params.lse) with the reference's (lse of
// reference_forward), over the rows inside their sequences. A -inf (a row that sees no key)
// matches only -inf; NaN never passes.
hipError_t compare_lse_with_reference(const FwdParams& params, const float* reference_lse, const Tolerance& tol,
                                      CompareResult* result);

}  // namespace fmha
