// Writing new keys and values into a KV cache, with FlashAttention's rotary embedding of the new
// keys and of the queries: what flash_attn_with_kvcache does before its attention, in one launch
// (src/kernels/kv_append.h; docs/decisions.md, "Fused append and rotary"). Shared by host code
// and the kernel.
#pragma once

#include <hip/hip_runtime_api.h>

#include <cstdint>

#include "fmha/params.h"
#include "fmha_catalogue.h"

namespace fmha {

// Bits of KvAppendParams::error, ORed in by the kernel; nothing of the token is written.
enum KvAppendError : int {
    kAppendOverflow = 1,  // cache_seqlens[b] < 0 or cache_seqlens[b] + seqlen_new > capacity
    kAppendBadIndex = 2,  // cache_batch_idx[b] or a block_table entry outside the cache
};

struct KvAppendParams {
    // New keys and values [batch, seqlen_new, heads_kv, head_dim] by their strides.
    const void* k_new;
    const void* v_new;
    TensorStrides k_new_strides, v_new_strides;
    // The cache: rows [cache_rows, capacity, heads_kv, head_dim], sequence b in row
    // cache_batch_idx[b] (else b); or pages [cache_rows, page_size, heads_kv, head_dim] through
    // block_table (int32 [batch, max_pages_per_seq]), as FwdParams reads them. strides.batch
    // steps between rows or pages.
    void* k_cache;
    void* v_cache;
    TensorStrides k_cache_strides, v_cache_strides;
    int batch, seqlen_new, heads_kv, head_dim;
    int capacity;    // keys a sequence holds: the rows' length, or max_pages_per_seq * page_size
    int cache_rows;  // what cache_batch_idx and block_table entries index
    const int* cache_batch_idx;
    const int* block_table;
    int page_size;  // 0: not paged; any positive size otherwise
    int max_pages_per_seq;
    // Where sequence b's new tokens go: cache_seqlens[b] (int32 [batch]), else seqlen_fixed.
    const int* cache_seqlens;
    int seqlen_fixed;

    // Rotary embedding (rotary_dim 0: none): cos, sin [seqlen_ro, rotary_dim / 2] contiguous, in
    // the tensors' dtype. The first rotary_dim features of a row at position t turn by angle t
    // of pair i: (2i, 2i + 1) where interleaved, else (i, i + rotary_dim / 2) (GPT-NeoX).
    int rotary_dim;
    int interleaved;
    int seqlen_ro;
    const void* rotary_cos;
    const void* rotary_sin;
    // New key j of sequence b is at position cache_seqlens[b] + j. Q [batch, seqlen_q, heads_q,
    // head_dim] (nullptr: not rotated) goes to q_out rotated, row i at cache_seqlens[b] + i where
    // q_per_row (FlashAttention: causal or local attention), else all at cache_seqlens[b].
    const void* q;
    void* q_out;
    TensorStrides q_strides, q_out_strides;
    int seqlen_q, heads_q;
    int q_per_row;

    // nullptr, or int32 [batch]: cache_seqlens[b] + seqlen_new clamped to [0, capacity], the
    // attention's key counts (never past the cache, even where the append was refused).
    int* seqlens_out;
    int* error;  // int32 in device memory: KvAppendError bits ORed in; never cleared here
};

// Blocks of one launch: one per new token of a sequence, then one per query row to rotate.
inline int64_t kv_append_blocks(const KvAppendParams& p) {
    return int64_t(p.batch) * p.seqlen_new + (p.rotary_dim > 0 && p.q ? int64_t(p.batch) * p.seqlen_q : 0);
}

// Launches the append on `stream`; asynchronous. The caller has checked the arguments (the C ABI's
// fmha_append_kv does).
hipError_t launch_kv_append(const KvAppendParams& params, DType dtype, hipStream_t stream);

}  // namespace fmha
