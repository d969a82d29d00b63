// The KV-cache append (fmha/kv_append.h): one block per new token writes its keys (rotated) and
// values into the cache for every KV head; one block per query row rotates it. A thread moves
// 16-byte vectors of 8 elements; rotation in fp32, rounded once to the tensors' dtype.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/kv_append.h"
#include "kernels/numeric.h"

namespace fmha {

constexpr int kAppendThreads = 128;

__device__ inline uint4 load16(const uint16_t* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ inline void store16(uint16_t* p, const uint4& w) { *reinterpret_cast<uint4*>(p) = w; }

// Elements [c, c + 8) of a row at position `pos` into dst: rotated where c < rotary_dim, else
// copied. GPT-NeoX pairs (i, i + rotary_dim / 2) lie in two vectors: the vector of the first
// half writes both (the caller skips those of the second half).
template <class Numeric>
__device__ inline void rotate_vector(const KvAppendParams& p, const uint16_t* src, uint16_t* dst, int c, int pos) {
    if (c >= p.rotary_dim) {
        store16(dst + c, load16(src + c));
        return;
    }
    const int half = p.rotary_dim / 2;
    const uint16_t* cos = static_cast<const uint16_t*>(p.rotary_cos) + int64_t(pos) * half;
    const uint16_t* sin = static_cast<const uint16_t*>(p.rotary_sin) + int64_t(pos) * half;
    float x[8], out[8];
    unpack8<Numeric>(src + c, x);
    if (p.interleaved) {  // pairs (c + 2i, c + 2i + 1), angles c / 2 + i: 8 bytes of cos and sin
        const uint2 cw = *reinterpret_cast<const uint2*>(cos + c / 2);
        const uint2 sw = *reinterpret_cast<const uint2*>(sin + c / 2);
        const float2 cf[2] = {Numeric::unpack2(cw.x), Numeric::unpack2(cw.y)};
        const float2 sf[2] = {Numeric::unpack2(sw.x), Numeric::unpack2(sw.y)};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float co = i & 1 ? cf[i / 2].y : cf[i / 2].x;
            const float si = i & 1 ? sf[i / 2].y : sf[i / 2].x;
            out[2 * i] = x[2 * i] * co - x[2 * i + 1] * si;
            out[2 * i + 1] = x[2 * i] * si + x[2 * i + 1] * co;
        }
        store16(dst + c, pack8<Numeric>(out, 1.f));
        return;
    }
    float y[8], cf[8], sf[8], hi[8];
    unpack8<Numeric>(src + c + half, y);
    unpack8<Numeric>(cos + c, cf);
    unpack8<Numeric>(sin + c, sf);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        out[i] = x[i] * cf[i] - y[i] * sf[i];
        hi[i] = x[i] * sf[i] + y[i] * cf[i];
    }
    store16(dst + c, pack8<Numeric>(out, 1.f));
    store16(dst + c + half, pack8<Numeric>(hi, 1.f));
}

// Every head's row of one token: src and dst at head 0, heads `head_stride` apart (elements).
template <class Numeric>
__device__ inline void rotate_row(const KvAppendParams& p, const uint16_t* src, int64_t src_head, uint16_t* dst,
                                  int64_t dst_head, int heads, int pos) {
    const int vectors = p.head_dim / 8;
    const bool neox = p.rotary_dim > 0 && !p.interleaved;
    for (int u = threadIdx.x; u < heads * vectors; u += blockDim.x) {
        const int h = u / vectors, c = u % vectors * 8;
        if (neox && c >= p.rotary_dim / 2 && c < p.rotary_dim) continue;  // its first-half partner writes it
        rotate_vector<Numeric>(p, src + h * src_head, dst + h * dst_head, c, pos);
    }
}

__device__ inline int filled_length(const KvAppendParams& p, int b) {
    return p.cache_seqlens ? p.cache_seqlens[b] : p.seqlen_fixed;
}

// New token j of sequence b: its keys and values for every KV head, or nothing and an error bit.
template <class Numeric>
__device__ inline void append_token(const KvAppendParams& p, int b, int j) {
    const int start = filled_length(p, b);
    if (j == 0 && threadIdx.x == 0 && p.seqlens_out)
        p.seqlens_out[b] = int(min(max(int64_t(start) + p.seqlen_new, int64_t(0)), int64_t(p.capacity)));
    // The whole sequence or none of it: every token's block makes the same test.
    int error = start >= 0 && start <= p.capacity - p.seqlen_new ? 0 : kAppendOverflow;
    const int pos = start + j;
    int64_t k_row = 0, v_row = 0;
    if (!error) {
        int row = b, slot = pos;
        if (p.page_size) {
            row = p.block_table[int64_t(b) * p.max_pages_per_seq + pos / p.page_size];
            slot = pos % p.page_size;
        } else if (p.cache_batch_idx) {
            row = p.cache_batch_idx[b];
        }
        if (row < 0 || row >= p.cache_rows) error = kAppendBadIndex;
        k_row = row * p.k_cache_strides.batch + slot * p.k_cache_strides.row;
        v_row = row * p.v_cache_strides.batch + slot * p.v_cache_strides.row;
    }
    if (error) {
        if (threadIdx.x == 0) atomicOr(p.error, error);
        return;
    }
    const uint16_t* k_src = static_cast<const uint16_t*>(p.k_new) + b * p.k_new_strides.batch + j * p.k_new_strides.row;
    const uint16_t* v_src = static_cast<const uint16_t*>(p.v_new) + b * p.v_new_strides.batch + j * p.v_new_strides.row;
    uint16_t* k_dst = static_cast<uint16_t*>(p.k_cache) + k_row;
    uint16_t* v_dst = static_cast<uint16_t*>(p.v_cache) + v_row;
    const int vectors = p.head_dim / 8;
    for (int u = threadIdx.x; u < p.heads_kv * vectors; u += blockDim.x) {
        const int h = u / vectors, c = u % vectors * 8;
        store16(v_dst + h * p.v_cache_strides.head + c, load16(v_src + h * p.v_new_strides.head + c));
    }
    rotate_row<Numeric>(p, k_src, p.k_new_strides.head, k_dst, p.k_cache_strides.head, p.heads_kv, pos);
}

// Query row i of sequence b, rotated at its position (clamped to the table: a sequence whose
// append was refused still gets defined values).
template <class Numeric>
__device__ inline void rotate_query(const KvAppendParams& p, int b, int i) {
    const int pos = min(max(filled_length(p, b) + (p.q_per_row ? i : 0), 0), p.seqlen_ro - 1);
    const uint16_t* src = static_cast<const uint16_t*>(p.q) + b * p.q_strides.batch + i * p.q_strides.row;
    uint16_t* dst = static_cast<uint16_t*>(p.q_out) + b * p.q_out_strides.batch + i * p.q_out_strides.row;
    rotate_row<Numeric>(p, src, p.q_strides.head, dst, p.q_out_strides.head, p.heads_q, pos);
}

template <DType kDType>
__global__ void __launch_bounds__(kAppendThreads) kv_append_kernel(const KvAppendParams p) {
    using Numeric = DTypeTraits<kDType>;
    const int64_t tokens = int64_t(p.batch) * p.seqlen_new;
    const int64_t block = blockIdx.x;
    if (block < tokens)
        append_token<Numeric>(p, int(block / p.seqlen_new), int(block % p.seqlen_new));
    else
        rotate_query<Numeric>(p, int((block - tokens) / p.seqlen_q), int((block - tokens) % p.seqlen_q));
}

}  // namespace fmha
