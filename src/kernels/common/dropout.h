// Attention dropout as the forward and backward kernels apply it (docs/decisions.md, "Dropout").
//
// A counter-based generator, Philox4x32-10 (Salmon et al., SC'11), keyed by the call's 64-bit
// seed: the random of element (batch b, query head h, query row i, key column j) is a pure
// function of those and the call's 64-bit offset, so the backward regenerates the forward's
// mask whatever either kernel's tiles are. One Philox call gives four 32-bit randoms, those of
// row i's columns 16 m + 8 c + 2 t + e (c, e in {0, 1}) for one t in 0..3: the four a thread
// holds of a 16-key block in wgmma's and mma.sync's accumulator layouts (columns 2 t, 2 t + 1
// of each 8). A key is kept where its random is at least p 2^32; kept probabilities are scaled
// by 1 / (1 - p); the softmax's sum and LSE stay those of the undropped probabilities
// (FlashAttention's convention).
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "fmha/params.h"

namespace fmha {

struct PhiloxWords {
    uint32_t w[4];
};

// Philox4x32 with 10 rounds (Random123's philox4x32_10): counter (c0..c3), key (k0, k1).
__host__ __device__ inline PhiloxWords philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                                     uint32_t k1) {
#if defined(__HIP_DEVICE_COMPILE__) || defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int round = 0; round < 10; ++round) {
        if (round > 0) k0 += 0x9E3779B9u, k1 += 0xBB67AE85u;
        const uint64_t p0 = uint64_t(0xD2511F53u) * c0, p1 = uint64_t(0xCD9E8D57u) * c2;
        const uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0, n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
        c1 = uint32_t(p1), c3 = uint32_t(p0), c0 = n0, c2 = n2;
    }
    return {{c0, c1, c2, c3}};
}

// Which call holds column j of a row (its first counter word) and which of its four words.
__host__ __device__ inline uint32_t dropout_column_counter(int j) { return uint32_t(j >> 4) * 4u + uint32_t((j >> 1) & 3); }
__host__ __device__ inline int dropout_word(int j) { return ((j >> 3) & 1) * 2 + (j & 1); }

// The launch's dropout as a kernel thread holds it: the key, the offset, the keep threshold.
// A row's randoms come from row(stream, i): stream = batch * heads_q + query head.
struct Dropout {
    uint32_t k0, k1;
    uint64_t offset;
    uint32_t threshold;  // keep where random >= threshold
    float keep_scale;    // 1 / (1 - p)

    // The counter words of one row besides its column's.
    struct Row {
        uint32_t i, stream_lo, stream_hi;
    };

    __host__ __device__ static Dropout of(float p, uint64_t seed, uint64_t offset) {
        // p < 1 (a float), so p 2^32 < 2^32 exactly in double.
        return {uint32_t(seed), uint32_t(seed >> 32), offset, uint32_t(double(p) * 4294967296.0), 1.f / (1.f - p)};
    }
    // From the launch's parameters: the seed and offset are read from device memory (where
    // PyTorch's generator put them, so that CUDA graphs replay fresh ones).
    __device__ static Dropout of(const DropoutParams& d) {
        return of(d.p, uint64_t(d.seed_offset[0]), uint64_t(d.seed_offset[1]));
    }
    __host__ __device__ Row row(int64_t stream, int i) const {
        const uint64_t counter = offset + uint64_t(stream);
        return {uint32_t(i), uint32_t(counter), uint32_t(counter >> 32)};
    }
    // The four randoms of the call that holds column j (any of its columns) of the row.
    __host__ __device__ PhiloxWords randoms(const Row& r, int j) const {
        return philox4x32_10(dropout_column_counter(j), r.i, r.stream_lo, r.stream_hi, k0, k1);
    }
    __host__ __device__ bool keeps(uint32_t random) const { return random >= threshold; }
    // Whether element (row, j) is kept: one call for one element (where no tile layout helps).
    __host__ __device__ bool keeps(const Row& r, int j) const {
        const PhiloxWords words = randoms(r, j);
        const int w = dropout_word(j);
        return keeps(w == 0 ? words.w[0] : w == 1 ? words.w[1] : w == 2 ? words.w[2] : words.w[3]);
    }
};

}  // namespace fmha
