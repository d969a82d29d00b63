// Device memory for one problem: Q, K, V and O in the problem's layout, random-filled and
// poisoned, with the FwdParams that point into them. Used by fmha.exe and the GPU tests.
#pragma once

#include <hip/hip_runtime_api.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fmha/kernel_table.h"
#include "fmha/params.h"
#include "fmha/problem.h"

namespace fmha {

// A failure of the machine rather than of the input: no GPU, no memory, a runtime error.
struct EnvironmentError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Throws EnvironmentError("what: <runtime's message>") unless err is hipSuccess.
void check(hipError_t err, const std::string& what);

class DeviceBuffer {
  public:
    explicit DeviceBuffer(size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    template <class T = void>
    T* get() const { return static_cast<T*>(ptr_); }
    size_t bytes() const { return bytes_; }

  private:
    void* ptr_ = nullptr;
    size_t bytes_;
};

// Per-sequence lengths (SeqLens) on the device, and their cumulative sums (a packed batch's
// cu_seqlens, int32 [batch + 1]); null pointers when the lengths are fixed.
class DeviceLengths {
  public:
    explicit DeviceLengths(const SeqLens& lens);
    const int* q() const { return buffer_.get<int>(); }
    const int* kv() const { return q() ? q() + batch_ : nullptr; }
    const int* cu_q() const { return q() ? q() + 2 * batch_ : nullptr; }
    const int* cu_kv() const { return q() ? q() + 3 * batch_ + 1 : nullptr; }
    const SeqLens& host() const { return host_; }

  private:
    int batch_;
    SeqLens host_;
    DeviceBuffer buffer_;  // [q lengths..., kv lengths..., cu_seqlens_q..., cu_seqlens_kv...]
};

// The cumulative sums of lengths: [0, l0, l0 + l1, ...].
std::vector<int> cumulative(const std::vector<int>& lengths);

struct TensorSet {
    explicit TensorSet(const Problem& p);
    // Uniform random Q (in [-q_range, q_range)), K and V (in [-1, 1)); O poisoned with NaN.
    // Paged: a random block table (pages shuffled, so that a contiguous assumption fails)
    // and the spare page NaN.
    void fill(const Problem& p, uint64_t seed, float q_range = 1.f);
    void poison_output();  // every element of O (and of the log-sum-exps, if requested) NaN
    // Paged: the table's slots past each sequence's pages point at the NaN spare page, and its
    // last page's rows past its keys are NaN. Packed: the sequences' places (cu_seqlens; a paged
    // cache's keys by their lengths).
    void set_lengths(const DeviceLengths& lengths);
    // Allocates the workspace the kernel asks for with these params (call after set_lengths).
    void prepare_for(const KernelEntry& kernel);
    // Asks the kernel for each row's log-sum-exp (FwdParams::lse), in a buffer poisoned like O.
    void request_lse();
    // The log-sum-exps on the host, [batch, heads_q, seqlen_q] (request_lse() first).
    std::vector<float> copy_lse() const;

    // K or V in logical [batch, heads_kv, seqlen_kv, head_dim] order on the host, gathered
    // through the block table where paged.
    std::vector<uint16_t> logical_k() const { return logical_kv(params.k, params.k_strides); }
    std::vector<uint16_t> logical_v() const { return logical_kv(params.v, params.v_strides); }

    Problem problem;
    BufferSizes sizes;
    DeviceBuffer qkv, k, v, o;  // packed QKV: all three in qkv; paged: K and V are the page pools
    std::unique_ptr<DeviceBuffer> workspace;
    std::unique_ptr<DeviceBuffer> lse;  // fp32 [batch, heads_q, seqlen_q], when requested
    DeviceBuffer alibi_slopes;          // fp32 [heads_q], with ALiBi
    DeviceBuffer block_table;           // int32 [batch, max_pages_per_seq], paged
    DeviceBuffer dropout_seed_offset;   // int64 {seed, offset} in device memory, with dropout
    std::vector<int> host_block_table;  // its contents
    int spare_page = -1;                // the page no sequence's keys use (paged)
    FwdParams params;

  private:
    std::vector<uint16_t> logical_kv(const void* base, const TensorStrides& s) const;
    void upload_block_table();
};

// The backward's tensors for the forward of a TensorSet (which must have requested its LSE): dO
// random, dQ, dK, dV poisoned with NaN, each contiguous [batch, heads, seq, head_dim], with the
// BwdParams that read the forward's Q, K, V, O and LSE.
struct GradientSet {
    GradientSet(const TensorSet& forward, uint64_t seed);
    void poison();  // every element of dQ, dK and dV NaN
    // Allocates the workspace the kernel asks for.
    void prepare_for(const BwdKernelEntry& kernel);

    DeviceBuffer d_o, dq, dk, dv;
    std::unique_ptr<DeviceBuffer> workspace;
    BwdParams params;
};

// The [batch, heads, seq, head_dim] tensor at `base` (device) with strides `s`, copied to the
// host in logical order.
std::vector<uint16_t> copy_logical(const void* base, const TensorStrides& s, int batch, int heads, int seq,
                                   int head_dim);

}  // namespace fmha
