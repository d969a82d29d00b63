// What a backward kernel is given at run time. Shared by host code and kernels.
#pragma once

#include <cstddef>
#include <cstdint>

#include "fmha/params.h"

namespace fmha {

// dQ, dK, dV of O = softmax(scale Q K^T) V from the forward's inputs, its output O, the output's
// gradient dO and its log-sum-exps. The mask, heads, lengths and strides mean what they mean
// in FwdParams; dK and dV are per KV head (summed over the query heads of its group).
struct BwdParams {
    const void* q;
    const void* k;
    const void* v;
    const void* o;
    const void* d_o;     // dL/dO, like O
    void* dq;            // like Q
    void* dk;            // like K
    void* dv;            // like V
    TensorStrides q_strides, k_strides, v_strides, o_strides, d_o_strides, dq_strides, dk_strides, dv_strides;

    // The forward's natural-log LSE, fp32 contiguous [batch, heads_q, seqlen_q]; -inf for a row
    // that sees no key (such a row has zero gradients).
    const float* lse;
    // Optional (nullptr: zero): dL/dLSE, like lse, when the forward's LSE was used too.
    const float* d_lse;

    int batch;
    int heads_q;
    int heads_kv;
    int seqlen_q;
    int seqlen_kv;
    int head_dim;
    const int* seqlens_q;   // per-sequence lengths, or nullptr (FwdParams)
    const int* seqlens_kv;
    // A packed batch (FwdParams; Q, O, dO, dQ and K, V, dK, dV all packed), else nullptr; its LSE
    // is then [heads_q, total_q]. total_q > 0 marks a packed batch (the workspace's layout, which
    // a plan sizes before any pointer is known); 0 a padded one.
    const int* cu_seqlens_q;
    const int* cu_seqlens_kv;
    int total_q;
    int total_kv;

    float scale;
    KeyWindow window;  // masked kernels: as FwdParams::window
    // The forward's scoring options, as FwdParams' (logit softcapping, ALiBi); 0 / nullptr: off.
    float softcap;
    const float* alibi_slopes;
    int alibi_batch_stride;

    // Device scratch of at least BwdKernelEntry::workspace(params) bytes: the fp32 dQ
    // accumulator and D = rowsum(dO * O) per query row. Launches initialise it themselves.
    void* workspace;
    size_t workspace_bytes;

    // The forward's dropout (same p, seed and offset): the kernel regenerates its mask.
    DropoutParams dropout;

    // dQ's partial sums added in a fixed order (the key tiles'), so that equal inputs give
    // bitwise-equal gradients; off, they are added in the order the blocks reach them.
    bool deterministic;
};

// Whether the backward recomputes scores with softcapping or ALiBi: launches without them run a
// loop compiled without them (src/kernels/mmabwd.h).
inline bool has_scoring_options(const BwdParams& p) { return p.softcap != 0.f || p.alibi_slopes; }

// The backward kernels' grid: one dimension, a block per tile of at least 16 keys (simtbwd's;
// mmabwd's are 64 or 128) of each KV head of each sequence, and one more for a packed one
// (src/kernels/mmabwd/block_steps.h). The launcher and the heuristic ask.
inline bool bwd_grid_fits(int64_t batch, int64_t heads_kv, int64_t seqlen_kv) {
    constexpr int64_t kSmallestKeyTile = 16, kMostBlocks = 2147483647;
    return (seqlen_kv / kSmallestKeyTile + 1) * heads_kv * batch <= kMostBlocks;
}

}  // namespace fmha
