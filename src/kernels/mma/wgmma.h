// Hopper's warpgroup MMA (wgmma, sm_90a): fragment layouts and shared-memory operands.
//
// A warpgroup is 4 consecutive warps (128 threads) that issue each wgmma together; warp w of
// the group owns rows 16w .. 16w + 15 of the 64-row tile. With lane = 4g + t:
//   accumulator D (64 x N, fp32), element e of a thread (e < N / 2):
//       row 16w + g + 8 * ((e / 2) % 2),  column 8 * (e / 4) + 2t + e % 2
//   A from registers (64 x 16, packed 16-bit pairs, 4 registers):
//       a0 = row g, columns 2t, 2t+1;  a1 = row g+8, same;  a2 = row g, columns 2t+8, 2t+9;  a3 = row g+8, same
// so the accumulators of columns 16k .. 16k+15, packed in pairs, are the A operand of step k of
// a following MMA (scores become probabilities without moving between threads).
//
// Shared-memory operands are rows of 64 16-bit elements (128 bytes) in "swizzle atoms": 8 rows
// of 128 bytes whose 16-byte chunks are permuted, chunk c of row r stored at chunk c ^ (r % 8),
// the layout TMA writes with 128-byte swizzling. A tile of R rows and D columns is D / 64 atom
// columns (rounded up), each R x 128 bytes, 1024-byte aligned. See docs/mmaprefill.md.
#pragma once

#include <cstdint>

#include "fmha_catalogue.h"
#include "platform/hip_on_cuda/hopper.h"

namespace fmha {
namespace wgmma {

inline constexpr int kRows = 64;          // rows of one warpgroup's MMA tile
inline constexpr int kThreads = 128;      // threads of a warpgroup
inline constexpr int kK = 16;             // K of one 16-bit wgmma
inline constexpr int kAtomColumns = 64;   // 16-bit elements in a 128-byte swizzled row
inline constexpr int kRowBytes = 128;

// Bytes of an R-row tile of D columns in swizzle atoms.
__host__ __device__ constexpr int tile_bytes(int rows, int columns) { return (columns + kAtomColumns - 1) / kAtomColumns * rows * kRowBytes; }

// Row and column of accumulator element e (see the header comment).
struct Position {
    int row, column;
};
__device__ inline Position accumulator_position(int thread, int e) {
    const int warp = thread / 32, lane = thread % 32;
    return {16 * warp + lane / 4 + 8 * ((e / 2) % 2), 8 * (e / 4) + 2 * (lane % 4) + e % 2};
}
// Which of a thread's two rows (row 16w + g or 16w + g + 8) element e belongs to.
__host__ __device__ constexpr int row_half(int e) { return (e / 2) % 2; }

// Byte offset of element (row, column) in a swizzled tile of `rows` rows.
__host__ __device__ inline int swizzled_offset(int rows, int row, int column) {
    const int atom = column / kAtomColumns, chunk = (column % kAtomColumns) / 8;
    return atom * rows * kRowBytes + row * kRowBytes + ((chunk ^ (row % 8)) * 16) + (column % 8) * 2;
}

// A shared-memory operand descriptor: address, leading and stride byte offsets in 16-byte
// units, 128-byte swizzle. The address field is the low word's low bits, so a step within a
// tile is one 32-bit add to the low word (step()).
struct Descriptor {
    uint32_t low, high;
    __device__ uint64_t step(uint32_t offset) const { return uint64_t(high) << 32 | (low + offset); }
};
__device__ inline Descriptor descriptor(uint32_t address, uint32_t leading_bytes, uint32_t stride_bytes) {
    constexpr uint32_t kSwizzle128 = 1u << 30;  // bits 62-63 of the descriptor
    return {((address & 0x3FFFF) >> 4) | ((leading_bytes & 0x3FFFF) >> 4) << 16, ((stride_bytes & 0x3FFFF) >> 4) | kSwizzle128};
}

// Operand of K-major layout (the K index contiguous: Q as A, K as B of Q.K^T) at a tile's
// shared address (plus its first row x 128 bytes, a multiple of 8 rows): 8-row groups are 1024
// bytes apart. Step k of 16 along K is .step(k_major_step(rows, k)).
__device__ inline Descriptor k_major_operand(uint32_t address) { return descriptor(address, 16, 8 * kRowBytes); }
// Within an atom each step is 32 bytes further; atom columns are a tile's height apart.
__host__ __device__ constexpr uint32_t k_major_step(int rows, int k) {
    return uint32_t((k * kK / kAtomColumns * rows * kRowBytes + (k * kK) % kAtomColumns * 2) >> 4);
}

// Operand of N-major layout (the N index contiguous: V as B of P.V, N = head dim) at a tile's
// shared address: 8-row groups 1024 bytes apart, atom columns a tile's height apart. Step k of
// 16 along K (rows of the tile) is .step(n_major_step(k)).
__device__ inline Descriptor n_major_operand(uint32_t address, int rows) {
    return descriptor(address, rows * kRowBytes, 8 * kRowBytes);
}
__host__ __device__ constexpr uint32_t n_major_step(int k) { return uint32_t((k * kK * kRowBytes) >> 4); }

}  // namespace wgmma
}  // namespace fmha
