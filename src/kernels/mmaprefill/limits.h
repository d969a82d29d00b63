// What the tensor-core prefill family takes beyond its tuple, for the heuristic table and the
// launcher alike (host code, no HIP). Both of its main loops apply every run-time option of
// FwdParams (dropout, softcapping, ALiBi, packed and paged, element rows), but for the limit below.
#pragma once

namespace fmha {
namespace mmaprefill {

// The softmax takes each row's maximum of the unscaled scores and scales after, which is the
// maximum of the scaled scores only for a positive scale.
inline constexpr bool takes_scale(float scale) { return scale > 0.f; }

// Dropout's Philox state fits the MFMA loop's registers up to this head_dim: its d256 kernels
// spill two VGPRs with it on gfx908 (docs/decisions.md, "Dropout at every head_dim"), so they
// are compiled without it. The wgmma loop takes dropout at every head_dim.
inline constexpr int kMfmaDropoutMaxHeadDim = 128;
inline constexpr bool mfma_takes_dropout(int kernel_head_dim) { return kernel_head_dim <= kMfmaDropoutMaxHeadDim; }

// Why a kernel of the family (on the MFMA loop or not, of kernel_head_dim) declines dropout, or
// nullptr: the one rule the launcher's check and the heuristic's reasons both read.
inline const char* dropout_declined(bool mfma, int kernel_head_dim) {
    static_assert(kMfmaDropoutMaxHeadDim == 128, "the reason names the limit");
    return mfma && !mfma_takes_dropout(kernel_head_dim) ? "the tensor-core family's MFMA loop applies dropout up to head_dim 128"
                                                        : nullptr;
}

}  // namespace mmaprefill
}  // namespace fmha
