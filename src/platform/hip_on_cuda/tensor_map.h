// TMA tensor maps (Hopper) for [batch, heads, rows, head_dim] tensors whose rows are
// contiguous, encoded on the host through the CUDA runtime's driver entry point (so nothing
// links the driver library). NVIDIA builds only.
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "fmha/params.h"

namespace fmha {
namespace hopper {

using EncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                 const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                 CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled, looked up once per process; nullptr where the driver lacks it.
inline EncodeTiled encode_tiled() {
    static const EncodeTiled function = [] {
        void* entry = nullptr;
        cudaDriverEntryPointQueryResult found{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &entry, 12000, cudaEnableDefault, &found) !=
                cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
            return EncodeTiled(nullptr);
        return reinterpret_cast<EncodeTiled>(entry);
    }();
    return function;
}

// A map of the 16-bit tensor at `base` with `heads` heads of `rows` rows of `head_dim`
// elements, read in boxes of {64 columns, box_rows rows, box_heads heads, 1 batch} with
// 128-byte swizzling (the wgmma operand layout). Elements outside the tensor read as zeros.
// Returns false if the driver rejects it (e.g. strides not multiples of 16 bytes).
inline bool encode_tensor_map(CUtensorMap* map, bool bf16, const void* base, const TensorStrides& strides, int batch,
                              int heads, int rows, int head_dim, int box_rows, int box_heads) {
    const EncodeTiled encode = encode_tiled();
    if (!encode) return false;
    constexpr int kElementBytes = 2;
    const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
    const cuuint64_t byte_strides[3] = {cuuint64_t(strides.row) * kElementBytes, cuuint64_t(strides.head) * kElementBytes,
                                        cuuint64_t(strides.batch) * kElementBytes};
    const cuuint32_t box[4] = {64, cuuint32_t(box_rows), cuuint32_t(box_heads), 1};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    return encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, const_cast<void*>(base),
                  dims, byte_strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// encode_tensor_map of a tensor of `batch` sequences of `rows` rows, or, packed, of one sequence
// of its `total` rows (coordinates: the token's row, batch 0); the driver takes a batch stride
// past the rows.
inline bool encode_sequences_map(CUtensorMap* map, bool bf16, const void* base, TensorStrides strides, bool packed,
                                 int total, int batch, int heads, int rows, int head_dim, int box_rows, int box_heads) {
    if (packed) strides.batch = int64_t(total) * strides.row;
    return encode_tensor_map(map, bf16, base, strides, packed ? 1 : batch, heads, packed ? total : rows, head_dim, box_rows,
                             box_heads);
}

// A map of the fp32 matrix at `base`, `rows` rows of `columns` contiguous elements, in boxes of
// {32 columns, box_rows rows} with 128-byte swizzling: the backward's dQ accumulator, which
// tma_reduce_add_2d adds tiles into.
inline bool encode_fp32_rows_map(CUtensorMap* map, void* base, int64_t rows, int columns, int box_rows) {
    const EncodeTiled encode = encode_tiled();
    if (!encode) return false;
    const cuuint64_t dims[2] = {cuuint64_t(columns), cuuint64_t(rows)};
    const cuuint64_t byte_strides[1] = {cuuint64_t(columns) * 4};
    const cuuint32_t box[2] = {32, cuuint32_t(box_rows)};
    const cuuint32_t element_strides[2] = {1, 1};
    return encode(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, base, dims, byte_strides, box, element_strides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace hopper
}  // namespace fmha
