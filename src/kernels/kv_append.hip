// The KV-cache append's launch (fmha/kv_append.h): one kernel per dtype, built for every arch of
// the build as part of the runtime (not a catalogue entry: it has no tile shape to choose).
#include "kernels/kv_append.h"

namespace fmha {

hipError_t launch_kv_append(const KvAppendParams& params, DType dtype, hipStream_t stream) {
    const auto blocks = static_cast<unsigned>(kv_append_blocks(params));
    if (dtype == DType::bf16)
        kv_append_kernel<DType::bf16><<<blocks, kAppendThreads, 0, stream>>>(params);
    else
        kv_append_kernel<DType::fp16><<<blocks, kAppendThreads, 0, stream>>>(params);
    return hipGetLastError();
}

}  // namespace fmha
