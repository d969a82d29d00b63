// The mask rule, in one place for every kernel family: which keys a query row sees.
//
// A sequence has len_q query positions and len_kv keys. Query position i has its diagonal at
// key i + len_kv - len_q (bottom-right aligned, as FlashAttention 2.1+). Without a mask a row
// sees keys [0, len_kv); a causal row sees the `window` keys that end at its diagonal,
// (diagonal - window, diagonal], clipped to [0, len_kv). window >= len_kv is plain causal.
// The reference (src/reference/) keeps its own arithmetic so that it stays an independent check.
#pragma once

#include <hip/hip_runtime.h>

namespace fmha {

template <bool kCausal>
struct KeyMask {
    int len_kv;  // this sequence's keys
    int offset;  // len_kv - len_q: the diagonal of position 0
    int window;  // causal rows see this many keys, ending at the diagonal

    __device__ static KeyMask of(int len_q, int len_kv, int window) { return {len_kv, len_kv - len_q, window}; }

    __device__ int diagonal(int position) const { return position + offset; }
    // The keys a row sees are [first_key, end_key); empty where first_key >= end_key.
    __device__ int first_key(int position) const { return kCausal ? max(0, diagonal(position) - window + 1) : 0; }
    __device__ int end_key(int position) const { return kCausal ? min(len_kv, diagonal(position) + 1) : len_kv; }
    __device__ bool sees(int position, int key) const {
        return key < len_kv && (!kCausal || (key <= diagonal(position) && key > diagonal(position) - window));
    }
};

}  // namespace fmha
