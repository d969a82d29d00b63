#include "reference/device_reference.h"

#include <hip/hip_runtime.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "kernels/numeric.h"

namespace fmha {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;  // blocks loop over the rest

unsigned blocks_for(int64_t work) { return static_cast<unsigned>(std::clamp<int64_t>((work + kThreads - 1) / kThreads, 1, kMaxBlocks)); }

__device__ inline uint64_t mix64(uint64_t x) {  // splitmix64 finaliser
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

template <DType kDType>
__global__ void fill_kernel(uint16_t* data, int64_t count, uint64_t key, float range) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
        const float unit = (mix64(key + uint64_t(i)) >> 40) * (1.0f / 16777216.0f);  // [0, 1), 24 bits
        data[i] = DTypeTraits<kDType>::pack((2.f * unit - 1.f) * range);
    }
}

template <DType kDType>
__device__ inline float load(const void* base, int64_t index) {
    return DTypeTraits<kDType>::unpack1(static_cast<const uint16_t*>(base)[index]);
}

// Sequence b's length: lengths[b], else its span in a packed batch, else the fixed one.
__host__ __device__ inline int length_of(const int* lengths, const int* cu_seqlens, int64_t batch, int fixed) {
    return lengths ? lengths[batch] : cu_seqlens ? cu_seqlens[batch + 1] - cu_seqlens[batch] : fixed;
}
// Element offset of sequence b's row `row` (head 0): packed at row cu_seqlens[b] + row, else b
// batch strides in (FwdParams: a packed tensor's batch stride is its row stride, not read here).
__device__ inline int64_t row_offset(const TensorStrides& s, const int* cu_seqlens, int64_t b, int64_t row) {
    return cu_seqlens ? (cu_seqlens[b] + row) * s.row : b * s.batch + row * s.row;
}

// A score by FwdParams' rule (softcapping, then ALiBi; either direction's params) from its dot
// product, for query head h of sequence b at `distance` = diagonal - key, and G, its derivative
// by scale * dot (1 - tanh^2 of the capped score, else 1).
struct ScoreAndGrad {
    float score, grad;
};
template <class Params>
__device__ inline ScoreAndGrad score_and_grad(const Params& p, int64_t b, int h, int distance, float dot) {
    ScoreAndGrad s{dot * p.scale, 1.f};
    if (p.softcap != 0.f) {
        const float t = tanhf(s.score / p.softcap);
        s.score = p.softcap * t;
        s.grad = 1.f - t * t;
    }
    if (p.alibi_slopes) s.score -= p.alibi_slopes[b * p.alibi_batch_stride + h] * fabsf(float(distance));
    return s;
}

// One thread per query row: pass 1 finds the row maximum, pass 2 accumulates exp-weighted V
// in column chunks (recomputing the scores per chunk keeps per-thread state small). Scores
// follow FwdParams' rule: softcapping, then ALiBi, then the mask. With dropout, V's weights
// are the probabilities times kept[row][key] / (1 - p) (the sum and the LSE are not).
constexpr int kChunk = 64;

template <DType kDType>
__global__ void reference_kernel(const FwdParams p, float* out, float* lse, const uint8_t* kept) {
    const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
    for (int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; row < rows; row += int64_t(gridDim.x) * blockDim.x) {
        const int i = int(row % p.seqlen_q);
        const int h = int(row / p.seqlen_q % p.heads_q);
        const int64_t b = row / p.seqlen_q / p.heads_q;
        float* o = out + row * p.head_dim;
        const int len_q = length_of(p.seqlens_q, p.cu_seqlens_q, b, p.seqlen_q);
        const int len_kv = length_of(p.seqlens_kv, p.cu_seqlens_kv, b, p.seqlen_kv);
        // The window around the bottom-right diagonal (FwdParams::window; a problem without a mask
        // has both sides unbounded), worked out here rather than taken from kernels/common/mask.h.
        const int diagonal = i + len_kv - len_q;
        const int first = max(0, diagonal - p.window.left);
        const int last = min(len_kv - 1, diagonal + p.window.right);
        if (i >= len_q || last < first) {
            for (int c = 0; c < p.head_dim; ++c) o[c] = 0.f;
            if (lse) lse[row] = -INFINITY;
            continue;
        }
        const int hk = h / (p.heads_q / p.heads_kv);
        const int64_t q_row = row_offset(p.q_strides, p.cu_seqlens_q, b, i) + h * p.q_strides.head;
        // Element offset of key j's row in K or V: by the strides, or through the block table.
        auto kv_row = [&](const TensorStrides& s, int j) {
            if (!p.block_table) return row_offset(s, p.cu_seqlens_kv, b, j) + hk * s.head;
            const int page = p.block_table[b * p.max_pages_per_seq + j / p.page_size];
            return int64_t(page) * s.batch + hk * s.head + int64_t(j % p.page_size) * s.row;
        };
        auto score = [&](int j) {
            const int64_t k_row = kv_row(p.k_strides, j);
            float dot = 0.f;
            for (int c = 0; c < p.head_dim; ++c) dot += load<kDType>(p.q, q_row + c) * load<kDType>(p.k, k_row + c);
            return score_and_grad(p, b, h, diagonal - j, dot).score;
        };
        float row_max = -INFINITY;
        for (int j = first; j <= last; ++j) row_max = fmaxf(row_max, score(j));
        for (int c0 = 0; c0 < p.head_dim; c0 += kChunk) {
            float acc[kChunk] = {};
            float sum = 0.f;
            for (int j = first; j <= last; ++j) {
                const float weight = expf(score(j) - row_max);
                sum += weight;
                const float v_weight = kept ? weight * kept[row * p.seqlen_kv + j] / (1.f - p.dropout.p) : weight;
                const int64_t v_row = kv_row(p.v_strides, j);
                for (int c = 0; c < kChunk && c0 + c < p.head_dim; ++c) acc[c] += v_weight * load<kDType>(p.v, v_row + c0 + c);
            }
            for (int c = 0; c < kChunk && c0 + c < p.head_dim; ++c) o[c0 + c] = acc[c] / sum;
            if (lse && c0 == 0) lse[row] = row_max + logf(sum);
        }
    }
}

// The backward, one thread per query row, then one per key row, recomputing the probabilities
// from the inputs. With P = softmax(S) per row, S by FwdParams' rule (softcapping, ALiBi), G =
// dS / d(scale q k^T) (1 - tanh^2 of the capped score, else 1), the dropout mask's weights
// W = kept / (1 - p) (all ones without dropout), dP = W * (dO v^T) and D = rowsum(P * dP)
// (= rowsum(dO * O)):
//   dS = G * P * (dP - D),  dQ = scale dS k,  dK = scale dS^T q,  dV = (W * P)^T dO,
// dK and dV summed over the query heads of each KV head.
struct BackwardRow {  // a query row of BwdParams, located
    int64_t b;
    int h, i, len_q, len_kv, first, last;  // keys [first, last] (none where last < first)
};

__device__ inline BackwardRow backward_row(const BwdParams& p, int64_t row) {
    BackwardRow r;
    r.i = int(row % p.seqlen_q);
    r.h = int(row / p.seqlen_q % p.heads_q);
    r.b = row / p.seqlen_q / p.heads_q;
    r.len_q = length_of(p.seqlens_q, p.cu_seqlens_q, r.b, p.seqlen_q);
    r.len_kv = length_of(p.seqlens_kv, p.cu_seqlens_kv, r.b, p.seqlen_kv);
    const int diagonal = r.i + r.len_kv - r.len_q;
    r.first = max(0, diagonal - p.window.left);
    r.last = r.i < r.len_q ? min(r.len_kv - 1, diagonal + p.window.right) : -1;
    return r;
}

// score_and_grad() for a located backward row.
__device__ inline ScoreAndGrad score_and_grad(const BwdParams& p, const BackwardRow& r, int j, float dot) {
    return score_and_grad(p, r.b, r.h, r.i + r.len_kv - r.len_q - j, dot);
}

// Element (row, j)'s dropout weight: 1 / (1 - p) where kept, 0 where dropped, 1 without dropout.
__device__ inline float dropout_weight(const BwdParams& p, const uint8_t* kept, int64_t row, int j) {
    return kept ? kept[row * p.seqlen_kv + j] / (1.f - p.dropout.p) : 1.f;
}

template <DType kDType>
__device__ inline float dot_rows(const void* a, int64_t a_row, const void* b, int64_t b_row, int n) {
    float dot = 0.f;
    for (int c = 0; c < n; ++c) dot += load<kDType>(a, a_row + c) * load<kDType>(b, b_row + c);
    return dot;
}

// Per query row: its natural-log LSE and D (to `stats`, [row][2]), and dQ (fp32, contiguous
// [batch, heads_q, seqlen_q, head_dim]; zeros for a row that sees no key).
template <DType kDType>
__global__ void reference_backward_rows(const BwdParams p, const uint8_t* kept, float* dq, float2* stats) {
    const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
    for (int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; row < rows; row += int64_t(gridDim.x) * blockDim.x) {
        const BackwardRow r = backward_row(p, row);
        const int hk = r.h / (p.heads_q / p.heads_kv);
        const int64_t q_row = row_offset(p.q_strides, p.cu_seqlens_q, r.b, r.i) + r.h * p.q_strides.head;
        const int64_t do_row = row_offset(p.d_o_strides, p.cu_seqlens_q, r.b, r.i) + r.h * p.d_o_strides.head;
        auto k_row = [&](int j) { return row_offset(p.k_strides, p.cu_seqlens_kv, r.b, j) + hk * p.k_strides.head; };
        auto v_row = [&](int j) { return row_offset(p.v_strides, p.cu_seqlens_kv, r.b, j) + hk * p.v_strides.head; };
        auto score = [&](int j) { return score_and_grad(p, r, j, dot_rows<kDType>(p.q, q_row, p.k, k_row(j), p.head_dim)); };
        float row_max = -INFINITY, sum = 0.f;
        for (int j = r.first; j <= r.last; ++j) row_max = fmaxf(row_max, score(j).score);
        for (int j = r.first; j <= r.last; ++j) sum += expf(score(j).score - row_max);
        const float lse = r.last < r.first ? -INFINITY : row_max + logf(sum);
        auto prob = [&](int j) { return expf(score(j).score - lse); };
        auto d_prob = [&](int j) {  // dP
            return dropout_weight(p, kept, row, j) * dot_rows<kDType>(p.d_o, do_row, p.v, v_row(j), p.head_dim);
        };
        float d = 0.f;
        for (int j = r.first; j <= r.last; ++j) d += prob(j) * d_prob(j);
        stats[row] = make_float2(lse, d);
        float* out = dq + row * p.head_dim;
        for (int c0 = 0; c0 < p.head_dim; c0 += kChunk) {
            float acc[kChunk] = {};
            for (int j = r.first; j <= r.last; ++j) {
                const ScoreAndGrad sj = score(j);
                const float ds = sj.grad * expf(sj.score - lse) * (d_prob(j) - d);
                for (int c = 0; c < kChunk && c0 + c < p.head_dim; ++c) acc[c] += ds * load<kDType>(p.k, k_row(j) + c0 + c);
            }
            for (int c = 0; c < kChunk && c0 + c < p.head_dim; ++c) out[c0 + c] = p.scale * acc[c];
        }
    }
}

// Per key row (batch, KV head, key): dK and dV (fp32, contiguous [batch, heads_kv, seqlen_kv,
// head_dim]), from the query rows' stats.
template <DType kDType>
__global__ void reference_backward_keys(const BwdParams p, const uint8_t* kept, const float2* stats, float* dk, float* dv) {
    const int64_t keys = int64_t(p.batch) * p.heads_kv * p.seqlen_kv;
    const int group = p.heads_q / p.heads_kv;
    for (int64_t key = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; key < keys; key += int64_t(gridDim.x) * blockDim.x) {
        const int j = int(key % p.seqlen_kv);
        const int hk = int(key / p.seqlen_kv % p.heads_kv);
        const int64_t b = key / p.seqlen_kv / p.heads_kv;
        const int64_t k_row = row_offset(p.k_strides, p.cu_seqlens_kv, b, j) + hk * p.k_strides.head;
        const int64_t v_row = row_offset(p.v_strides, p.cu_seqlens_kv, b, j) + hk * p.v_strides.head;
        for (int c0 = 0; c0 < p.head_dim; c0 += kChunk) {
            float acc_k[kChunk] = {}, acc_v[kChunk] = {};
            for (int h = hk * group; h < (hk + 1) * group; ++h) {
                for (int i = 0; i < p.seqlen_q; ++i) {
                    const int64_t row = (b * p.heads_q + h) * p.seqlen_q + i;
                    const BackwardRow r = backward_row(p, row);
                    if (j < r.first || j > r.last) continue;
                    const int64_t q_row = row_offset(p.q_strides, p.cu_seqlens_q, b, i) + h * p.q_strides.head;
                    const int64_t do_row = row_offset(p.d_o_strides, p.cu_seqlens_q, b, i) + h * p.d_o_strides.head;
                    const ScoreAndGrad s = score_and_grad(p, r, j, dot_rows<kDType>(p.q, q_row, p.k, k_row, p.head_dim));
                    const float prob = expf(s.score - stats[row].x);
                    const float weight = dropout_weight(p, kept, row, j);
                    const float ds = s.grad * prob * (weight * dot_rows<kDType>(p.d_o, do_row, p.v, v_row, p.head_dim) - stats[row].y);
                    for (int c = 0; c < kChunk && c0 + c < p.head_dim; ++c) {
                        acc_k[c] += ds * load<kDType>(p.q, q_row + c0 + c);
                        acc_v[c] += weight * prob * load<kDType>(p.d_o, do_row + c0 + c);
                    }
                }
            }
            for (int c = 0; c < kChunk && c0 + c < p.head_dim; ++c) {
                dk[key * p.head_dim + c0 + c] = p.scale * acc_k[c];
                dv[key * p.head_dim + c0 + c] = acc_v[c];
            }
        }
    }
}

struct Partial {
    int64_t nan_count, bad_count, worst_index;
    double err_sq, ref_sq;
    float max_abs_err, worst_out, worst_ref, ref_max_abs;
};

template <DType kDType>
__global__ void compare_kernel(const FwdParams p, const float* ref, Tolerance tol, Partial* partials) {
    __shared__ Partial shared[kThreads];
    Partial mine = {0, 0, -1, 0.0, 0.0, 0.f, 0.f, 0.f, 0.f};
    const int64_t count = int64_t(p.batch) * p.heads_q * p.seqlen_q * p.head_dim;
    for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < count; idx += int64_t(gridDim.x) * blockDim.x) {
        const int c = int(idx % p.head_dim);
        const int i = int(idx / p.head_dim % p.seqlen_q);
        const int h = int(idx / p.head_dim / p.seqlen_q % p.heads_q);
        const int64_t b = idx / p.head_dim / p.seqlen_q / p.heads_q;
        if (i >= length_of(p.seqlens_q, p.cu_seqlens_q, b, p.seqlen_q)) continue;
        const float out = load<kDType>(p.o, row_offset(p.o_strides, p.cu_seqlens_q, b, i) + h * p.o_strides.head + c);
        const float expected = ref[idx];
        const float err = fabsf(out - expected);
        if (!isfinite(out)) {
            if (mine.nan_count++ == 0 && mine.max_abs_err != INFINITY) {
                mine.max_abs_err = INFINITY;
                mine.worst_index = idx, mine.worst_out = out, mine.worst_ref = expected;
            }
            continue;
        }
        if (err > tol.atol + tol.rtol * fabsf(expected)) ++mine.bad_count;
        if (err > mine.max_abs_err) mine.max_abs_err = err, mine.worst_index = idx, mine.worst_out = out, mine.worst_ref = expected;
        mine.err_sq += double(err) * err;
        mine.ref_sq += double(expected) * expected;
        mine.ref_max_abs = fmaxf(mine.ref_max_abs, fabsf(expected));
    }
    shared[threadIdx.x] = mine;
    __syncthreads();
    for (int stride = kThreads / 2; stride > 0; stride /= 2) {
        if (threadIdx.x < stride) {
            Partial& a = shared[threadIdx.x];
            const Partial& b = shared[threadIdx.x + stride];
            a.nan_count += b.nan_count;
            a.bad_count += b.bad_count;
            a.err_sq += b.err_sq;
            a.ref_sq += b.ref_sq;
            a.ref_max_abs = fmaxf(a.ref_max_abs, b.ref_max_abs);
            if (b.max_abs_err > a.max_abs_err) a.max_abs_err = b.max_abs_err, a.worst_index = b.worst_index, a.worst_out = b.worst_out, a.worst_ref = b.worst_ref;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) partials[blockIdx.x] = shared[0];
}

template <template <DType> class Launch, class... Args>
hipError_t dispatch(DType dtype, Args&&... args) {
    switch (dtype) {
        case DType::fp16: return Launch<DType::fp16>::run(args...);
        case DType::bf16: return Launch<DType::bf16>::run(args...);
    }
    return hipErrorInvalidValue;
}

template <DType kDType>
struct FillLaunch {
    static hipError_t run(void* data, int64_t count, uint64_t key, float range, hipStream_t stream) {
        fill_kernel<kDType><<<blocks_for(count), kThreads, 0, stream>>>(static_cast<uint16_t*>(data), count, key, range);
        return hipGetLastError();
    }
};

template <DType kDType>
struct ReferenceLaunch {
    static hipError_t run(const FwdParams& p, float* out, float* lse, const uint8_t* kept, hipStream_t stream) {
        const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
        reference_kernel<kDType><<<blocks_for(rows), kThreads, 0, stream>>>(p, out, lse, kept);
        return hipGetLastError();
    }
};

template <DType kDType>
struct BackwardReferenceLaunch {
    static hipError_t run(const BwdParams& p, const uint8_t* kept, float* dq, float* dk, float* dv, float2* stats,
                          hipStream_t stream) {
        const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q, keys = int64_t(p.batch) * p.heads_kv * p.seqlen_kv;
        reference_backward_rows<kDType><<<blocks_for(rows), kThreads, 0, stream>>>(p, kept, dq, stats);
        if (const hipError_t err = hipGetLastError(); err != hipSuccess) return err;
        reference_backward_keys<kDType><<<blocks_for(keys), kThreads, 0, stream>>>(p, kept, stats, dk, dv);
        return hipGetLastError();
    }
};

template <DType kDType>
struct CompareLaunch {
    static hipError_t run(const FwdParams& p, const float* ref, const Tolerance& tol, Partial* partials, unsigned blocks) {
        compare_kernel<kDType><<<blocks, kThreads>>>(p, ref, tol, partials);
        return hipGetLastError();
    }
};

}  // namespace

hipError_t fill_random(void* data, int64_t count, DType dtype, uint64_t seed, uint64_t stream_id, float range,
                       hipStream_t stream) {
    const uint64_t key = (seed * 0x9e3779b97f4a7c15ull) ^ (stream_id << 56);
    return dispatch<FillLaunch>(dtype, data, count, key, range, stream);
}

hipError_t reference_forward(const FwdParams& params, DType dtype, float* out, float* lse, hipStream_t stream,
                             const uint8_t* kept) {
    return dispatch<ReferenceLaunch>(dtype, params, out, lse, kept, stream);
}

hipError_t reference_backward(const BwdParams& params, DType dtype, float* dq, float* dk, float* dv, hipStream_t stream,
                              const uint8_t* kept) {
    float2* stats = nullptr;
    const int64_t rows = int64_t(params.batch) * params.heads_q * params.seqlen_q;
    hipError_t err = hipMalloc(reinterpret_cast<void**>(&stats), std::max<int64_t>(rows, 1) * sizeof(float2));
    if (err != hipSuccess) return err;
    err = dispatch<BackwardReferenceLaunch>(dtype, params, kept, dq, dk, dv, stats, stream);
    if (err == hipSuccess) err = hipStreamSynchronize(stream);
    (void)hipFree(stats);
    return err;
}

Tolerance default_tolerance(DType dtype) {
    // Output rounding alone is half an ulp: 2^-11 relative for fp16, 2^-8 for bf16.
    return dtype == DType::fp16 ? Tolerance{1e-3f, 1e-3f, 1e-3f} : Tolerance{8e-3f, 8e-3f, 8e-3f};
}

namespace {

// The query lengths of a batch with per-sequence ones, on the host (empty where they are fixed),
// and a packed batch's cu_seqlens_q (where asked).
hipError_t query_lengths(const FwdParams& p, std::vector<int>* lengths, std::vector<int>* cu_seqlens = nullptr) {
    lengths->clear();
    std::vector<int> sums;
    hipError_t err = hipSuccess;
    if (p.cu_seqlens_q) {
        sums.resize(p.batch + 1);
        err = hipMemcpy(sums.data(), p.cu_seqlens_q, sums.size() * sizeof(int), hipMemcpyDeviceToHost);
    }
    if (err == hipSuccess && p.seqlens_q) {
        lengths->resize(p.batch);
        err = hipMemcpy(lengths->data(), p.seqlens_q, lengths->size() * sizeof(int), hipMemcpyDeviceToHost);
    } else if (err == hipSuccess && p.cu_seqlens_q) {
        for (int b = 0; b < p.batch; ++b) lengths->push_back(length_of(nullptr, sums.data(), b, p.seqlen_q));
    }
    if (cu_seqlens) *cu_seqlens = std::move(sums);
    return err;
}

}  // namespace

hipError_t compare_with_reference(const FwdParams& params, DType dtype, const float* reference,
                                  const Tolerance& tol, CompareResult* result) {
    const int64_t count = int64_t(params.batch) * params.heads_q * params.seqlen_q * params.head_dim;
    const unsigned blocks = std::min<unsigned>(blocks_for(count), 4096);
    Partial* partials = nullptr;
    hipError_t err = hipMalloc(reinterpret_cast<void**>(&partials), blocks * sizeof(Partial));
    if (err != hipSuccess) return err;
    std::vector<Partial> host(blocks);
    err = dispatch<CompareLaunch>(dtype, params, reference, tol, partials, blocks);
    if (err == hipSuccess)
        err = hipMemcpy(host.data(), partials, blocks * sizeof(Partial), hipMemcpyDeviceToHost);
    (void)hipFree(partials);
    if (err != hipSuccess) return err;

    *result = CompareResult{};
    result->row_elements = params.head_dim;
    double err_sq = 0, ref_sq = 0;
    for (const Partial& part : host) {
        result->nan_count += part.nan_count;
        result->bad_count += part.bad_count;
        err_sq += part.err_sq;
        ref_sq += part.ref_sq;
        result->ref_max_abs = std::max(result->ref_max_abs, part.ref_max_abs);
        if (part.worst_index >= 0 && (result->worst_index < 0 || part.max_abs_err > result->max_abs_err)) {
            result->max_abs_err = part.max_abs_err;
            result->worst_index = part.worst_index;
            result->worst_out = part.worst_out;
            result->worst_ref = part.worst_ref;
        }
    }
    // Elements inside their sequence: recount on the host from the lengths rule.
    result->checked = count;
    std::vector<int> lengths;
    if ((err = query_lengths(params, &lengths)) != hipSuccess) return err;
    if (!lengths.empty()) {
        result->checked = 0;
        for (int len : lengths) result->checked += int64_t(len) * params.heads_q * params.head_dim;
    }
    result->rel_l2 = result->nan_count > 0 ? NAN : relative_l2(err_sq, ref_sq);
    return hipSuccess;
}

Tolerance lse_tolerance() { return {1e-3f, 1e-4f, 1e-4f}; }

hipError_t compare_lse_with_reference(const FwdParams& params, const float* reference_lse, const Tolerance& tol,
                                      CompareResult* result) {
    const int64_t rows = int64_t(params.batch) * params.heads_q * params.seqlen_q;
    std::vector<float> out(rows), ref(rows);
    std::vector<int> lengths, cu_seqlens;
    hipError_t err = hipMemcpy(out.data(), params.lse, rows * sizeof(float), hipMemcpyDeviceToHost);
    if (err == hipSuccess) err = hipMemcpy(ref.data(), reference_lse, rows * sizeof(float), hipMemcpyDeviceToHost);
    if (err == hipSuccess) err = query_lengths(params, &lengths, &cu_seqlens);
    if (err != hipSuccess) return err;
    // The kernel's LSE of logical row (b, h, i): [heads_q, total_q] where Q is packed.
    auto kernel_lse = [&](int64_t b, int64_t h, int64_t i) {
        return cu_seqlens.empty() ? out[(b * params.heads_q + h) * params.seqlen_q + i] : out[h * params.total_q + cu_seqlens[b] + i];
    };

    *result = CompareResult{};
    result->row_elements = 1;
    double err_sq = 0, ref_sq = 0;
    for (int64_t row = 0; row < rows; ++row) {
        const int64_t b = row / params.seqlen_q / params.heads_q, i = row % params.seqlen_q;
        if (i >= (lengths.empty() ? params.seqlen_q : lengths[b])) continue;
        ++result->checked;
        const float x = kernel_lse(b, row / params.seqlen_q % params.heads_q, i), expected = ref[row];
        if (x == expected) continue;  // -inf matches -inf
        const float diff = std::fabs(x - expected);
        if (!std::isfinite(x) || !std::isfinite(expected)) {
            if (result->nan_count++ == 0) result->max_abs_err = INFINITY, result->worst_index = row, result->worst_out = x, result->worst_ref = expected;
            continue;
        }
        if (diff > tol.atol + tol.rtol * std::fabs(expected)) ++result->bad_count;
        if (result->nan_count == 0 && diff > result->max_abs_err)
            result->max_abs_err = diff, result->worst_index = row, result->worst_out = x, result->worst_ref = expected;
        err_sq += double(diff) * diff;
        ref_sq += double(expected) * expected;
    }
    result->rel_l2 = result->nan_count > 0 ? NAN : relative_l2(err_sq, ref_sq);
    return hipSuccess;
}

std::string CompareResult::describe(const FwdParams& p) const {
    std::ostringstream s;
    s.precision(3);
    s << "max abs err " << std::scientific << max_abs_err << ", rel L2 " << rel_l2 << ", " << nan_count
      << " non-finite, " << bad_count << " outside tolerance, of " << checked;
    if (worst_index >= 0) {
        const int64_t c = worst_index % row_elements, i = worst_index / row_elements % p.seqlen_q;
        const int64_t h = worst_index / row_elements / p.seqlen_q % p.heads_q;
        const int64_t b = worst_index / row_elements / p.seqlen_q / p.heads_q;
        s << "; worst at b=" << b << " h=" << h << " s=" << i;
        if (row_elements > 1) s << " d=" << c;
        s << ": " << std::defaultfloat << worst_out << " vs " << worst_ref;
    }
    return s.str();
}

}  // namespace fmha
