// Rows of the [batch, heads, seq, head_dim] tensors: where one starts, where a query row's
// per-row results go (its log-sum-exp), and 8-column stores of fp32 results.
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "fmha/params.h"
#include "kernels/common/online_softmax.h"
#include "kernels/common/sequence.h"
#include "kernels/numeric.h"

namespace fmha {

// Element 0 of row (batch, head, position) of a tensor, packed where cu_seqlens is given
// (FwdParams states the layouts).
template <class Element>
__device__ inline Element* row_start(Element* base, const TensorStrides& s, const int* cu_seqlens, int64_t batch, int head,
                                     int position) {
    return base + sequence_index(cu_seqlens, batch) * s.batch + int64_t(head) * s.head + int64_t(position) * s.row;
}

// The index of query row (batch, head, position) in contiguous [batch, heads_q, seqlen_q]
// arrays: the split workspace (and FwdParams::lse of a padded batch). Params: FwdParams or
// BwdParams, which state the lengths and layouts alike.
template <class Params>
__device__ inline int64_t query_row_index(const Params& p, int64_t batch, int head, int position) {
    return (batch * p.heads_q + head) * p.seqlen_q + position;
}

// The index of query row (batch, head, position) in FwdParams::lse: [heads_q, total_q] where Q
// is packed (FlashAttention's varlen LSE), else [batch, heads_q, seqlen_q]. kMayBePacked: as
// packed_only().
template <bool kMayBePacked = true, class Params>
__device__ inline int64_t lse_index(const Params& p, int64_t batch, int head, int position) {
    const int* cu_seqlens = packed_only<kMayBePacked>(p.cu_seqlens_q);
    return cu_seqlens ? int64_t(head) * p.total_q + cu_seqlens[batch] + position : query_row_index(p, batch, head, position);
}

// A finished row's log-sum-exp (from its log2-domain state) to FwdParams::lse, where the launch
// asks for it. Behind a run-time branch: a launch without it pays nothing else.
template <bool kMayBePacked = true>
__device__ inline void store_lse(const FwdParams& p, int64_t batch, int head, int position, float row_max, float row_sum) {
    if (p.lse) p.lse[lse_index<kMayBePacked>(p, batch, head, position)] = natural_lse(row_max, row_sum);
}

// Eight results, each times inv, as fp32 to row[column...] (16-byte aligned; global or shared).
// Each store indexes a vector pointer, as store8_output's does: through a pointer to elements nvcc
// split some into four 4-byte stores (docs/decisions.md, "Results stored as 16-byte vectors").
__device__ inline void store8_fp32(float* row, int column, const float (&x)[8], float inv) {
    reinterpret_cast<float4*>(row)[column / 4] = make_float4(x[0] * inv, x[1] * inv, x[2] * inv, x[3] * inv);
    reinterpret_cast<float4*>(row)[column / 4 + 1] = make_float4(x[4] * inv, x[5] * inv, x[6] * inv, x[7] * inv);
}

// Eight results of row (batch, head, position) of O, from head-dim `column` (a multiple of 8) on,
// each times inv.
template <class Config, bool kMayBePacked = true>
__device__ inline void store8_output(const FwdParams& p, int64_t batch, int head, int position, int column,
                                     const float (&x)[8], float inv) {
    uint16_t* out =
        row_start(static_cast<uint16_t*>(p.o), p.o_strides, packed_only<kMayBePacked>(p.cu_seqlens_q), batch, head, position);
    reinterpret_cast<uint4*>(out)[column / 8] = pack8<DTypeTraits<Config::dtype>>(x, inv);
}

}  // namespace fmha
