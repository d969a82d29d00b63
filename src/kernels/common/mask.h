// The mask rule, in one place for every kernel family: which keys a query row sees.
//
// A sequence has len_q query positions and len_kv keys. Query position i has its diagonal at
// key i + len_kv - len_q (bottom-right aligned, as FlashAttention 2.1+). Without a mask a row
// sees keys [0, len_kv); a masked row sees the keys of its window around the diagonal,
// [diagonal - left, diagonal + right] (FwdParams::window), clipped to [0, len_kv): causal,
// sliding windows and FlashAttention's two-sided local windows alike. A row may see no key
// (causal with len_q > len_kv, a window past the keys): it yields zeros and an LSE of -inf.
// The reference (src/reference/) keeps its own arithmetic so that it stays an independent check;
// host code (visible_keys, for fmha.exe's FLOP and byte counts) uses this one.
//
// The decode family's tensor-core loop is sensitive to how nvcc inlines these (its SASS changes
// with an extra call level, docs/decisions.md): MaskRow::sees and VisibleKeys::add keep the
// arithmetic in their own bodies.
#pragma once

#include <hip/hip_runtime.h>

#include <algorithm>
#include <cstdint>

#include "fmha/params.h"

namespace fmha {

#if !defined(__CUDACC__) && !defined(__HIP__)
// A plain host compiler (g++ on the NVIDIA build's .cpp files) has no global min and max for
// int as CUDA and HIP do.
using std::max;
using std::min;
#endif

// A query row as the mask sees it: its diagonal, and whether the row exists (rows past a
// sequence's length, or past a work item's rows, see nothing).
struct MaskRow {
    int diagonal;
    bool valid;

    // Whether the row sees `key`, for keys below len_kv. One unsigned compare for both sides,
    // key - (diagonal - left) in [0, span], against launch constants: no register held for it.
    template <bool kMasked>
    __host__ __device__ bool sees(int key, KeyWindow window) const {
        return valid && (!kMasked || unsigned(key - diagonal + window.left) <= unsigned(window.span));
    }
};

// The keys that some row of a set sees.
template <bool kMasked>
struct VisibleKeys {
    int lo = INT32_MAX, hi = INT32_MIN;

    __host__ __device__ void add(const MaskRow& row, int len_kv, KeyWindow window) {
        if (!row.valid) return;
        lo = min(lo, kMasked ? row.diagonal - window.left : 0);
        hi = max(hi, kMasked ? row.diagonal + window.right + 1 : len_kv);
    }
    // The keys some added row sees, [kv_lo, kv_hi); empty (0, 0) where none does.
    __host__ __device__ void key_range(int len_kv, int& kv_lo, int& kv_hi) const {
        kv_lo = max(0, lo);
        kv_hi = min(len_kv, hi);
        if (kv_lo >= kv_hi) kv_lo = kv_hi = 0;
    }
};

// The mask of one sequence, by query position.
template <bool kMasked>
struct KeyMask {
    int len_kv;        // this sequence's keys
    int offset;        // len_kv - len_q: the diagonal of position 0
    KeyWindow window;  // masked rows see these keys around their diagonal

    __host__ __device__ static KeyMask of(int len_q, int len_kv, KeyWindow window) { return {len_kv, len_kv - len_q, window}; }

    __host__ __device__ int diagonal(int position) const { return position + offset; }
    __host__ __device__ MaskRow row(int position) const { return {diagonal(position), true}; }
    __host__ __device__ bool sees(int position, int key) const { return key < len_kv && row(position).template sees<kMasked>(key, window); }
    // Whether every row of positions [first, first + rows) sees every key of [key0, key0 + keys):
    // the keys lie below len_kv and, masked, between the last row's window start and the first
    // row's window end.
    __host__ __device__ bool sees_all(int first, int rows, int key0, int keys) const {
        if (key0 + keys > len_kv) return false;
        if constexpr (!kMasked) return true;
        return int64_t(first) + rows - 1 + offset - window.left <= key0 &&
               int64_t(key0) + keys - 1 <= int64_t(first) + offset + window.right;
    }
    // The keys that some row of positions [first, last] sees, [kv_lo, kv_hi) (the rows'
    // ranges move with their diagonals, so the first and last rows bound them).
    __host__ __device__ void key_range(int first, int last, int& kv_lo, int& kv_hi) const {
        VisibleKeys<kMasked> keys;
        keys.add(row(first), len_kv, window);
        keys.add(row(last), len_kv, window);
        keys.key_range(len_kv, kv_lo, kv_hi);
    }
};

}  // namespace fmha
