// Compile-time view of one catalogue tuple, and what every kernel family needs from it.
#pragma once

#include <hip/hip_runtime.h>

#include "fmha/params.h"
#include "kernels/common/element_rows.h"
#include "fmha_catalogue.h"

namespace fmha {

template <DType kDType, int kHeadDim, HeadsKind kHeads, Mask kMask, Arch kArch>
struct KernelConfig {
    static constexpr DType dtype = kDType;
    static constexpr int head_dim = kHeadDim;
    static constexpr HeadsKind heads = kHeads;
    static constexpr Mask mask = kMask;
    static constexpr Arch arch = kArch;
};

// The KV head that query head h reads. The heads kind is a compile-time fact so MHA and MQA
// skip the division.
// (Takes values, not the params struct: a reference to a kernel argument forces a stack copy.)
template <HeadsKind kHeads>
__device__ inline int kv_head_of(int head_q, int heads_q, int heads_kv) {
    if constexpr (kHeads == HeadsKind::mha) return head_q;
    else if constexpr (kHeads == HeadsKind::mqa) return 0;
    else return head_q / (heads_q / heads_kv);
}

// Whether a kernel of `family` built for `kernel_head_dim` computes a problem's `head_dim`: the
// same, or a smaller one where the family zero-fills the columns past it: a multiple of 8, or
// any where it reads element rows (kFamilyHeadDimRules). The heuristic and the launchers both
// ask this.
constexpr bool head_dim_fits(Family family, int kernel_head_dim, int head_dim) {
    const HeadDimRule rule = kFamilyHeadDimRules[static_cast<int>(family)];
    if (element_rows(head_dim) && !rule.element_rows) return false;
    return head_dim == kernel_head_dim || (rule.serves_smaller && head_dim > 0 && head_dim < kernel_head_dim);
}

// Checks a kernel family's launcher runs before touching memory: the runtime problem must
// match the kernel's compile-time tuple, and rows must allow 16-byte vector access (element
// rows: 2-byte elements). Dropout only the tensor-core prefill family applies (its seed and
// offset in device memory).
template <class Config>
inline bool params_match(const FwdParams& p, Family family) {
    const bool head_dim_ok = head_dim_fits(family, Config::head_dim, p.head_dim);
    const bool heads_ok = Config::heads == HeadsKind::mha   ? p.heads_kv == p.heads_q
                          : Config::heads == HeadsKind::mqa ? p.heads_kv == 1
                                                            : p.heads_kv > 0 && p.heads_q % p.heads_kv == 0;
    const auto aligned = [&](const void* ptr, const TensorStrides& s) {
        if (element_rows(p.head_dim)) return reinterpret_cast<uintptr_t>(ptr) % 2 == 0;
        return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && s.batch % 8 == 0 && s.head % 8 == 0 && s.row % 8 == 0;
    };
    return heads_ok && head_dim_ok && p.batch > 0 && p.heads_q > 0 && p.seqlen_q > 0 &&
           p.seqlen_kv > 0 && p.window.left >= 0 && p.window.right >= 0 && aligned(p.q, p.q_strides) && aligned(p.k, p.k_strides) &&
           aligned(p.v, p.v_strides) && aligned(p.o, p.o_strides) &&
           (p.dropout.p == 0.f || (family == Family::mmaprefill && p.dropout.p > 0.f && p.dropout.p < 1.f &&
                                   p.dropout.seed_offset != nullptr));
}

}  // namespace fmha
