// What the tensor-core prefill family takes beyond its tuple, for the heuristic table and the
// launcher alike (host code, no HIP).
#pragma once

namespace fmha {
namespace mmaprefill {

// The softmax takes each row's maximum of the unscaled scores and scales after, which is the
// maximum of the scaled scores only for a positive scale.
inline constexpr bool takes_scale(float scale) { return scale > 0.f; }

// The run-time options a launch asks for that the family's main loops may not apply (FwdParams;
// packed batches both loops take).
struct RunTimeOptions {
    bool softcap, alibi, dropout;
    int head_dim;  // the kernel's
};

// Dropout's state fits the main loops' registers up to this head_dim: d256's wgmma loop spills
// with it (docs/decisions.md, "Dropout"), so kernels past it are compiled without it.
inline constexpr int kDropoutMaxHeadDim = 128;

// Why the family declines a launch with these options: what its main loops (wgmma and MFMA
// alike) do not apply; nullptr where they take them. The one list that the launcher's check and
// the heuristic's reasons (fmha.exe -v, the C ABI's errors) both read.
inline const char* declined_option(const RunTimeOptions& o) {
    if (o.dropout && o.head_dim > kDropoutMaxHeadDim) return "the tensor-core family applies dropout up to head_dim 128";
    if (o.dropout && (o.softcap || o.alibi))
        return "the tensor-core family applies dropout without softcapping or ALiBi only (one more main-loop variant each)";
    return nullptr;
}

}  // namespace mmaprefill
}  // namespace fmha
