// The backward's workspace and its two small kernels around the main loop:
//   preprocess: D = rowsum(dO * O) (minus dL/dLSE) and the LSE in the log2 domain per query row,
//               and a zeroed fp32 dQ accumulator;
//   convert:    dQ = scale * accumulator, in the element type.
// Both walk query rows, head_dim / 8 lanes a row; D, the LSE and the accumulator are contiguous
// [batch, heads_q, seqlen_q] (x head_dim) whatever the tensors' strides.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/bwd_params.h"
#include "kernels/common/online_softmax.h"
#include "kernels/common/sequence.h"
#include "kernels/config.h"
#include "kernels/numeric.h"

namespace fmha {
namespace mmabwd {

struct Workspace {
    // Each (sequence, query head) has head_rows() rows, seqlen_q rounded up to a tile of
    // kRowTile: a step's rows are one aligned range inside the workspace (bulk copies).
    static constexpr int kRowTile = 64;
    float* dq_accum;  // [rows, head_dim], first: its 16-byte stores and 8-byte atomics stay aligned
    float* d;         // [rows]; 0 past a sequence's rows
    // [rows]: the forward's LSE times log2(e), so that P = exp2(S scale log2(e) - lse_log2);
    // +inf where the LSE is -inf (a row that sees no key) and past a sequence's rows: P = 0
    float* lse_log2;

    __host__ __device__ static int head_rows(const BwdParams& p) { return (p.seqlen_q + kRowTile - 1) / kRowTile * kRowTile; }
    __host__ __device__ static int64_t rows(const BwdParams& p) { return int64_t(p.batch) * p.heads_q * head_rows(p); }
    __host__ __device__ static size_t bytes(const BwdParams& p) { return size_t(rows(p)) * (2 + p.head_dim) * sizeof(float); }
    __host__ __device__ static Workspace of(const BwdParams& p) {
        float* base = static_cast<float*>(p.workspace);
        return {base, base + rows(p) * p.head_dim, base + rows(p) * (p.head_dim + 1)};
    }
};

// A workspace row: its sequence, query head and position, and where it lives in a tensor.
struct QueryRow {
    int batch, head, position;
    __device__ static QueryRow of(int64_t row, const BwdParams& p) {
        const int head_rows = Workspace::head_rows(p);
        const int64_t bh = row / head_rows;
        return {int(bh / p.heads_q), int(bh % p.heads_q), int(row % head_rows)};
    }
    __device__ int64_t offset(const TensorStrides& s) const { return batch * s.batch + head * s.head + position * s.row; }
    // In the LSE's [batch, heads_q, seqlen_q] (position < seqlen_q).
    __device__ int64_t lse_index(const BwdParams& p) const { return (int64_t(batch) * p.heads_q + head) * p.seqlen_q + position; }
};

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
        valid = r.position < sequence_length(p.seqlens_q, nullptr, r.batch, p.seqlen_q);
        if (valid) {
            at = r.lse_index(p);
            float o[8], d_o[8];
            unpack8<Numeric>(static_cast<const uint16_t*>(p.o) + r.offset(p.o_strides) + column, o);
            unpack8<Numeric>(static_cast<const uint16_t*>(p.d_o) + r.offset(p.d_o_strides) + column, d_o);
#pragma unroll
            for (int i = 0; i < 8; ++i) sum += o[i] * d_o[i];
        }
    }
#pragma unroll
    for (int width = kLanes / 2; width > 0; width /= 2) sum += __shfl_xor(sum, width, kLanes);
    if (inside && column == 0) {
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
    if (r.position >= p.seqlen_q) return;  // the tile's padding
    *reinterpret_cast<uint4*>(static_cast<uint16_t*>(p.dq) + r.offset(p.dq_strides) + column) =
        pack8<Numeric>(values, p.scale);
}

}  // namespace mmabwd
}  // namespace fmha
