// Where the K or V rows of one (batch, KV head) live: rows a stride apart, or pages of a paged
// KV cache followed through the block table (FwdParams::block_table has the layout).
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "fmha/params.h"

namespace fmha {

// kMayBePaged: the kernel follows a block table where the launch gives one (a uniform branch
// per row); false: rows a stride apart, the code of a kernel without paging. The strides are
// passed at each use rather than held: the decode loops keep fewer registers so (ptxas -v).
template <bool kMayBePaged>
struct KvRows {
    const uint16_t* base;  // row 0 of the (batch, head); paged: the head's row 0 of page 0
    const int* pages;      // the sequence's row of the block table; nullptr: not paged
    int page_shift;        // log2(page_size)

    // Takes values, not the params struct: a reference to a kernel argument costs a stack copy on AMD.
    __device__ static KvRows of(const void* tensor, const TensorStrides& s, const int* block_table, int max_pages,
                                int page_size, int64_t batch, int head) {
        const auto* elements = static_cast<const uint16_t*>(tensor);
        if (kMayBePaged && block_table)
            return {elements + int64_t(head) * s.head, block_table + batch * max_pages, int(__ffs(page_size)) - 1};
        return {elements + batch * s.batch + int64_t(head) * s.head, nullptr, 0};
    }

    // Element 0 of key row `key`; s: the tensor's strides (s.batch: between pages, when paged).
    __device__ const uint16_t* row(int key, const TensorStrides& s) const {
        if constexpr (kMayBePaged) {
            if (pages) {
                const int64_t page = pages[key >> page_shift];
                return base + page * s.batch + int64_t(key & ((1 << page_shift) - 1)) * s.row;
            }
        }
        return base + int64_t(key) * s.row;
    }
};

}  // namespace fmha
