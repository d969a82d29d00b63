// What the tensor-core prefill family takes beyond its tuple, for the heuristic table and the
// launcher alike (host code, no HIP). Every run-time option of FwdParams both of its main loops
// apply (dropout, softcapping, ALiBi, packed and paged, element rows).
#pragma once

namespace fmha {
namespace mmaprefill {

// The softmax takes each row's maximum of the unscaled scores and scales after, which is the
// maximum of the scaled scores only for a positive scale.
inline constexpr bool takes_scale(float scale) { return scale > 0.f; }

}  // namespace mmaprefill
}  // namespace fmha
