// The tensor-core prefill family (mmaprefill): tiled attention on the matrix cores, for
// problems with many query rows per KV head. One main loop per matrix instruction set, each
// platform building its own: wgmma (Hopper) and MFMA (CDNA); the family's tile table, key
// tiles, schedule, mask and softmax are shared headers. Host side: checks, tensor maps, launch.
#pragma once

#include <hip/hip_runtime.h>

#include <string>

#include "kernels/common/schedule.h"
#include "kernels/common/scoring.h"
#include "kernels/config.h"
#include "kernels/mmaprefill/limits.h"

#if defined(__HIP_PLATFORM_NVIDIA__)
#include "kernels/mmaprefill/wgmma_kernel.h"
#include "platform/hip_on_cuda/tensor_map.h"
#else
#include "kernels/mmaprefill/mfma_kernel.h"
#endif

namespace fmha {
namespace mmaprefill {

// What this family needs beyond the kernel's tuple: a scale it takes, dropout its loop applies
// (mmaprefill/limits.h), and a tile count the 1-D grid holds.
template <class Config>
bool supports(const FwdParams& p, const PrefillTiling& tiling) {
    // Q and K/V packed alike, or K/V in pages beside packed or padded Q
    const bool packed_alike = p.block_table || (p.cu_seqlens_q == nullptr) == (p.cu_seqlens_kv == nullptr);
    const bool dropout_ok = p.dropout.p == 0.f || !dropout_declined(matrix_core(Config::arch) == MatrixCore::mfma, Config::head_dim);
    return params_match<Config>(p, Family::mmaprefill) && takes_scale(p.scale) && tiling.tiles <= INT32_MAX && packed_alike &&
           dropout_ok;
}

// How a launch's tiles are divided, in words, for describe(): the tiles, GQA packing, and the
// order (after `blocks` and the main loop's own words).
inline std::string describe_tiles(const PrefillTiling& t, int block_rows, unsigned blocks) {
    std::string text = std::to_string(t.tiles) + " tiles of " + std::to_string(block_rows) + " query rows on " +
                       std::to_string(blocks) + " blocks";
    if (t.packed) text += " (packed: " + std::to_string(t.query_blocks) + " query blocks over the batch's sequences)";
    if (t.heads_per_tile > 1)
        text += " (" + std::to_string(t.heads_per_tile) + " heads of a GQA group x " + std::to_string(t.rows_per_head) +
                " positions, sharing each K/V tile)";
    return text;
}
// claims: a block per multiprocessor claims tiles in index order as it frees up (the packed kernel).
inline std::string describe_order(const PrefillTiling& t, bool claims = false) {
    std::string text;
    if (t.section_heads)
        text += "; query blocks that see the most keys first, in sections of " + std::to_string(t.section_heads) +
                " KV heads";
    if (t.tiles_per_unit == 2) text += "; each block takes a query block and its mirror image in turn";
    if (claims) text += "; each block claims its next tile as it frees up";
    return text;
}

// The workspace's counter of claimed tiles (Hopper's packed launches: launch_blocks()).
inline constexpr size_t kClaimCounterBytes = sizeof(int);

#if defined(__HIP_PLATFORM_NVIDIA__)

template <class Config, bool kShortKeys, Variant kVariant>
using Traits = WgmmaTraits<Config, kShortKeys, kVariant>;

// An element-row K or V tensor as PagedTiles copies it: 2-byte elements; s.batch (between pages,
// or sequences) and the offsets inside a page or sequence of `rows` keys in 32 bits.
inline bool element_copies_fit(const void* base, const TensorStrides& s, int rows, int heads) {
    return reinterpret_cast<uintptr_t>(base) % 2 == 0 && s.batch <= INT32_MAX &&
           int64_t(rows) * s.row + int64_t(heads) * s.head <= INT32_MAX;
}

// Whether a launch reads a paged cache and asks for no run-time option but packed batches (the
// paged kernel's launches); whether it asks for packed batches alone (the packed kernel's);
// has_run_time_options() keeps the list of options.
inline bool pages_and_packing_only(const FwdParams& p) {
    FwdParams rest = p;
    rest.block_table = nullptr, rest.page_size = 0, rest.cu_seqlens_q = nullptr, rest.cu_seqlens_kv = nullptr;
    return p.block_table != nullptr && !has_run_time_options(rest);
}
inline bool packing_only(const FwdParams& p) {
    FwdParams rest = p;
    rest.cu_seqlens_q = nullptr, rest.cu_seqlens_kv = nullptr;
    return p.cu_seqlens_q != nullptr && !has_run_time_options(rest);
}

// Key ranges up to this many keys take the tile table's short-keys shapes; beyond, those are
// level or slower (docs/mmaprefill.md).
inline constexpr int kShortKeysMax = 2048;

// Calls fn(Traits{}) with the kernel the launch takes (tiles.h, Variant): the plain one where it
// asks for no run-time option; the packed one where it asks for packed batches alone, of many
// tiles (claims_pay()), and packed_options where such a batch also asks for scoring options or
// dropout; the paged one where it reads a paged cache with no scoring option, no
// dropout and no element rows (packed or not); the options' one where it asks for some
// (packed, softcapping, ALiBi, dropout) and the copies' where it also reads a paged cache or
// element rows, or where the options' tile is the copies' (then no kernel of options alone is
// built); and the table's short-keys tile shape where the key range is short and the table has
// a distinct one.
template <class Config, Variant kVariant, class Fn>
auto with_shape(const FwdParams& p, Fn&& fn) {
    if constexpr (!(Traits<Config, true, kVariant>::kShape == Traits<Config, false, kVariant>::kShape)) {
        if (p.seqlen_kv <= kShortKeysMax) return fn(Traits<Config, true, kVariant>{});
    }
    return fn(Traits<Config, false, kVariant>{});
}
template <class Config>
bool claims_pay(const FwdParams& p);
template <class Config, class Fn>
auto with_traits(const FwdParams& p, Fn&& fn) {
    if (!has_run_time_options(p)) return with_shape<Config, Variant::plain>(p, fn);
    if (claims_pay<Config>(p)) {
        if (packing_only(p)) return with_shape<Config, Variant::packed>(p, fn);
        return with_shape<Config, Variant::packed_options>(p, fn);
    }
    if constexpr (has_paged_kernel(Config::head_dim, Config::mask == Mask::causal)) {
        if (pages_and_packing_only(p)) return with_shape<Config, Variant::paged>(p, fn);
    }
    if constexpr (!(Traits<Config, false, Variant::options>::kShape == Traits<Config, false, Variant::copies>::kShape)) {
        if (!p.block_table && !element_rows(p.head_dim)) return with_shape<Config, Variant::options>(p, fn);
    }
    return with_shape<Config, Variant::copies>(p, fn);
}

// The grid. Launches whose rows see few key tiles (short sequences) are persistent, one block
// per multiprocessor (the kernel's shared memory allows no more) taking units of work in turn,
// so that a block loads its next tile while it finishes the last one; causal ones pair each
// query block with its mirror image so that the units cost alike. Elsewhere a block per tile,
// which the hardware hands to multiprocessors as they free up: better balanced where tiles are
// long and of unequal length. But such a block's start and end wait on memory with nothing to
// overlap, a cost per tile that packed batches of short sequences pay many times: packed launches
// of many tiles (kClaimMinWaves a multiprocessor) run a packed kernel, a block per multiprocessor
// claiming its next tile, in the same order, from a counter in the workspace (docs/mmaprefill.md);
// fewer take the options' kernel, whose grid needs no counter zeroed first. Paged and element-row
// launches do not claim: their producers have no registers for it.
inline constexpr int kPersistentMaxQueryBlocks = 8;
inline constexpr int kClaimMinWaves = 8;
inline unsigned launch_blocks(const PrefillTiling& tiling, int multiprocessors, bool claims) {
    return unsigned((tiling.persistent || claims) && tiling.units > multiprocessors ? multiprocessors : tiling.units);
}

template <class Config, class T>
PrefillTiling tiling_of(const FwdParams& p, T) {
    return PrefillTiling::of(p, T::kBlockRows, Config::mask == Mask::causal, kPersistentMaxQueryBlocks,
                             multiprocessor_count());
}

template <class Config>
bool claims_pay(const FwdParams& p) {
    if (p.cu_seqlens_q == nullptr || p.block_table != nullptr || element_rows(p.head_dim)) return false;
    if (p.workspace == nullptr || p.workspace_bytes < kClaimCounterBytes) return false;
    const PrefillTiling t = tiling_of<Config>(p, Traits<Config, false, Variant::packed>{});
    return t.units >= int64_t(kClaimMinWaves) * multiprocessor_count();
}

template <class Config>
hipError_t launch(const FwdParams& p, hipStream_t stream) {
    static_assert(matrix_core(Config::arch) == MatrixCore::wgmma, "the family's main loop for this arch");
    return with_traits<Config>(p, [&](auto traits) {
        using T = decltype(traits);
        const PrefillTiling tiling = tiling_of<Config>(p, traits);
        if (!supports<Config>(p, tiling)) return hipErrorInvalidValue;
        const bool bf16 = Config::dtype == DType::bf16;
        // Packed tensors are one batch of all their rows (TileWork's coordinates). Rows are p.head_dim wide: TMA zero-fills a smaller
        // head_dim's columns up to the kernel's and leaves them out of the output's stores.
        auto map = [&](CUtensorMap* m, const void* base, TensorStrides s, const int* cu_seqlens, int total, int heads,
                       int rows, int box_rows, int box_heads) {
            return hopper::encode_sequences_map(m, bf16, base, s, cu_seqlens, total, p.batch, heads, rows, p.head_dim,
                                                box_rows, box_heads);
        };
        TensorMaps maps{};  // element rows: none, the warpgroups copy Q, K and V (paged_tiles.h)
        if (element_rows(p.head_dim)) {
            const int rows = p.block_table ? p.page_size : p.seqlen_kv;
            if (!element_copies_fit(p.k, p.k_strides, rows, p.heads_kv) || !element_copies_fit(p.v, p.v_strides, rows, p.heads_kv))
                return hipErrorInvalidValue;
        } else {
            if (!map(&maps.q, p.q, p.q_strides, p.cu_seqlens_q, p.total_q, p.heads_q, p.seqlen_q, tiling.rows_per_head,
                     tiling.heads_per_tile) ||
                !map(&maps.o, p.o, p.o_strides, p.cu_seqlens_q, p.total_q, p.heads_q, p.seqlen_q, wgmma::kRows, 1))
                return hipErrorInvalidValue;
            if (p.block_table) {  // maps of the caches' pages, {head_dim, page_size, heads, pages} (paged_tiles.h)
                // The pool's page count is not a parameter: the block table's entries name the
                // pages read, and page -1 lies outside (zeros).
                constexpr int kPagesBound = INT32_MAX;
                auto pages_map = [&](CUtensorMap* m, const void* base, const TensorStrides& s, int box_rows) {
                    return hopper::encode_tensor_map(m, bf16, base, s, kPagesBound, p.heads_kv, p.page_size, p.head_dim, box_rows, 1);
                };
                const int rows = T::Pages::box_rows(p.page_size), group = T::Pages::kGroupRows;
                if (!pages_map(&maps.k, p.k, p.k_strides, rows) ||
                    !pages_map(&maps.v, p.v, p.v_strides, rows) || !pages_map(&maps.k_groups, p.k, p.k_strides, group) ||
                    !pages_map(&maps.v_groups, p.v, p.v_strides, group) || !pages_map(&maps.k_rows, p.k, p.k_strides, 1) ||
                    !pages_map(&maps.v_rows, p.v, p.v_strides, 1))
                    return hipErrorInvalidValue;
            } else if (!map(&maps.k, p.k, p.k_strides, p.cu_seqlens_kv, p.total_kv, p.heads_kv, p.seqlen_kv, T::kBlockKeys, 1) ||
                       !map(&maps.v, p.v, p.v_strides, p.cu_seqlens_kv, p.total_kv, p.heads_kv, p.seqlen_kv, T::kBlockKeys, 1)) {
                return hipErrorInvalidValue;
            }
        }
        auto* const kernel = &wgmma_kernel<Config, T::kShortKeys, T::kVariant>;
        static const hipError_t attribute =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSharedBytes);
        if (attribute != hipSuccess) return attribute;
        const int multiprocessors = multiprocessor_count();
        if (multiprocessors == 0) return hipErrorNoDevice;
        if constexpr (T::kClaims) {
            const hipError_t zeroed = hipMemsetAsync(p.workspace, 0, kClaimCounterBytes, stream);
            if (zeroed != hipSuccess) return zeroed;
        }
        kernel<<<launch_blocks(tiling, multiprocessors, T::kClaims), T::kThreads, T::kSharedBytes, stream>>>(p, tiling, maps);
        return hipGetLastError();
    });
}

// How launch() divides the work, in words (fmha.exe -v).
template <class Config>
std::string describe(const FwdParams& p) {
    return with_traits<Config>(p, [&](auto traits) {
        using T = decltype(traits);
        const PrefillTiling t = tiling_of<Config>(p, traits);
        return describe_tiles(t, T::kBlockRows, launch_blocks(t, multiprocessor_count(), T::kClaims)) + "; 1 TMA producer + " +
               std::to_string(T::kConsumers) + " wgmma consumer warpgroups of 64 rows; keys in tiles of " +
               std::to_string(T::kBlockKeys) + " through a " + std::to_string(T::kStages) +
               "-stage shared-memory ring" + describe_order(t, T::kClaims) +
               (T::kCopies    ? "; the kernel with the serving options (packed batches, softcapping, ALiBi, dropout) and the producer's copies (paged KV, element rows)"
                : T::kPages   ? "; the paged kernel (packed batches, no scoring option, no dropout)"
                : T::kClaims && T::kOptions ? "; the packed kernel with the serving options (softcapping, ALiBi, dropout)"
                : T::kClaims  ? "; the packed kernel (no other option)"
                : T::kServing ? "; the kernel with the serving options (packed batches, softcapping, ALiBi, dropout)"
                              : "") +
               (!p.block_table ? ""
                               : "; K/V tiles on a grid of pages: TMA boxes of " + std::to_string(T::Pages::box_rows(p.page_size)) +
                                     " keys from " + std::to_string(T::Pages::issuers(__builtin_ctz(p.page_size))) +
                                     " producer thread(s), a part past a sequence's keys in boxes of " +
                                     std::to_string(T::Pages::kGroupRows) + " and of 1 (zeros past its keys)") +
               (element_rows(p.head_dim) ? "; element rows (head_dim " + std::to_string(p.head_dim) +
                                               " is not a multiple of 8): the producer warpgroup copies K and V, each consumer its Q rows, element by element"
                                         : "");
    });
}

#else  // AMD

template <class Config>
using Traits = MfmaTraits<Config>;

// One block per tile, dispatched in the tile order (a grid past the runtime's limit of 2^32 - 1
// threads loops over the tiles). No persistent grid: without a producer wave there is no next
// tile's load to overlap with this one's epilogue, and a CU holds several blocks where LDS and
// registers allow.
template <class Config>
PrefillTiling tiling_of(const FwdParams& p) {
    return PrefillTiling::of(p, Traits<Config>::kBlockRows, Config::mask == Mask::causal, 0, 0);
}
template <class Config>
unsigned launch_blocks(const PrefillTiling& tiling) {
    return grid_blocks(tiling.units, 1, Traits<Config>::kThreads);
}

template <class Config>
hipError_t launch(const FwdParams& p, hipStream_t stream) {
    static_assert(matrix_core(Config::arch) == MatrixCore::mfma, "the family's main loop for this arch");
    const PrefillTiling tiling = tiling_of<Config>(p);
    if (!supports<Config>(p, tiling)) return hipErrorInvalidValue;
    mfma_kernel<Config><<<launch_blocks<Config>(tiling), Traits<Config>::kThreads, 0, stream>>>(p, tiling);
    return hipGetLastError();
}

// How launch() divides the work, in words (fmha.exe -v).
template <class Config>
std::string describe(const FwdParams& p) {
    using T = Traits<Config>;
    const PrefillTiling t = tiling_of<Config>(p);
    return describe_tiles(t, T::kBlockRows, launch_blocks<Config>(t)) + "; " + std::to_string(T::kConsumers) +
           " MFMA waves of 32 rows; keys in tiles of " + std::to_string(T::kBlockKeys) + " through " +
           "two LDS stages of K and " + std::to_string(T::kVStages) + " of V^T" + describe_order(t);
}
#endif

// The family's workspace: on Hopper, packed launches' counter of claimed tiles (launch_blocks),
// asked for by every plan: a plan is made from the problem's layout, a launch takes the caller's
// strides, and a dense call of one query position per sequence has a packed layout's (params.h:
// Q's batch stride is its row stride).
template <class Config>
size_t workspace_size(const FwdParams&) {
    return matrix_core(Config::arch) == MatrixCore::wgmma ? kClaimCounterBytes : 0;
}

}  // namespace mmaprefill
}  // namespace fmha
