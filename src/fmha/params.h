// What a forward kernel is given at run time. Shared by host code and kernels.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fmha {

// Element strides of a [batch, heads, seq, head_dim] tensor whose last dimension is contiguous.
// Layouts (seed [b,h,s,d], token-major [b,s,h,d], packed QKV) differ only in these numbers.
struct TensorStrides {
    int64_t batch;
    int64_t head;
    int64_t row;
};

struct FwdParams {
    const void* q;
    const void* k;
    const void* v;
    void* o;
    TensorStrides q_strides, k_strides, v_strides, o_strides;

    int batch;
    int heads_q;
    int heads_kv;        // divides heads_q; query head h reads KV head h / (heads_q / heads_kv)
    int seqlen_q;        // per-sequence maximum when seqlens_q is set
    int seqlen_kv;
    int head_dim;

    // Variable sequence lengths (-min-s): per-batch lengths <= the maxima above, or nullptr.
    // Rows past a sequence's length are neither read nor written.
    const int* seqlens_q;
    const int* seqlens_kv;

    float scale;         // softmax scale applied to Q.K^T (default 1/sqrt(head_dim))
    // Causal kernels: query i of a sequence sees key j iff
    //   i + (len_kv - len_q) - window < j <= i + (len_kv - len_q)   (bottom-right aligned);
    // window >= len_kv means plain causal.
    int window;

    // Optional output (nullptr: not written): each query row's softmax log-sum-exp in natural
    // log, log(sum_j exp(scale * q.k_j)) over the keys it sees, fp32, contiguous
    // [batch, heads_q, seqlen_q]; -inf for a row that sees no key.
    float* lse;

    // Device scratch for kernels that split the key range across blocks: at least as many
    // bytes as the kernel's workspace function asks for (KernelEntry::workspace); unused
    // (and may be null) when it asks for none.
    void* workspace;
    size_t workspace_bytes;
};

}  // namespace fmha
