// What both backward loops share: the steps a block walks, the copies that feed a step and
// dropout's keep bits in the transposed (key-major) accumulator layout.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/bwd_params.h"
#include "kernels/common/dropout.h"
#include "kernels/common/mask.h"
#include "kernels/common/memory.h"
#include "kernels/common/sequence.h"
#include "kernels/mmabwd/workspace.h"

namespace fmha {
namespace mmabwd {

// The block's key tile: a 1-D grid over (key tile, KV head, sequence). A padded batch's (KV
// head, sequence) pairs go in groups whose tiles make about a wave of blocks (kWaveBlocks), and
// in a group the key tiles go slowest: the blocks running at once then share their heads' Q,
// dO and dQ rows in L2 (a pair a block, every step would read them from memory and add dQ
// there), and they start in the order of their key tiles: with a causal mask the first tiles
// are seen by the most query rows, so the longest blocks start first (docs/decisions.md,
// "Backward blocks grouped by head"). A packed batch's sequences take virtual tiles
// (sequence.h: packed_tile_sequence), KV heads fastest: a block per tile of its keys and at
// most one more, without a tile per padded position.
struct KeyTile {
    static constexpr int kWaveBlocks = 128;  // about a wave on an H100 / H200 (132 multiprocessors, a block each); tuned there
    int index, head_kv, batch;
    __host__ __device__ static int64_t count(const BwdParams& p, int keys) {
        return p.cu_seqlens_kv ? int64_t(p.heads_kv) * (p.batch + p.total_kv / keys)
                               : int64_t((p.seqlen_kv + keys - 1) / keys) * p.heads_kv * p.batch;
    }
    __host__ __device__ static KeyTile of(int block, const BwdParams& p, int keys) {
        if (p.cu_seqlens_kv) {
            const int tile = block / p.heads_kv;
            const auto divide = [keys](int rows) { return rows / keys; };
            const int sequence = packed_tile_sequence(p.cu_seqlens_kv, p.batch, tile, divide);
            return {tile - sequence - divide(p.cu_seqlens_kv[sequence]), block % p.heads_kv, sequence};
        }
        const int tiles = (p.seqlen_kv + keys - 1) / keys, pairs = p.heads_kv * p.batch;
        const int group = min(pairs, (kWaveBlocks + tiles - 1) / tiles);   // pairs per group
        const int first = block / (group * tiles) * group;                 // the group's first pair
        const int size = min(group, pairs - first), in_group = block - first * tiles;
        const int pair = first + in_group % size;
        return {in_group / size, pair % p.heads_kv, pair / p.heads_kv};
    }
};

// The block's sequence: its lengths, where it starts in the tensors (sequence.h; a packed
// tensor's batch stride is its row stride), and the key rows it writes dK and dV to: a padded
// batch's rows past the length get zeros, a packed batch's are the next sequence's.
struct BlockSequence {
    int len_q, len_kv, written_kv;
    int64_t q_index, kv_index;  // in batch strides
    __device__ static BlockSequence of(const BwdParams& p, int batch) {
        const int len_kv = sequence_length(p.seqlens_kv, p.cu_seqlens_kv, batch, p.seqlen_kv);
        return {sequence_length(p.seqlens_q, p.cu_seqlens_q, batch, p.seqlen_q), len_kv, p.cu_seqlens_kv ? len_kv : p.seqlen_kv,
                sequence_index(p.cu_seqlens_q, batch), sequence_index(p.cu_seqlens_kv, batch)};
    }
};

// A step of a block: a query head and its block of rows from q0.
struct BlockStep {
    int head, q0;
    int64_t rows;  // the head's first workspace row (of this sequence)
};

// A block owns `keys` keys from key0 of one KV head. Its steps: each query head of the head's
// group and, in it, each block of kQueries rows from q_first that sees some of the keys;
// kDescending (the deterministic loop, dq_turns.h): from the last block down.
template <int kQueries, bool kDescending = false>
struct BlockSteps {
    using Step = BlockStep;
    int first_head, q_first, head_steps, steps;
    int64_t first_rows, head_stride;  // the first head's first workspace row; Workspace::head_stride()

    template <bool kMasked>
    __device__ static BlockSteps of(const BwdParams& p, const KeyMask<kMasked>& mask, int key0, int keys, int head_kv,
                                    int batch, int len_q) {
        // The query rows that see some key of the block (mask.h: row i sees key j iff
        // i + offset - left <= j <= i + offset + right), [q_lo, q_hi).
        int q_lo = 0, q_hi = key0 < mask.len_kv ? len_q : 0;
        if constexpr (kMasked) {
            q_lo = max(0, key0 - mask.offset - p.window.right);
            q_hi = min(q_hi, key0 + keys - 1 - mask.offset + p.window.left + 1);
        }
        const int group = p.heads_q / p.heads_kv;
        const int q_first = q_lo / kQueries * kQueries;
        const int head_steps = q_hi > q_first ? (q_hi - q_first + kQueries - 1) / kQueries : 0;
        const int first_head = head_kv * group;
        const int64_t head_stride = Workspace::head_stride(p);
        return {first_head, q_first, head_steps, group * head_steps, Workspace::sequence_row(p, batch) + first_head * head_stride,
                head_stride};
    }
    __device__ Step at(int s, const BwdParams& p) const {
        const int heads_in = s / max(head_steps, 1), in_head = s % max(head_steps, 1);
        return {first_head + heads_in, q_first + (kDescending ? head_steps - 1 - in_head : in_head) * kQueries,
                first_rows + heads_in * head_stride};
    }
    // The step after `st` (at(s + 1) without the division).
    __device__ Step next(const Step& st, const BwdParams& p) const {
        if constexpr (kDescending) {
            if (st.q0 > q_first) return {st.head, st.q0 - kQueries, st.rows};
            return {st.head + 1, q_first + (head_steps - 1) * kQueries, st.rows + head_stride};
        }
        if (st.q0 + kQueries < q_first + head_steps * kQueries) return {st.head, st.q0 + kQueries, st.rows};
        return {st.head + 1, q_first, st.rows + head_stride};
    }
};

// Starts copying rows [row0, row0 + kRows) of a [rows, kHeadDim] tensor into shared memory,
// 16 bytes a lane, row r's column c to place(r, c); rows at or past `valid` and columns at or
// past `columns` (the problem's head_dim, a multiple of 8) become zeros.
template <int kThreads, int kHeadDim, int kRows, class Place>
__device__ inline void load_rows(Place place, const uint16_t* base, int64_t row_stride, int row0, int valid, int columns) {
    constexpr int kVectors = kHeadDim / 8;
    for (int i = threadIdx.x; i < kRows * kVectors; i += kThreads) {
        const int row = i / kVectors, column = (i % kVectors) * 8;
        const bool inside = row0 + row < valid && column < columns;
        copy_async<16>(place(row, column), base + (inside ? (row0 + row) * row_stride + column : 0), inside);
    }
}

// Starts copying a step's LSE (log2 domain) and D from the workspace; rows past the sequence
// read zeros (P = 1 there, but Q and dO are zeros too, so every product of those rows is zero).
template <int kThreads, int kQueries>
__device__ inline void load_row_stats(const BwdParams& p, const BlockStep& st, int len_q,
                                      float* lse, float* d) {
    static_assert(2 * kQueries <= kThreads, "one copy a thread");
    const Workspace ws = Workspace::of(p);
    const int i = threadIdx.x % kQueries;
    const bool valid = st.q0 + i < len_q;
    const int64_t row = valid ? st.rows + st.q0 + i : 0;
    if (threadIdx.x < kQueries) copy_async<4>(lse + i, ws.lse_log2 + row, valid);
    else if (threadIdx.x < 2 * kQueries) copy_async<4>(d + i, ws.d + row, valid);
}

// The copies into shared memory of the loops whose tiles T lay rows of T::kRow elements out
// (tiles.h, mfma_kernel.h): the block's K and V, once, and a step's Q, dO, LSE and D into a stage.
template <class T>
struct StepCopies {
    const BwdParams& p;
    const BlockSequence& seq;
    uint8_t* shared;

    // Where row r, column c of the tile at `offset` (of stage `stage`) goes.
    __device__ auto place(int offset, int stage) const {
        uint16_t* const rows = reinterpret_cast<uint16_t*>(shared + offset) + stage * T::kQueries * T::kRow;
        return [rows](int row, int column) { return rows + row * T::kRow + column; };
    }
    __device__ void keys(int head_kv, int key0) const {
        const uint16_t* k = static_cast<const uint16_t*>(p.k) + seq.kv_index * p.k_strides.batch + head_kv * p.k_strides.head;
        const uint16_t* v = static_cast<const uint16_t*>(p.v) + seq.kv_index * p.v_strides.batch + head_kv * p.v_strides.head;
        load_rows<T::kThreads, T::kHeadDim, T::kKeys>(place(T::kKOffset, 0), k, p.k_strides.row, key0, seq.len_kv, p.head_dim);
        load_rows<T::kThreads, T::kHeadDim, T::kKeys>(place(T::kVOffset, 0), v, p.v_strides.row, key0, seq.len_kv, p.head_dim);
    }
    __device__ void step(const BlockStep& st, int stage) const {
        const auto rows = [&](const void* tensor, const TensorStrides& s) {
            return static_cast<const uint16_t*>(tensor) + seq.q_index * s.batch + st.head * s.head;
        };
        load_rows<T::kThreads, T::kHeadDim, T::kQueries>(place(T::kQOffset, stage), rows(p.q, p.q_strides), p.q_strides.row,
                                                         st.q0, seq.len_q, p.head_dim);
        load_rows<T::kThreads, T::kHeadDim, T::kQueries>(place(T::kDoOffset, stage), rows(p.d_o, p.d_o_strides),
                                                         p.d_o_strides.row, st.q0, seq.len_q, p.head_dim);
        load_row_stats<T::kThreads, T::kQueries>(p, st, seq.len_q,
                                                 reinterpret_cast<float*>(shared + T::kLseOffset) + stage * T::kQueries,
                                                 reinterpret_cast<float*>(shared + T::kDOffset) + stage * T::kQueries);
    }
};

// Dropout's keep bits of a warp's 16 keys from key_block and 8 query rows from q0, in the
// transposed accumulator layout (an mma.sync C tile, 8 columns of wgmma's accumulators): bit c
// for element c, key key_block + g + 8 (c / 2), query q0 + 2t + c % 2. The Philox call of a
// query row and a 16-key block holds keys g and g + 8 (common/dropout.h).
__device__ inline unsigned transposed_keep_bits(const Dropout& dropout, int64_t stream, int q0, int key_block, int lane) {
    const int g = lane / 4, t = lane % 4;
    unsigned kept = 0;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const PhiloxWords words = dropout.randoms(dropout.row(stream, q0 + 2 * t + e), key_block + 2 * (g / 2));
#pragma unroll
        for (int half = 0; half < 2; ++half) {  // (no run-time index into words: it would live in memory)
            const uint32_t random = g % 2 ? words.w[2 * half + 1] : words.w[2 * half];
            kept |= unsigned(dropout.keeps(random)) << (2 * half + e);
        }
    }
    return kept;
}

}  // namespace mmabwd
}  // namespace fmha
