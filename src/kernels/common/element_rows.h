// Rows that are not 16-byte vectors (fmha::element_rows: a head_dim that is not a multiple of
// 8, such as 59 or 111), read and written element by element: N consecutive head-dim columns
// of a row, those past head_dim zeros on the way in and left alone on the way out. A launch
// with vector rows moves the same N columns as one load or store instead.
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

namespace fmha {

// Rows of a head_dim that is not a multiple of 8 are not 16-byte vectors, whatever the strides:
// a launch with one reads and writes its rows element by element.
__host__ __device__ constexpr bool element_rows(int head_dim) { return head_dim % 8 != 0; }

// N 16-bit elements as N / 2 words, element 2w in word w's low half (a vector's layout).
template <int N>
struct ElementWords {
    static_assert(N % 2 == 0, "whole words");
    uint32_t w[N / 2];
};

// N elements from `first` on, of which the first `valid` exist (the rest, past the row's
// head_dim, read as zeros).
template <int N>
__device__ inline ElementWords<N> load_elements(const uint16_t* first, int valid) {
    ElementWords<N> out;
#pragma unroll
    for (int e = 0; e < N; e += 2) {
        const uint32_t low = e < valid ? first[e] : 0u;
        const uint32_t high = e + 1 < valid ? first[e + 1] : 0u;
        out.w[e / 2] = low | high << 16;
    }
    return out;
}

template <int N>
__device__ inline void store_elements(uint16_t* first, int valid, const ElementWords<N>& in) {
#pragma unroll
    for (int e = 0; e < N; ++e)
        if (e < valid) first[e] = uint16_t(in.w[e / 2] >> (16 * (e % 2)));
}

// 16 bytes (8 columns) as a vector, for the loops that move rows in 16-byte chunks.
__device__ inline uint4 load_chunk_elements(const uint16_t* first, int valid) {
    const ElementWords<8> e = load_elements<8>(first, valid);
    return make_uint4(e.w[0], e.w[1], e.w[2], e.w[3]);
}
__device__ inline void store_chunk_elements(uint16_t* first, int valid, const uint4& chunk) {
    store_elements<8>(first, valid, ElementWords<8>{{chunk.x, chunk.y, chunk.z, chunk.w}});
}

}  // namespace fmha
