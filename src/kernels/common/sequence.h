// Where a sequence of a batch lies: its length (fixed, per-sequence lengths, or the span of a
// packed batch's cu_seqlens) and its first row in a tensor (FwdParams states the layouts).
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "fmha/params.h"

namespace fmha {

// A sequence's length: lengths[batch] (variable lengths), else its span in a packed batch, else
// the maximum. The lengths never exceed the maximum, so min() changes no value; without it the
// AMD compiler can turn `lengths ? lengths[batch] : maximum` into one load through a pointer to
// the kernel argument, which it then copies to scratch memory.
__device__ inline int sequence_length(const int* lengths, const int* cu_seqlens, int64_t batch, int maximum) {
    if (lengths) return min(lengths[batch], maximum);
    return cu_seqlens ? min(cu_seqlens[batch + 1] - cu_seqlens[batch], maximum) : maximum;
}

// Where sequence `batch` starts in a tensor, in batch strides: `batch`, or, packed (whose batch
// stride is the row stride), cu_seqlens[batch].
__host__ __device__ inline int64_t sequence_index(const int* cu_seqlens, int64_t batch) {
    return cu_seqlens ? int64_t(cu_seqlens[batch]) : batch;
}

// Tiles over a packed batch, whose lengths only the device knows: sequence b takes the
// "virtual" tiles [P(b), P(b + 1)), P(b) = b + cu_seqlens[b] / rows (divide(n) = n / rows), at
// least the ceil(length / rows) it needs (at most one more), batch + total / rows in all (a
// divisor past the total: one each, PrefillTiling::of). The sequence of virtual tile `tile`: the
// last b with P(b) <= tile.
template <class Divide>
__host__ __device__ inline int packed_tile_sequence(const int* cu_seqlens, int batch, int64_t tile, Divide divide) {
    int lo = 0, hi = batch;  // P(lo) <= tile < P(hi)
    while (hi - lo > 1) {
        const int middle = (lo + hi) / 2;
        if (middle + divide(cu_seqlens[middle]) <= tile) lo = middle;
        else hi = middle;
    }
    return lo;
}

// A kernel variant's view of a packed batch's cu_seqlens: variants compiled without packed
// batches (kMayBePacked false: the plain ones, has_run_time_options) see none, so that their
// code is that of padded batches.
template <bool kMayBePacked>
__device__ inline const int* packed_only(const int* cu_seqlens) {
    return kMayBePacked ? cu_seqlens : nullptr;
}

}  // namespace fmha
