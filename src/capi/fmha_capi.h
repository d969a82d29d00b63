/* fmha's C ABI (libfmha.so): choose a catalogue kernel for a problem and launch it on the
 * caller's stream with the caller's workspace. Plain C, so that any language's foreign-function
 * interface (Python's ctypes, a C++ framework's extension) can call it.
 *
 * Every function returns an fmha_status; on failure fmha_last_error() says why (per thread).
 * Nothing here allocates device memory, synchronises, or prints.
 */
#ifndef FMHA_CAPI_H
#define FMHA_CAPI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped whenever a struct below or a signature changes; callers check it before anything. */
#define FMHA_ABI_VERSION 7

typedef enum fmha_status {
    FMHA_OK = 0,
    FMHA_INVALID_ARGUMENT = 1, /* a null or malformed argument: the message names it */
    FMHA_NO_KERNEL = 2,        /* valid, but this build has no kernel for it (message: the generator command) */
    FMHA_NO_DEVICE = 3,        /* no GPU, or the device is not an arch of this build */
    FMHA_RUNTIME_ERROR = 4     /* the GPU runtime refused (message: its error string) */
} fmha_status;

typedef enum fmha_dtype { FMHA_FP16 = 0, FMHA_BF16 = 1 } fmha_dtype;

/* Element strides of a [batch, heads, seq, head_dim] tensor whose last dimension is contiguous:
 * FlashAttention's [batch, seq, heads, head_dim] and the seed's [batch, heads, seq, head_dim]
 * differ only in these numbers. Kernels read 16 bytes at a time: multiples of 8 elements. */
typedef struct fmha_strides {
    int64_t batch, head, row;
} fmha_strides;

/* The sizes and options of one forward call: what chooses the kernel. */
typedef struct fmha_problem {
    int32_t dtype; /* fmha_dtype */
    int32_t batch, heads_q, heads_kv, seqlen_q, seqlen_kv, head_dim;
    /* masked != 0: FlashAttention's window_size, query i sees keys j in [diag - window_left,
     * diag + window_right], diag = i + len_kv - len_q (bottom-right aligned), -1 = unbounded on
     * that side; causal is (-1, 0). masked == 0 (a zeroed struct): no mask. A row that sees no
     * key yields zeros and an LSE of -inf. */
    int32_t masked;
    int32_t window_left, window_right;
    float scale;    /* softmax scale on Q.K^T; 0 = 1/sqrt(head_dim) */
    int32_t packed; /* packed variable-length tokens (FlashAttention's varlen): tensors.cu_seqlens_* place
                       the sequences; seqlen_q and seqlen_kv are then the longest sequence's */
    /* Serving options (v3), FlashAttention's rule: s = scale * q.k; s = softcap * tanh(s / softcap);
     * s -= alibi_slopes[h] * |i + len_kv - len_q - j|. */
    float softcap;             /* 0 = off; else finite and > 0 */
    int32_t alibi;             /* 1: tensors.alibi_slopes is fp32 [heads_q]; 2: [batch, heads_q] contiguous,
                                  a row per sequence; 0: off */
    int32_t page_size;         /* paged KV cache (tensors.block_table): keys per page, a power of two from 16
                                  to 256; 0 = K and V laid out by their strides */
    int32_t max_pages_per_seq; /* paged: the block table's width, at least seqlen_kv / page_size rounded up */
    /* v4: attention dropout's probability in [0, 1); 0 = off. Kept probabilities are scaled by
     * 1 / (1 - p); the LSE is that of the undropped ones. The backward takes the forward's p,
     * seed and offset and regenerates its mask. */
    float dropout_p;
    /* v5: packed: Q's token count where known (0: unknown). It sizes the backward's workspace,
     * which is otherwise planned for batch x seqlen_q tokens. */
    int32_t total_q;
    /* v6: the backward's dQ summed in a fixed order, so that equal inputs give bitwise-equal
     * gradients (FlashAttention's deterministic=True); 0: the faster order of arrival. */
    int32_t deterministic;
} fmha_problem;

/* Device pointers of one call. Q and O are [batch, heads_q, seqlen_q, head_dim] by their strides,
 * K and V [batch, heads_kv, seqlen_kv, head_dim]; 16-byte aligned. */
typedef struct fmha_tensors {
    const void* q;
    const void* k;
    const void* v;
    void* o;
    fmha_strides q_strides, k_strides, v_strides, o_strides;
    const int32_t* seqlens_q;  /* per-sequence lengths [batch] (<= the maxima), or NULL for full length */
    const int32_t* seqlens_kv; /* rows past a sequence's length are neither read nor written */
    float* lse;                /* NULL, or fp32 [batch, heads_q, seqlen_q] contiguous: natural-log LSE per row
                                  ([heads_q, total_q] where packed) */
    /* problem.packed: Q and O are [total_q, heads_q, head_dim], K and V [total_kv, heads_kv, head_dim]
     * (their strides' batch field is ignored); sequence b is rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1
     * (int32 [batch + 1], device memory), its length that span unless seqlens_* gives one. */
    const int32_t* cu_seqlens_q;
    const int32_t* cu_seqlens_kv;
    int32_t total_q, total_kv;
    /* v3: fp32 ALiBi slopes, [heads_q] or [batch, heads_q] (problem.alibi), else NULL. */
    const float* alibi_slopes;
    /* v3: int32 [batch, max_pages_per_seq] contiguous (problem.page_size), else NULL: key j of sequence b
     * is row j % page_size of page block_table[b][j / page_size]; K and V are then
     * [pages, page_size, heads_kv, head_dim], their strides' batch field the stride between pages.
     * Where Q is packed, K and V are not: their lengths are seqlens_kv (cu_seqlens_kv may be NULL). */
    const int32_t* block_table;
    /* v4: problem.dropout_p > 0: int64 [seed, offset] in device memory (8-byte aligned), the
     * Philox key and counter offset of the dropout mask (fmha_dropout_mask); else NULL. */
    const int64_t* dropout_seed_offset;
} fmha_tensors;

/* Device pointers of one backward call (fmha_backward): the forward's q, k, v, its output o and
 * LSE, the output's gradient d_o, and where dq (like q), dk and dv (like k and v, summed over
 * each KV head's group of query heads) go. 16-byte aligned, strides as fmha_tensors'. */
typedef struct fmha_bwd_tensors {
    const void* q;
    const void* k;
    const void* v;
    const void* o;
    const void* d_o;
    void* dq;
    void* dk;
    void* dv;
    fmha_strides q_strides, k_strides, v_strides, o_strides, d_o_strides, dq_strides, dk_strides, dv_strides;
    const int32_t* seqlens_q; /* as fmha_tensors' */
    const int32_t* seqlens_kv;
    const float* lse;   /* the forward's: fp32 [batch, heads_q, seqlen_q] contiguous, -inf where a row sees no key */
    const float* d_lse; /* NULL, or the LSE's gradient, like lse */
    const int64_t* dropout_seed_offset; /* v4: the forward's (problem.dropout_p > 0), else NULL */
    /* v5: problem.packed: as fmha_tensors' (all of q, o, d_o, dq and of k, v, dk, dv packed; lse
     * and d_lse [heads_q, total_q]) */
    const int32_t* cu_seqlens_q;
    const int32_t* cu_seqlens_kv;
    int32_t total_q, total_kv;
    /* v7: the forward's ALiBi slopes (problem.alibi), as fmha_tensors', else NULL. problem.softcap
     * is the forward's too; a paged KV cache has no backward. */
    const float* alibi_slopes;
} fmha_bwd_tensors;

/* A kernel chosen for a problem on a device, and the workspace bytes its launch needs. */
typedef struct fmha_plan {
    int32_t kernel; /* index in this build's table (fmha_kernel_name) */
    int32_t device;
    uint64_t workspace_bytes;
} fmha_plan;

int32_t fmha_abi_version(void);

/* Why the last failed call on this thread failed; "" when none has. Valid until the next call. */
const char* fmha_last_error(void);

/* "nvidia" or "amd". */
const char* fmha_build_platform(void);

/* The kernels of this build: their count, and each one's name (NULL out of range). */
int32_t fmha_kernel_count(void);
const char* fmha_kernel_name(int32_t kernel);

/* The catalogue arch of a device ("sm90", "gfx942"), asked of the runtime once per device. */
fmha_status fmha_device_arch(int32_t device, const char** arch);

/* The preferred kernel of this build for the problem on the device, its workspace size, and
 * (when reason is not NULL) why it was chosen. FMHA_NO_KERNEL: fmha_last_error() says what is
 * missing and the generator command that adds it. */
fmha_status fmha_plan_forward(const fmha_problem* problem, int32_t device, fmha_plan* plan, char* reason,
                              size_t reason_size);

/* Launches the plan's kernel on `stream` (a cudaStream_t / hipStream_t; NULL: the default
 * stream) of the plan's device; asynchronous. Checks that the kernel fits the problem, the
 * pointers and strides, and the workspace size. */
fmha_status fmha_forward(const fmha_plan* plan, const fmha_problem* problem, const fmha_tensors* tensors,
                         void* workspace, uint64_t workspace_bytes, void* stream);

/* The backward kernel of this build for the problem on the device (plan.kernel indexes the
 * backward kernels: fmha_bwd_kernel_name), its workspace size, and why. FMHA_NO_KERNEL when
 * none serves it: fmha_last_error() says why. */
fmha_status fmha_plan_backward(const fmha_problem* problem, int32_t device, fmha_plan* plan, char* reason,
                               size_t reason_size);

/* dq, dk, dv of a forward call by the plan's backward kernel on `stream`; asynchronous. The
 * workspace (plan.workspace_bytes) needs no initialisation. */
fmha_status fmha_backward(const fmha_plan* plan, const fmha_problem* problem, const fmha_bwd_tensors* tensors,
                          void* workspace, uint64_t workspace_bytes, void* stream);

/* The backward kernels of this build: their count, and each one's name (NULL out of range). */
int32_t fmha_bwd_kernel_count(void);
const char* fmha_bwd_kernel_name(int32_t kernel);

/* flash_attn_with_kvcache's append (added beside the forward's, so the ABI version stayed): new
 * keys and values written into a KV cache at each sequence's length, the keys and the queries
 * rotated as FlashAttention rotates them, in one launch. Sizes are elements; tensors
 * [batch, seq, heads, head_dim] by fmha_strides (16-byte aligned, strides multiples of 8). */
typedef struct fmha_kv_append {
    int32_t dtype;  /* fmha_dtype */
    int32_t device; /* the GPU the pointers are on; the launch goes to `stream` of it */
    int32_t batch, seqlen_new, heads_kv, head_dim;
    /* The cache holds `capacity` keys per sequence: k_cache, v_cache [cache_rows, capacity, heads_kv,
     * head_dim], sequence b in row cache_batch_idx[b] (NULL: b); or, with page_size > 0, pages
     * [cache_rows, page_size, heads_kv, head_dim] through block_table (int32 [batch,
     * max_pages_per_seq], FlashAttention's), capacity at most max_pages_per_seq * page_size.
     * Their strides' batch field steps between rows or pages. */
    int32_t capacity, cache_rows, page_size, max_pages_per_seq;
    int32_t seqlen_fixed; /* where cache_seqlens is NULL: every sequence's filled length */
    /* Rotary embedding (0: none): a multiple of 16, at most head_dim; cos and sin [seqlen_ro,
     * rotary_dim / 2] contiguous in the tensors' dtype, seqlen_ro >= capacity. New key j of
     * sequence b turns by angle row cache_seqlens[b] + j; query row i by row cache_seqlens[b] + i
     * where q_per_row (FlashAttention does so for causal or local attention), else cache_seqlens[b].
     * rotary_interleaved: pairs (2i, 2i + 1), else (i, i + rotary_dim / 2). */
    int32_t rotary_dim, rotary_interleaved, seqlen_ro;
    int32_t seqlen_q, heads_q, q_per_row; /* q's sizes (q given: rotated into q_out) */
    const void* k_new;
    const void* v_new;
    void* k_cache;
    void* v_cache;
    fmha_strides k_new_strides, v_new_strides, k_cache_strides, v_cache_strides;
    const int32_t* cache_seqlens; /* int32 [batch] in device memory, or NULL (seqlen_fixed) */
    const int32_t* cache_batch_idx;
    const int32_t* block_table;
    const void* rotary_cos;
    const void* rotary_sin;
    const void* q; /* NULL: no query to rotate */
    void* q_out;
    fmha_strides q_strides, q_out_strides;
    int32_t* seqlens_out; /* NULL, or int32 [batch]: cache_seqlens + seqlen_new clamped to [0, capacity] */
    /* int32 in device memory (required): the launch ORs in 1 where a sequence's tokens would pass
     * the capacity (or its length is negative), 2 where cache_batch_idx or a block_table entry
     * names no row or page of the cache; those tokens are not written. Never cleared here. */
    int32_t* error;
} fmha_kv_append;

/* The append of `args` on `stream` (NULL: the default stream) of args->device; asynchronous.
 * The sizes, pointers and strides are checked first (FMHA_INVALID_ARGUMENT names the field);
 * the lengths, indices and table entries in device memory are checked by the kernel (error). */
fmha_status fmha_append_kv(const fmha_kv_append* args, void* stream);

/* v4, for tests and debugging: the dropout mask that kernels with this dropout_p and
 * seed_offset (as in fmha_tensors) apply to a padded batch, uint8 [batch, heads_q, seqlen_q,
 * seqlen_kv] contiguous in device memory, 1 where (query row i, key j) is kept. Asynchronous on
 * `stream` of the current device. */
fmha_status fmha_dropout_mask(float dropout_p, const int64_t* seed_offset, int32_t batch, int32_t heads_q,
                              int32_t seqlen_q, int32_t seqlen_kv, uint8_t* mask, void* stream);

#ifdef __cplusplus
}
#endif

#endif /* FMHA_CAPI_H */
