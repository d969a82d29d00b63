// Where the K or V rows of one (batch, KV head) live: rows a stride apart, or pages of a paged
// KV cache followed through the block table (FwdParams::block_table has the layout).
#pragma once

#include <hip/hip_runtime.h>

#include <cstdint>

#include "fmha/params.h"
#include "kernels/common/sequence.h"

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
    __device__ static KvRows of(const void* tensor, const TensorStrides& s, const int* cu_seqlens, const int* block_table,
                                int max_pages, int page_size, int64_t batch, int head) {
        const auto* elements = static_cast<const uint16_t*>(tensor);
        if (kMayBePaged && block_table)
            return {elements + int64_t(head) * s.head, block_table + batch * max_pages, int(__ffs(page_size)) - 1};
        return {elements + sequence_index(cu_seqlens, batch) * s.batch + int64_t(head) * s.head, nullptr, 0};
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

// The paging of a loop whose steps of n keys each lie on one page (n <= every page size, each
// step's first key a multiple of n): one table entry per step places all of its K and V rows.
// Two 32-bit words, so that a kernel short of registers can keep them in shared memory; without
// a block table every key is on "page" `batch`, whose stride is the batch stride.
struct StepPages {
    int entry;  // paged: the sequence's first table entry (batch x max_pages); else sequence_index()
    int shift;  // paged: log2(page_size); else 31 (key & (2^31 - 1) is the key)

    // Takes values, not the params struct: a reference to a kernel argument costs a stack copy on AMD.
    __device__ static StepPages of(const int* block_table, const int* cu_seqlens, int max_pages, int page_size,
                                   int64_t batch) {
        if (block_table) return {int(batch * max_pages), int(__ffs(page_size)) - 1};
        return {int(sequence_index(cu_seqlens, batch)), 31};
    }

    // The page that holds `key`.
    __device__ int page_of(const int* block_table, int key) const { return block_table ? block_table[entry + (key >> shift)] : entry; }

    // Element 0 of row `key` of a K or V tensor, on `page`; head_base: the tensor's element 0 of
    // the KV head; s: its strides (s.batch: between pages, when paged).
    __device__ static const uint16_t* row(const uint16_t* head_base, int page, int key, int shift, const TensorStrides& s) {
        return head_base + int64_t(page) * s.batch + int64_t(key & int((1u << shift) - 1u)) * s.row;
    }
};

}  // namespace fmha
