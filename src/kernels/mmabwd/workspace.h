// The backward's workspace and its two small kernels around the main loop:
//   preprocess: D = rowsum(dO * O) (minus dL/dLSE) and the LSE in the log2 domain per query row,
//               and a zeroed fp32 dQ accumulator;
//   convert:    dQ = scale * accumulator, in the element type.
// Both walk the workspace's rows (Workspace: its layout), the kernel's head_dim / 8 lanes a row,
// whatever the tensors' strides and whether the batch is padded or packed; columns past a
// smaller problem head_dim read as zeros and are not written.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/bwd_params.h"
#include "kernels/common/online_softmax.h"
#include "kernels/common/rows.h"
#include "kernels/common/sequence.h"
#include "kernels/config.h"
#include "kernels/numeric.h"

namespace fmha {
namespace mmabwd {

struct Workspace {
    // A step's rows are one aligned range of kRowTile rows (bulk copies, TMA boxes): each
    // sequence's rows of a query head start at a multiple of kRowTile and take its length
    // rounded up to one. Padded batch: [batch][heads_q][seqlen_q rounded up]. Packed batch:
    // [heads_q][virtual tiles of kRowTile rows] (sequence.h: packed_tile_sequence), so the
    // workspace follows the tokens, not batch x seqlen_q.
    static constexpr int kRowTile = 64;
    float* d;         // [rows]; 0 past a sequence's rows
    // [rows]: the forward's LSE times log2(e), so that P = exp2(S scale log2(e) - lse_log2);
    // +inf where the LSE is -inf (a row that sees no key) and past a sequence's rows: P = 0
    float* lse_log2;
    // [rows / kTurnRows][kTurnParts]: BwdParams::deterministic's turn counters (dq_turns.h),
    // zeroed by the preprocess when deterministic
    int* dq_turns;
    static constexpr int kTurnRows = 16, kTurnParts = 2;
    // [rows, the kernel's head_dim], last (its width is the kernel's, not the problem's: columns
    // past a smaller head_dim stay zero), at 128 bytes for its 16-byte stores and TMA boxes
    float* dq_accum;

    __host__ __device__ static bool packed(const BwdParams& p) { return p.total_q > 0; }
    // Rows from one query head of a sequence to the next head's.
    __host__ __device__ static int64_t head_stride(const BwdParams& p) {
        return packed(p) ? kRowTile * (p.batch + int64_t(p.total_q) / kRowTile)
                         : (p.seqlen_q + int64_t(kRowTile) - 1) / kRowTile * kRowTile;
    }
    __host__ __device__ static int64_t rows(const BwdParams& p) {
        return (packed(p) ? 1 : int64_t(p.batch)) * p.heads_q * head_stride(p);
    }
    // Sequence b's first row (of query head 0).
    __device__ static int64_t sequence_row(const BwdParams& p, int b) {
        return packed(p) ? kRowTile * (b + int64_t(p.cu_seqlens_q[b]) / kRowTile) : int64_t(b) * p.heads_q * head_stride(p);
    }
    __host__ __device__ static int64_t turns(const BwdParams& p) { return rows(p) / kTurnRows * kTurnParts; }
    __host__ __device__ static size_t accum_offset(const BwdParams& p) {
        return (size_t(rows(p)) * 2 * sizeof(float) + size_t(turns(p)) * sizeof(int) + 127) / 128 * 128;
    }
    // For a kernel of head_dim `width`.
    __host__ __device__ static size_t bytes(const BwdParams& p, int width) {
        return accum_offset(p) + size_t(rows(p)) * width * sizeof(float);
    }
    __host__ __device__ static Workspace of(const BwdParams& p) {
        uint8_t* const base = static_cast<uint8_t*>(p.workspace);
        float* const d = reinterpret_cast<float*>(base);
        return {d, d + rows(p), reinterpret_cast<int*>(d + 2 * rows(p)), reinterpret_cast<float*>(base + accum_offset(p))};
    }
};

// A workspace row: its sequence, query head and position (at or past the sequence's length in
// the rows that round it up), and where it lives in a tensor.
struct QueryRow {
    int batch, head, position;
    __device__ static QueryRow of(int64_t row, const BwdParams& p) {
        const int64_t stride = Workspace::head_stride(p);
        if (!Workspace::packed(p)) {
            const int64_t bh = row / stride;
            return {int(bh / p.heads_q), int(bh % p.heads_q), int(row % stride)};
        }
        const int64_t in_head = row % stride;
        const int sequence = packed_tile_sequence(p.cu_seqlens_q, p.batch, in_head / Workspace::kRowTile,
                                                  [](int rows) { return rows / Workspace::kRowTile; });
        return {sequence, int(row / stride), int(in_head - Workspace::sequence_row(p, sequence))};
    }
    __device__ bool inside(const BwdParams& p) const {
        return position < sequence_length(p.seqlens_q, p.cu_seqlens_q, batch, p.seqlen_q);
    }
    // The row in a tensor like Q (rows.h).
    template <class Element>
    __device__ Element* in(Element* base, const TensorStrides& s, const BwdParams& p) const {
        return row_start(base, s, p.cu_seqlens_q, batch, head, position);
    }
};

// What the backward's kernels take (every family's: this workspace, 16-byte rows for the
// preprocess and convert kernels and mmabwd's copies), checked before a launch of `family`'s.
template <class Config>
inline bool supports(const BwdParams& p, Family family) {
    const auto aligned = [](const void* ptr, const TensorStrides& s) {
        return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && s.batch % 8 == 0 && s.head % 8 == 0 && s.row % 8 == 0;
    };
    const bool heads_ok = p.heads_kv > 0 && p.heads_q % p.heads_kv == 0;
    // Packed: Q's and K's sides both, with their token counts (BwdParams).
    const bool packed_ok = !p.cu_seqlens_q == !p.cu_seqlens_kv && !p.cu_seqlens_q == (p.total_q <= 0) &&
                           (!p.cu_seqlens_q || p.total_kv > 0);
    return heads_ok && packed_ok && head_dim_fits(family, Config::head_dim, p.head_dim) && p.batch > 0 && bwd_grid_fits(p.batch, p.heads_kv, p.seqlen_kv) &&
           p.seqlen_q > 0 && p.seqlen_kv > 0 && p.window.left >= 0 && p.window.right >= 0 && p.lse && p.workspace &&
           (p.dropout.p == 0.f || (p.dropout.p > 0.f && p.dropout.p < 1.f && p.dropout.seed_offset)) &&
           p.workspace_bytes >= Workspace::bytes(p, Config::head_dim) && aligned(p.q, p.q_strides) && aligned(p.k, p.k_strides) &&
           aligned(p.v, p.v_strides) && aligned(p.o, p.o_strides) && aligned(p.d_o, p.d_o_strides) &&
           aligned(p.dq, p.dq_strides) && aligned(p.dk, p.dk_strides) && aligned(p.dv, p.dv_strides);
}

template <class Config>
__global__ void preprocess_kernel(const BwdParams p) {
    using Numeric = DTypeTraits<Config::dtype>;
    constexpr int kLanes = Config::head_dim / 8;  // a row's lanes, consecutive in a warp
    const int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t row = thread / kLanes;
    const int column = int(thread % kLanes) * 8;
    const Workspace ws = Workspace::of(p);
    const bool inside = row < Workspace::rows(p);
    float sum = 0.f;
    bool valid = false;  // a row of the sequence
    int64_t at = 0;      // ... and its index in the LSE
    if (inside) {
        const QueryRow r = QueryRow::of(row, p);
        float4* accum = reinterpret_cast<float4*>(ws.dq_accum + row * Config::head_dim + column);
        accum[0] = accum[1] = make_float4(0.f, 0.f, 0.f, 0.f);
        valid = r.inside(p);
        if (valid && column < p.head_dim) {
            at = lse_index(p, r.batch, r.head, r.position);
            float o[8], d_o[8];
            unpack8<Numeric>(r.in(static_cast<const uint16_t*>(p.o), p.o_strides, p) + column, o);
            unpack8<Numeric>(r.in(static_cast<const uint16_t*>(p.d_o), p.d_o_strides, p) + column, d_o);
#pragma unroll
            for (int i = 0; i < 8; ++i) sum += o[i] * d_o[i];
        }
    }
#pragma unroll
    for (int width = kLanes / 2; width > 0; width /= 2) sum += __shfl_xor(sum, width, kLanes);
    if (inside && column == 0) {
        if (p.deterministic && row % Workspace::kTurnRows == 0)
            for (int part = 0; part < Workspace::kTurnParts; ++part) ws.dq_turns[row / Workspace::kTurnRows * Workspace::kTurnParts + part] = 0;
        const float lse = valid ? p.lse[at] : -INFINITY;
        ws.d[row] = valid ? sum - (p.d_lse ? p.d_lse[at] : 0.f) : 0.f;
        ws.lse_log2[row] = lse == -INFINITY ? INFINITY : lse * kLog2e;
    }
}

template <class Config>
__global__ void convert_kernel(const BwdParams p) {
    using Numeric = DTypeTraits<Config::dtype>;
    constexpr int kLanes = Config::head_dim / 8;
    const int64_t thread = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t row = thread / kLanes;
    if (row >= Workspace::rows(p)) return;
    const int column = int(thread % kLanes) * 8;
    const float4* accum = reinterpret_cast<const float4*>(Workspace::of(p).dq_accum + row * Config::head_dim + column);
    const float4 lo = accum[0], hi = accum[1];
    const float values[8] = {lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w};
    const QueryRow r = QueryRow::of(row, p);
    // Rows past a sequence's length: a padded batch's get the zeros they add up to (up to
    // seqlen_q); a packed batch's belong to the next sequence.
    if ((p.cu_seqlens_q ? !r.inside(p) : r.position >= p.seqlen_q) || column >= p.head_dim) return;
    // Indexed on the vector pointer: nvcc split the store through an element pointer into four
    // 4-byte stores (docs/decisions.md, "Results stored as 16-byte vectors").
    reinterpret_cast<uint4*>(r.in(static_cast<uint16_t*>(p.dq), p.dq_strides, p))[column / 8] = pack8<Numeric>(values, p.scale);
}

}  // namespace mmabwd
}  // namespace fmha
