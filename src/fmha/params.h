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

// The keys a query row of a masked kernel sees around its diagonal, diagonal = i + len_kv - len_q
// for query i of a sequence (bottom-right aligned): keys j with
//   diagonal - left <= j <= diagonal + right.
// An unbounded side holds the largest sequence size there (left: seqlen_kv, right: seqlen_q),
// which bounds nothing. Causal is right = 0; FMHA_v2's sliding window of w keys is left = w - 1.
struct KeyWindow {
    int left;
    int right;
    int span;  // left + right: a row's test is then one compare against a launch constant (mask.h)

    static constexpr KeyWindow of(int left, int right) { return {left, right, left + right}; }
};

// Attention dropout (kernels/common/dropout.h): p = 0 is off. The Philox seed and offset are
// read from device memory, int64 [seed, offset], where PyTorch's generator writes them (so
// that a CUDA graph's replays draw fresh ones).
struct DropoutParams {
    float p;
    const int64_t* seed_offset;
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

    // Packed variable-length batches (FlashAttention's varlen layout), or nullptr: sequence b
    // is rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1 (int32 [batch + 1]) of its tensors, whose
    // strides' `batch` field is then the row stride (sequence b starts cu_seqlens[b] "batches"
    // in); its length is that span, or seqlens_* where given (FlashAttention's seqused_k: the
    // used part of a longer span). Q/O and K/V each packed or not.
    const int* cu_seqlens_q;
    const int* cu_seqlens_kv;
    int total_q;   // packed: rows of Q and O (cu_seqlens_q[batch])
    int total_kv;  // packed: rows of K and V

    float scale;         // softmax scale applied to Q.K^T (default 1/sqrt(head_dim))
    KeyWindow window;    // masked kernels' rule (kernels without a mask see every key)

    // Optional output (nullptr: not written): each query row's softmax log-sum-exp in natural
    // log, log(sum_j exp(scale * q.k_j)) over the keys it sees, fp32, contiguous
    // [batch, heads_q, seqlen_q] ([heads_q, total_q] where Q is packed); -inf for a row that
    // sees no key.
    float* lse;

    // Scoring options (FMHA_v2's -softcapping-scale-bmm1 and -alibi); 0 / nullptr: off. A score
    // is, in this order (as FlashAttention 2.6+ applies them):
    //   s = scale * q.k;  s = softcap * tanh(s / softcap);  s -= alibi_slopes[h] * |diagonal - j|
    // where diagonal = i + len_kv - len_q (the causal diagonal of query i, bottom-right aligned):
    // FlashAttention's ALiBi, which for causal rows equals slope * (j - diagonal).
    float softcap;
    const float* alibi_slopes;  // fp32 [heads_q], or [batch, heads_q] rows alibi_batch_stride apart
    int alibi_batch_stride;     // 0: every sequence's slopes the same row; heads_q: a row per sequence

    // Paged KV cache (FMHA_v2's -paged-kv); nullptr: K and V are laid out by their strides.
    // Key j of sequence b is row j % page_size of page block_table[b * max_pages_per_seq +
    // j / page_size]; K and V are then [pages, page_size, heads_kv, head_dim] and their strides'
    // `batch` field is the stride between pages. page_size: a power of two.
    const int* block_table;  // int32 [batch, max_pages_per_seq]
    int max_pages_per_seq;
    int page_size;

    // Device scratch for kernels that split the key range across blocks: at least as many
    // bytes as the kernel's workspace function asks for (KernelEntry::workspace); unused
    // (and may be null) when it asks for none.
    void* workspace;
    size_t workspace_bytes;

    // Dropout on the probabilities (the tensor-core prefill family only; others decline it).
    DropoutParams dropout;

    // The launch will pass ALiBi slopes or packed sequences: set by shape_params, whose
    // parameters lack those pointers, so that a plan made from them chooses the variant (and
    // the workspace) the launch takes (has_run_time_options).
    bool pointer_options;
};

}  // namespace fmha
