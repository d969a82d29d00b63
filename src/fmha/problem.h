// One attention problem as a user states it: sizes, types, mask, layout. Validation, the
// layout's strides, and the honest FLOP and byte counts live here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fmha/attention_mask.h"
#include "fmha/bwd_params.h"
#include "fmha/kernel_key.h"
#include "fmha/params.h"

namespace fmha {

enum class Layout {
    bhsd,        // Q [b, h, s, d], K/V [b, h_kv, s_kv, d]: the seed's layout (default)
    bshd,        // token-major: Q [b, s, h, d], K/V [b, s_kv, h_kv, d]
    qkv_packed,  // FMHA_v2's packed QKV [b, s, 3, h, d]; O [b, s, h, d]
    packed,      // packed variable-length tokens (FlashAttention's varlen): Q [total_q, h, d],
                 // K/V [total_kv, h_kv, d], sequence b at rows cu_seqlens[b] (FwdParams)
};
const char* layout_token(Layout layout);
bool parse_layout(const std::string& text, Layout* layout);

struct Problem {
    DType dtype = DType::fp16;
    int batch = 1;
    int heads_q = 1;
    int heads_kv = 1;
    int seqlen_q = 1;
    int seqlen_kv = 1;
    int head_dim = 64;
    AttentionMask mask;   // none by default
    float scale = 0.f;    // 0 = 1/sqrt(head_dim)
    Layout layout = Layout::bhsd;
    // Serving options (FwdParams states their rule): logit softcapping with this cap (0 = off),
    // ALiBi with alibi_slopes(heads_q), and a paged KV cache with pages of page_size keys
    // (0 = contiguous K/V; paged K/V ignore `layout`, which then places Q and O only).
    float softcap = 0.f;
    bool alibi = false;
    int page_size = 0;
    // Attention dropout's probability (0 = off; the seed and offset are the launch's).
    float dropout = 0.f;
    // The backward's dQ summed in a fixed order: bitwise-reproducible (BwdParams::deterministic).
    bool deterministic = false;
    // The packed layout's token counts (sums of the sequences' lengths; set once they are drawn).
    int64_t total_q = 0, total_kv = 0;

    HeadsKind heads_kind() const;
    bool paged() const { return page_size > 0; }
    float softmax_scale() const;

    // Human-readable reasons the problem is not valid; empty when it is.
    std::vector<std::string> validate() const;
    std::string describe() const;
};

// Element counts of the buffers a layout needs (packed QKV: one buffer holds Q, K and V).
struct BufferSizes {
    int64_t q, k, v, o;   // 0 for K and V with packed QKV
};
BufferSizes buffer_sizes(const Problem& p);

// Strides of Q, K, V, O in their buffers, and the element offsets of K and V in the packed one.
struct LayoutStrides {
    TensorStrides q, k, v, o;
    int64_t k_offset = 0, v_offset = 0;  // packed QKV only
};
LayoutStrides layout_strides(const Problem& p);

// The kernel parameters of a problem: sizes, strides, scale, window, softcap and page size;
// every pointer null (the ALiBi slopes and the block table too).
FwdParams shape_params(const Problem& p);
// The backward's: sizes, scale and window; every pointer null, strides zero.
BwdParams backward_shape_params(const Problem& p);

// ALiBi's standard slopes for `heads` heads, the geometric sequence of the ALiBi paper (and
// BLOOM's): 2^(-8 h / n) for h = 1..n with n = heads a power of two; otherwise those of the
// largest power of two below, then every other slope of twice that many.
std::vector<float> alibi_slopes(int heads);

// A paged problem's cache: the block table's width and the pages of the pool, one more than the
// sequences need: a spare page that no sequence's keys use (the tests fill it with NaN and
// point the table's unused slots at it).
struct PagedKvShape {
    int max_pages_per_seq;
    int64_t pages;
};
PagedKvShape paged_kv_shape(const Problem& p);

// Per-batch sequence lengths (-min-s); empty vectors mean every sequence is full length.
struct SeqLens {
    std::vector<int> q, kv;
};

// Keys that some query row of [first_row, last_row] of a (len_q, len_kv) sequence sees, by the
// kernels' mask rule (kernels/common/mask.h): [first, last] (empty if last < first).
struct KeyRange {
    int64_t first, last;
};
KeyRange visible_keys(const Problem& p, int first_row, int last_row, int len_q, int len_kv);

// FLOPs of the unmasked work only (2 * d for Q.K^T plus 2 * d for P.V per visible key).
double flop_count(const Problem& p, const SeqLens& lens);
// Bytes that must move: Q and O once per query head, K and V once per KV head, each only
// over the rows that some query sees.
double byte_count(const Problem& p, const SeqLens& lens);

}  // namespace fmha
