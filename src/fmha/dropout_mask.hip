// fmha_dropout_mask's kernel: one thread per element, one Philox call each (a debugging path).
#include "fmha/dropout_mask.h"

#include <hip/hip_runtime.h>

#include "kernels/common/dropout.h"

namespace fmha {
namespace {

__global__ void dropout_mask_kernel(const DropoutParams params, int seqlen_q, int seqlen_kv, int64_t elements,
                                    uint8_t* mask) {
    const Dropout dropout = Dropout::of(params);
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t n = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; n < elements; n += stride) {
        const int j = int(n % seqlen_kv);
        const int64_t row = n / seqlen_kv;  // (b * heads_q + h) * seqlen_q + i
        mask[n] = dropout.keeps(dropout.row(row / seqlen_q, int(row % seqlen_q)), j);
    }
}

}  // namespace

hipError_t launch_dropout_mask(const DropoutParams& dropout, int batch, int heads_q, int seqlen_q, int seqlen_kv,
                               uint8_t* mask, hipStream_t stream) {
    const int64_t elements = int64_t(batch) * heads_q * seqlen_q * seqlen_kv;
    constexpr int kThreads = 256;
    const int64_t blocks = (elements + kThreads - 1) / kThreads;
    dropout_mask_kernel<<<unsigned(blocks < 65536 ? blocks : 65536), kThreads, 0, stream>>>(dropout, seqlen_q, seqlen_kv,
                                                                                           elements, mask);
    return hipGetLastError();
}

}  // namespace fmha
