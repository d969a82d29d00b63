// The mmabwd family: attention's backward on the matrix cores, three launches on one stream:
// preprocess (D, zeroed dQ accumulator), the main loop over key blocks, convert (dQ). One main
// loop per matrix instruction set, sharing its steps (mmabwd/block_steps.h) and workspace
// (mmabwd/workspace.h): wgmma on Hopper (mmabwd/wgmma_kernel.h), mma.sync on the archs before
// it (mmabwd/mma_sync_kernel.h, tiles in mmabwd/tiles.h), MFMA on CDNA at head dims 64 and 128
// (mmabwd/mfma_kernel.h; simtbwd serves d256 there).
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/bwd_params.h"
#include "kernels/config.h"
#include "kernels/mmabwd/around_loop.h"
#include "kernels/mmabwd/tiles.h"
#include "kernels/mmabwd/workspace.h"
#if defined(__HIP_PLATFORM_NVIDIA__)
#include "kernels/mmabwd/mma_sync_kernel.h"
#include "kernels/mmabwd/wgmma_kernel.h"
#include "platform/hip_on_cuda/tensor_map.h"
#else
#include "kernels/mmabwd/mfma_kernel.h"
#endif

namespace fmha {
namespace mmabwd {

template <class Config>
size_t workspace_size(const BwdParams& p) {
    return Workspace::bytes(p, Config::head_dim);
}

// Starts the main loop's kernel, a block per key tile (block_steps.h: KeyTile). kKernel is a
// template argument so that each kernel has its own static: the shared-memory attribute, set once.
template <auto kKernel, int kKeys, int kThreads, int kSharedBytes, class... Arguments>
hipError_t launch_loop(hipStream_t stream, const BwdParams& p, const Arguments&... arguments) {
#if defined(__HIP_PLATFORM_NVIDIA__)  // (CDNA's 64 KiB of LDS need no opt-in)
    static const hipError_t attribute = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes);
    if (attribute != hipSuccess) return attribute;
#endif
    kKernel<<<unsigned(KeyTile::count(p, kKeys)), kThreads, kSharedBytes, stream>>>(p, arguments...);
    return hipSuccess;
}

// The main loop on the arch's matrix instructions: deterministic or not, with the scoring
// options or without (each its own instance: wgmma_kernel.h, mma_sync_kernel.h, mfma_kernel.h).
template <class Config, bool kDeterministic, bool kOptions>
hipError_t main_loop(const BwdParams& p, hipStream_t stream) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    if constexpr (matrix_core(Config::arch) == MatrixCore::wgmma) {
        using T = WgmmaTiles<Config>;
        constexpr bool kBf16 = Config::dtype == DType::bf16;
        StepMaps maps{};  // (the problem's head_dim: TMA reads the kernel's columns past it as zeros)
        const bool packed = p.cu_seqlens_q;
        if (!hopper::encode_sequences_map(&maps.q, kBf16, p.q, p.q_strides, packed, p.total_q, p.batch, p.heads_q, p.seqlen_q,
                                          p.head_dim, T::kQueries, 1) ||
            !hopper::encode_sequences_map(&maps.d_o, kBf16, p.d_o, p.d_o_strides, packed, p.total_q, p.batch, p.heads_q,
                                          p.seqlen_q, p.head_dim, T::kQueries, 1) ||
            !hopper::encode_fp32_rows_map(&maps.dq_accum, Workspace::of(p).dq_accum, Workspace::rows(p), Config::head_dim,
                                          T::kQueries))
            return hipErrorInvalidValue;
        return launch_loop<&wgmma_kernel<Config, kDeterministic, kOptions>, T::kKeys, T::kThreads, T::kSharedBytes>(stream, p, maps);
    } else {
        static_assert(has_mma_sync(Config::arch), "mmabwd's main loop for this arch");
        using T = Tiles<Config>;
        return launch_loop<&mma_sync_kernel<Config, kDeterministic, kOptions>, T::kKeys, T::kThreads, T::kSharedBytes>(stream, p);
    }
#else
    static_assert(matrix_core(Config::arch) == MatrixCore::mfma, "mmabwd's main loop for this arch");
    using T = MfmaTiles<Config>;
    return launch_loop<&mfma_kernel<Config, kDeterministic, kOptions>, T::kKeys, T::kThreads, T::kSharedBytes>(stream, p);
#endif
}

// kWithDeterministic: the kernel has the deterministic main loop too (dq_turns.h), where the
// generator built it (unless setup.py --no-deterministic-backward); else it declines such calls.
template <class Config, bool kWithDeterministic = false>
hipError_t launch(const BwdParams& p, hipStream_t stream) {
    if (!supports<Config>(p, Family::mmabwd) || (p.deterministic && !kWithDeterministic)) return hipErrorInvalidValue;
    return launch_around<Config>(p, stream, [&] {
        const bool options = has_scoring_options(p);
        if (kWithDeterministic && p.deterministic)
            return options ? main_loop<Config, kWithDeterministic, true>(p, stream) : main_loop<Config, kWithDeterministic, false>(p, stream);
        return options ? main_loop<Config, false, true>(p, stream) : main_loop<Config, false, false>(p, stream);
    });
}

}  // namespace mmabwd
}  // namespace fmha
