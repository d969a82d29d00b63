// Which kernel runs a decode variant's launch: the one-step tensor-core items of 16 rows
// (staged_rows_kernel), the rest of the tensor-core variant (mma_attend_kernel), or the CUDA-core
// variants (attend_kernel).
#pragma once

#include "kernels/decode/cuda_core.h"
#include "kernels/decode/staged_rows.h"
#include "kernels/decode/tensor_core.h"

namespace fmha {
namespace decode {

template <class T, class Config>
constexpr auto attend_kernel_of() {
    if constexpr (T::kRowsAsM) return &staged_rows_kernel<T, Config>;
    else if constexpr (T::kWarpMma) return &mma_attend_kernel<T, Config>;
    else return &attend_kernel<T, Config>;
}

}  // namespace decode
}  // namespace fmha
