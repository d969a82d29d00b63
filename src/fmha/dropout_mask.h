// The dropout mask the kernels apply, written out for tests and debugging (fmha_dropout_mask).
#pragma once

#include <hip/hip_runtime_api.h>

#include <cstdint>

#include "fmha/params.h"

namespace fmha {

// uint8 [batch, heads_q, seqlen_q, seqlen_kv] contiguous: 1 where element (i, j) of a padded
// batch's head is kept (kernels/common/dropout.h).
hipError_t launch_dropout_mask(const DropoutParams& dropout, int batch, int heads_q, int seqlen_q, int seqlen_kv,
                               uint8_t* mask, hipStream_t stream);

}  // namespace fmha
