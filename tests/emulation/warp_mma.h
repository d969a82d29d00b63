// NVIDIA's warp-wide instructions on the host, for the kernels that use them (kernels/mma/mma_sync.h
// calls these where FMHA_EMULATED_MMA_SYNC is defined): mma.sync, ldmatrix and movmatrix computed
// from the PTX ISA's documented layouts (mma_sync.h states them), and __syncwarp, by the 32 lanes of
// a warp, each a thread. A test sets emulated_warps before its kernels run.
#pragma once
#define FMHA_EMULATED_MMA_SYNC 1
#include "hip/hip_runtime.h"

#include <barrier>
#include <cstdint>

#include "fmha_catalogue.h"

namespace fmha {

// A block's warps: a barrier each, and exchange slots: each lane publishes, the warp meets, each
// reads what it needs, the warp meets.
struct EmulatedWarps {
    static constexpr int kWarps = 8;
    std::barrier<>* warp[kWarps];
    uint32_t a[kWarps][32][4], b[kWarps][32][2];
    const uint16_t* rows[kWarps][32];
};
inline EmulatedWarps* emulated_warps;

inline int warp_of() { return threadIdx.x / 32; }

inline void emulated_sync_warp() { emulated_warps->warp[warp_of()]->arrive_and_wait(); }

template <bool kTransposed>
inline void emulated_load_matrices_x4(uint32_t (&r)[4], const void* row) {
    const int w = warp_of(), lane = threadIdx.x % 32;
    emulated_warps->rows[w][lane] = static_cast<const uint16_t*>(row);
    emulated_warps->warp[w]->arrive_and_wait();
    for (int j = 0; j < 4; ++j) {
        const uint16_t* const* m = emulated_warps->rows[w] + 8 * j;  // matrix j's 8 rows
        const int r8 = lane / 4, c2 = 2 * (lane % 4);
        const uint16_t lo = kTransposed ? m[c2][r8] : m[r8][c2], hi = kTransposed ? m[c2 + 1][r8] : m[r8][c2 + 1];
        r[j] = uint32_t(lo) | uint32_t(hi) << 16;
    }
    emulated_warps->warp[w]->arrive_and_wait();
}

// stmatrix .x4: lane l writes row l % 8 of matrix l / 8 (its address) from the four lanes that
// hold that row's column pairs in register l / 8.
inline void emulated_store_matrices_x4(const uint32_t (&r)[4], void* row) {
    const int w = warp_of(), lane = threadIdx.x % 32;
    for (int j = 0; j < 4; ++j) emulated_warps->a[w][lane][j] = r[j];
    emulated_warps->warp[w]->arrive_and_wait();
    auto* out = static_cast<uint32_t*>(row);
    for (int t = 0; t < 4; ++t) out[t] = emulated_warps->a[w][4 * (lane % 8) + t][lane / 8];
    emulated_warps->warp[w]->arrive_and_wait();
}

// movmatrix .trans: lane 4 r + t receives column r, rows 2t and 2t + 1, of the matrix whose row
// r, columns 2t and 2t + 1, lane 4 r + t held.
inline uint32_t emulated_transpose_8x8(uint32_t x) {
    const int w = warp_of(), lane = threadIdx.x % 32, r = lane / 4, t = lane % 4;
    emulated_warps->b[w][lane][0] = x;
    emulated_warps->warp[w]->arrive_and_wait();
    auto element = [&](int row, int column) { return uint16_t(emulated_warps->b[w][4 * row + column / 2][0] >> (16 * (column % 2))); };
    const uint32_t y = uint32_t(element(2 * t, r)) | uint32_t(element(2 * t + 1, r)) << 16;
    emulated_warps->warp[w]->arrive_and_wait();
    return y;
}

template <DType kDType>
inline float emulated_widen(uint32_t word, int half) {
    const uint16_t bits = uint16_t(word >> (16 * half));
    return kDType == DType::fp16 ? float(__builtin_bit_cast(_Float16, bits)) : __builtin_bit_cast(float, uint32_t(bits) << 16);
}

// A[i][k]: lane 4 (i % 8) + (k % 8) / 2, register i / 8 + 2 (k / 8), half k % 2;
// B[k][n]: lane 4 n + (k % 8) / 2, register k / 8, half k % 2 (mma_sync.h's table).
template <DType kDType>
inline void emulated_mma_16x8x16(float (&acc)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    const int w = warp_of(), lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    for (int x = 0; x < 4; ++x) emulated_warps->a[w][lane][x] = a[x];
    emulated_warps->b[w][lane][0] = b[0], emulated_warps->b[w][lane][1] = b[1];
    emulated_warps->warp[w]->arrive_and_wait();
    for (int c = 0; c < 4; ++c) {
        const int i = g + 8 * (c / 2), n = 2 * t + c % 2;
        float sum = 0.f;
        for (int k = 0; k < 16; ++k) {
            const float av = emulated_widen<kDType>(emulated_warps->a[w][4 * (i % 8) + (k % 8) / 2][i / 8 + 2 * (k / 8)], k % 2);
            const float bv = emulated_widen<kDType>(emulated_warps->b[w][4 * n + (k % 8) / 2][k / 8], k % 2);
            sum += av * bv;
        }
        acc[c] += sum;
    }
    emulated_warps->warp[w]->arrive_and_wait();
}

}  // namespace fmha
