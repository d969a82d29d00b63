// The mmabwd family: attention's backward on the matrix cores, three launches on one stream:
// preprocess (D, zeroed dQ accumulator), the main loop over key blocks (mmabwd/mma_sync_kernel.h),
// convert (dQ). Tile sizes: mmabwd/tiles.h; workspace: mmabwd/workspace.h.
//
// NVIDIA runs the loop on mma.sync (sm_80 on; Hopper's wgmma and TMA are the next step). CDNA's
// place is the same loop on MFMA (mma/mfma.h: its accumulators are already the next product's
// B operand, as mma.sync's C tiles are A operands here); the generator skips AMD archs until then.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/bwd_params.h"
#include "kernels/config.h"
#include "kernels/mmabwd/mma_sync_kernel.h"
#include "kernels/mmabwd/tiles.h"
#include "kernels/mmabwd/workspace.h"

namespace fmha {
namespace mmabwd {

template <class Config>
bool supports(const BwdParams& p) {
    const auto aligned = [](const void* ptr, const TensorStrides& s) {
        return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && s.batch % 8 == 0 && s.head % 8 == 0 && s.row % 8 == 0;
    };
    const bool heads_ok = p.heads_kv > 0 && p.heads_q % p.heads_kv == 0;
    return heads_ok && p.head_dim == Config::head_dim && p.batch > 0 && p.batch <= 65535 && p.heads_kv <= 65535 &&
           p.seqlen_q > 0 && p.seqlen_kv > 0 && p.window.left >= 0 && p.window.right >= 0 && p.lse && p.workspace &&
           (p.dropout.p == 0.f || (p.dropout.p > 0.f && p.dropout.p < 1.f && p.dropout.seed_offset)) &&
           p.workspace_bytes >= Workspace::bytes(p) && aligned(p.q, p.q_strides) && aligned(p.k, p.k_strides) &&
           aligned(p.v, p.v_strides) && aligned(p.o, p.o_strides) && aligned(p.d_o, p.d_o_strides) &&
           aligned(p.dq, p.dq_strides) && aligned(p.dk, p.dk_strides) && aligned(p.dv, p.dv_strides);
}

template <class Config>
size_t workspace_size(const BwdParams& p) {
    return Workspace::bytes(p);
}

template <class Config>
hipError_t launch(const BwdParams& p, hipStream_t stream) {
    static_assert(has_mma_sync(Config::arch), "mmabwd's main loop for this arch");
    using T = Tiles<Config>;
    if (!supports<Config>(p)) return hipErrorInvalidValue;
    constexpr int kRowThreads = 256;
    const int64_t row_threads = Workspace::rows(p) * (Config::head_dim / 8);
    const unsigned row_blocks = unsigned((row_threads + kRowThreads - 1) / kRowThreads);
    preprocess_kernel<Config><<<row_blocks, kRowThreads, 0, stream>>>(p);

    auto* const kernel = &mma_sync_kernel<Config>;
    static const hipError_t attribute =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSharedBytes);
    if (attribute != hipSuccess) return attribute;
    const dim3 grid((p.seqlen_kv + T::kKeys - 1) / T::kKeys, p.heads_kv, p.batch);
    kernel<<<grid, T::kThreads, T::kSharedBytes, stream>>>(p);

    convert_kernel<Config><<<row_blocks, kRowThreads, 0, stream>>>(p);
    return hipGetLastError();
}

}  // namespace mmabwd
}  // namespace fmha
