// The tensor-core prefill main loop on Hopper (wgmma, TMA, mbarriers; sm_90a).
//
// A block takes work tiles of query rows in turn (one, or units of them on a persistent grid:
// common/tile_schedule.h). For a tile, it walks the keys its rows see in tiles of kBlockKeys,
// from the last key tile back to the first, so that the tiles needing the causal mask come
// first and every tile ends inside the sequence (keys at negative positions read as zeros and
// are masked); a consumer skips the key tiles none of its rows sees.
// Warpgroup 0 is the producer: one thread issues TMA loads of each work tile's Q and of K and V
// into a kStages-deep ring of shared-memory tiles, each completing on a "full" barrier and
// given back on an "empty" one; it runs ahead into the next work tile while the consumers
// finish the current one. A paged KV cache's tiles come by TMA boxes per page, from the first
// thread of up to four producer warps; element rows (a head_dim that is not a multiple of 8) the
// warpgroup copies element by element, K and V, the consumers their own Q rows (paged_tiles.h).
// Warpgroups 1.. are consumers of 64 query rows each:
//   S = Q.K^T (wgmma, both from shared memory) -> mask -> online softmax (fp32, exp2) ->
//   P (16-bit, in registers: the accumulator layout is the A-operand layout) -> O += P.V.
// Two overlaps hide the softmax under tensor-core work (docs/mmaprefill.md):
// - inside a warpgroup, key tile j's Q.K^T and tile j-1's P.V are issued together, and tile
//   j's softmax runs while P.V runs;
// - across warpgroups, named barriers hand the tensor cores from one consumer to the next
//   (each issues its two GEMMs in turn), so one's softmax runs under the others' GEMMs.
// The epilogue normalises O, stages it in shared memory (its own buffer where it fits, else
// the warpgroup's Q rows) and writes whole 16-byte chunks of the rows that exist; the
// natural-log LSE of each row goes to p.lse if asked. Dropout (the serving kernel's option:
// common/dropout.h) zeroes probabilities after the softmax has summed them, and the epilogue
// scales O by 1 / (1 - p).
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/dropout.h"
#include "kernels/common/element_rows.h"
#include "kernels/common/fragment_softmax.h"
#include "kernels/common/memory.h"
#include "kernels/common/rows.h"
#include "kernels/common/scoring.h"
#include "kernels/common/tile_schedule.h"
#include "kernels/config.h"
#include "kernels/mma/wgmma.h"
#include "kernels/mmaprefill/key_tiles.h"
#include "kernels/mmaprefill/limits.h"
#include "kernels/mmaprefill/paged_tiles.h"
#include "kernels/mmaprefill/tiles.h"
#include "platform/hip_on_cuda/hopper.h"

namespace fmha {
namespace mmaprefill {

// with_scoring's softcapping flag for bf16 launches whose capped scores need no running maximum
// (BoundedScores): no maximum per score and no rescale of O per key tile.
using BoundedCap = std::integral_constant<int, 2>;
template <class Capped>
inline constexpr bool kBoundedCap = std::is_same_v<Capped, BoundedCap>;

// kShortKeys: the tile table's shape for launches whose rows see few keys; kVariant (tiles.h):
// kServing, the kernel takes packed batches; kOptions, the scoring options and dropout; kPages,
// its producer loads a paged cache's tiles (the paged kernel: always); kCopies, it also copies
// element rows. Launches without any option run the plain kernel, whose code does not change
// with them.
template <class Config, bool kShortKeys_, Variant kVariant_>
struct WgmmaTraits {
    static constexpr TileShape kShape = tile_shape<MatrixCore::wgmma>(Config::head_dim, Config::mask == Mask::causal,
                                                                      Config::dtype, kShortKeys_, kVariant_);
    static constexpr bool kShortKeys = kShortKeys_;
    static constexpr Variant kVariant = kVariant_;
    static constexpr bool kServing = kVariant_ != Variant::plain;
    static constexpr bool kOptions = kVariant_ == Variant::options || kVariant_ == Variant::copies || kVariant_ == Variant::packed_options;
    static constexpr bool kPages = kVariant_ == Variant::paged || kVariant_ == Variant::copies;
    static constexpr bool kCopies = kVariant_ == Variant::copies;
    static constexpr bool kClaims = kVariant_ == Variant::packed || kVariant_ == Variant::packed_options;  // blocks claim their tiles (produce())
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kConsumers = kShape.consumers;
    static constexpr int kBlockRows = kConsumers * wgmma::kRows;
    static constexpr int kBlockKeys = kShape.block_keys;
    static constexpr int kStages = kShape.stages;
    static constexpr int kThreads = (kConsumers + 1) * wgmma::kThreads;
    static constexpr int kAtoms = (kHeadDim + wgmma::kAtomColumns - 1) / wgmma::kAtomColumns;
    using Pages = PagedTiles<kBlockKeys, kHeadDim>;  // a paged cache's and element rows' loads

    // Shared memory: Q, the K ring, the V ring (1024-byte aligned swizzle atoms), barriers, and
    // the output's staging rows where they fit (else they are Q's).
    static constexpr int kSharedLimit = shared_bytes(Config::arch);
    static constexpr int kAlignment = 1024;  // of the dynamic shared memory we use
    static constexpr int kQBytes = wgmma::tile_bytes(kBlockRows, kHeadDim);
    static constexpr int kKVBytes = wgmma::tile_bytes(kBlockKeys, kHeadDim);
    static constexpr int kKOffset = kQBytes;
    static constexpr int kVOffset = kKOffset + kStages * kKVBytes;
    static constexpr int kBarrierOffset = kVOffset + kStages * kKVBytes;
    static constexpr int kBarriers = 2 + 4 * kStages;  // Q full and empty; K and V full and empty per stage
    static constexpr int kBarrierBytes = kBarriers * 8 + (kClaims ? 16 : 0);  // and four words of claimed tiles (Pipeline::claimed)
    static constexpr int kOutputOffset = (kBarrierOffset + kBarrierBytes + kAlignment - 1) / kAlignment * kAlignment;
    static constexpr bool kOwnOutputRows = kOutputOffset + kQBytes + kAlignment <= kSharedLimit;
    static constexpr int kSharedBytes = (kOwnOutputRows ? kOutputOffset + kQBytes : kBarrierOffset + kBarrierBytes) + kAlignment;

    // Named barriers: 1 .. kConsumers hand the tensor cores between consumers; then one per
    // consumer for its epilogue.
    static constexpr int kTurnBarrier = 1;
    static constexpr int kEpilogueBarrier = kTurnBarrier + kConsumers;

    static_assert(kHeadDim % wgmma::kK == 0 && kHeadDim <= 256, "wgmma N: a multiple of 16 up to 256");
    static_assert(kBlockKeys % wgmma::kK == 0 && kBlockKeys <= 256, "key tile: a multiple of 16 up to 256");
    static_assert(kSharedBytes <= kSharedLimit, "the arch's shared memory per block");
    static_assert(kEpilogueBarrier + kConsumers <= 16, "named barriers");
    // setmaxnreg moves registers between warpgroups of the block, which launches with an equal
    // share each (in steps of 8): the consumers' increase must fit what the producer gives back,
    // or they wait for it forever (docs/decisions.md, "Paged KV in the wgmma producer").
    static constexpr int kLaunchRegisters = 65536 / kThreads / 8 * 8;
    static_assert((kLaunchRegisters - kShape.producer_registers) >= (kShape.consumer_registers - kLaunchRegisters) * kConsumers,
                  "the consumers' registers must come from the producer's");
};

// The tensors as TMA maps (O's boxes: one consumer's rows); a __grid_constant__ kernel
// parameter, so TMA reads them in place.
struct TensorMaps {
    CUtensorMap q, o;
    // Paged: maps of the caches' pages, in boxes of a page part, of 8 rows and of 1, each tensor's
    // three in a row (PagedTiles::load).
    CUtensorMap k, k_groups, k_rows;
    CUtensorMap v, v_groups, v_rows;
};

// A claimed tile's index past the launch's last (produce()).
inline constexpr int kNoMoreTiles = -1;

// The block's barriers. The K/V ring's slots are numbered across all of a block's work tiles:
// slot n is stage n % kStages, in round n / kStages, whose parity a wait names. Address: a
// pointer to the first barrier, or its shared-memory address (32 bits: the producer's, whose
// registers are few).
template <class T, class Address = uint64_t*>
struct Pipeline {
    Address words;
    __device__ Address at(int index) const {
        if constexpr (std::is_pointer_v<Address>) return words + index;
        else return words + 8 * index;
    }
    __device__ Address q_full() const { return at(0); }
    __device__ Address q_empty() const { return at(1); }
    __device__ Address k_full(int stage) const { return at(2 + stage); }
    __device__ Address k_empty(int stage) const { return at(2 + T::kStages + stage); }
    __device__ Address v_full(int stage) const { return at(2 + 2 * T::kStages + stage); }
    __device__ Address v_empty(int stage) const { return at(2 + 3 * T::kStages + stage); }
    // The packed kernel's claimed tiles: the index of the work tile of Q load n, word n % 2, and
    // its sequence, word 2 + n % 2 (produce()).
    __device__ auto claimed(int word) const {
        if constexpr (std::is_pointer_v<Address>) return reinterpret_cast<volatile int*>(words + T::kBarriers) + word;
        else return words + 8 * T::kBarriers + 4 * word;
    }
    __device__ static int stage(int slot) { return slot % T::kStages; }
    __device__ static uint32_t parity(int slot) { return uint32_t(slot / T::kStages) & 1u; }
};

// The producer's walk: for each work tile of this block, the K and V tiles of its keys into the
// ring in turn (load_kv(full barrier, destination, the work tile [kShared: as two words in
// shared memory], key tile, is V) once the slot is empty), and (thread 0's walk) its Q by TMA
// after its first K, which is then on its way while the consumers still stage the previous
// tile's output. kShared: the walk of whole warps that hold the work tile in shared memory,
// a copy per warp, rather than in registers (the producer has few), and load no Q: the
// warpgroup copying element rows (each consumer copies its own Q rows), and the warps issuing
// a paged tile's later parts. Inlined, each way of loading K and V its own copy (a closure left
// in memory would take the kernel's arguments to the stack).
// In the packed kernel (kClaims: thread 0's walk) each tile's index comes from a counter in
// the workspace and goes to the consumers through Q's "full" barrier: every tile with rows (one
// without keys by an arrival alone), then kNoMoreTiles. The index and the tile's sequence (the
// consumers then search no packed batch's lengths) wait in shared-memory words by the parity of
// the tile's Q load (Pipeline::claimed), written as found: the consumers have read the words'
// last values, whose Q slot they freed for the load before.
template <class T, class Work, bool kShared, class LoadKV>
__device__ __forceinline__ void produce(const FwdParams& p, const PrefillTiling& tiling, const TensorMaps& maps, uint32_t shared,
                                        bool key_grid, LoadKV&& load_kv) {
    using P = Pipeline<T, uint32_t>;
    const P pipe{shared + T::kBarrierOffset};
    // kShared: tiles_end, key tiles, the first ring slot, the rows' StepPages; then the KV head and kv_end.
    __shared__ uint4 walks[wgmma::kThreads / 32][2];
    const auto walk = [&](int part) { return &walks[threadIdx.x / 32][part]; };  // not held: a register fewer
    if (!kShared) hopper::prefetch_tensor_map(&maps.q);
    constexpr bool claims = T::kClaims && !kShared;
    int slot = 0, q_loads = 0;
    auto wait_for_q_slot = [&] { hopper::barrier_wait(pipe.q_empty(), (uint32_t(q_loads++) & 1u) ^ 1u); };
    for (int step = 0;; ++step) {
        int index;
        if (claims) {
            index = step == 0 ? int(blockIdx.x) : int(gridDim.x) + atomicAdd(static_cast<int*>(p.workspace), 1);
            if (index >= tiling.units) {
                hopper::store_shared(pipe.claimed(q_loads & 1), kNoMoreTiles);
                wait_for_q_slot(), hopper::barrier_arrive(pipe.q_full());
                break;
            }
        } else {
            if (!has_step(tiling, step, gridDim.x)) break;
            index = persistent_tile(tiling, step, blockIdx.x, gridDim.x);
            if (index < 0) continue;
        }
        const Work work = Work::of(p, tiling, index, T::kBlockKeys, key_grid);
        if (claims) {
            hopper::store_shared(pipe.claimed(q_loads & 1), index);
            hopper::store_shared(pipe.claimed(2 + (q_loads & 1)), int(work.tile.batch));
        }
        if (work.key_tiles == 0) {  // the consumers need no Q for it, only its index where the kernel claims
            if (claims && work.has_rows) wait_for_q_slot(), hopper::barrier_arrive(pipe.q_full());
            continue;
        }
        auto load_q = [&] {
            wait_for_q_slot();
            hopper::barrier_arrive_expect(pipe.q_full(),
                                          T::kAtoms * tiling.rows_per_head * tiling.heads_per_tile * wgmma::kRowBytes);
            for (int atom = 0; atom < T::kAtoms; ++atom)
                hopper::tma_load_4d(shared + atom * T::kBlockRows * wgmma::kRowBytes, &maps.q, atom * wgmma::kAtomColumns,
                                    work.q_row(work.tile.position0), work.tile.head0, work.q_batch(p), pipe.q_full());
        };
        if constexpr (kShared) {
            __syncwarp();
            if (threadIdx.x % 32 == 0) {
                const StepPages pages = StepPages::of(p.block_table, p.cu_seqlens_kv, p.max_pages_per_seq, p.page_size, work.tile.batch);
                *walk(0) = make_uint4(work.tiles_end, work.key_tiles, slot, pages.entry),
                *walk(1) = make_uint4(work.tile.head_kv, work.kv_end, pages.shift, 0);
            }
            __syncwarp();
        }
        const int key_tiles = work.key_tiles;
        for (int n = 0; n < 2 * (kShared ? int(load_shared_volatile(walk(0)).y) : key_tiles); ++n) {  // K0, V0, K1, V1, ...
            const bool v = n % 2 == 1;
            const int ring_slot = (kShared ? int(load_shared_volatile(walk(0)).z) : slot) + n / 2, stage = P::stage(ring_slot);
            hopper::barrier_wait(v ? pipe.v_empty(stage) : pipe.k_empty(stage), P::parity(ring_slot) ^ 1u);
            const uint32_t full = v ? pipe.v_full(stage) : pipe.k_full(stage);
            const uint32_t destination = shared + (v ? T::kVOffset : T::kKOffset) + stage * T::kKVBytes;
            if constexpr (kShared) {
                load_kv(full, destination, load_shared_volatile(walk(0)), load_shared_volatile(walk(1)), n / 2, v);
            } else {
                load_kv(full, destination, work, uint4{}, n / 2, v);
                if (n == 0) load_q();
            }
        }
        if constexpr (kShared) {  // from shared memory: neither value is held through the loads
            const uint4 copied = load_shared_volatile(walk(0));
            slot = int(copied.z + copied.y);
        } else {
            slot += key_tiles;
        }
    }
}

template <class Config, bool kShortKeys, Variant kVariant>
__global__ void __launch_bounds__(WgmmaTraits<Config, kShortKeys, kVariant>::kThreads, 1)
    wgmma_kernel(const FwdParams p, const PrefillTiling tiling, const __grid_constant__ TensorMaps maps) {
    using T = WgmmaTraits<Config, kShortKeys, kVariant>;
    constexpr bool kServing = T::kServing;
    using P = Pipeline<T>;
    constexpr bool kMasked = Config::mask == Mask::causal;
    constexpr DType kDType = Config::dtype;
    using Work = TileWork<kMasked, kServing>;

    extern __shared__ uint8_t shared_raw[];
    uint8_t* shared = reinterpret_cast<uint8_t*>(
        (reinterpret_cast<uintptr_t>(shared_raw) + T::kAlignment - 1) / T::kAlignment * T::kAlignment);
    uint8_t* q_tile = shared;
    uint8_t* output_rows = T::kOwnOutputRows ? shared + T::kOutputOffset : q_tile;
    const P pipe{reinterpret_cast<uint64_t*>(shared + T::kBarrierOffset)};
    const int warpgroup = threadIdx.x / wgmma::kThreads;
    // Element rows' Q, K and V the warpgroups copy; elsewhere Q, K and V come by TMA, issued by
    // one thread, a paged cache's by boxes per page from the first thread of up to four producer
    // warps (paged_tiles.h; with the warpgroup's arrivals and the consumers' fences on every
    // tile, 5-9% slower: docs/decisions.md, "Paged tiles from one thread").
    const bool elements = T::kCopies && element_rows(p.head_dim);
    const bool on_pages = T::kVariant == Variant::paged || (T::kCopies && p.block_table != nullptr);
    const bool key_grid = elements || on_pages;  // key tiles on a grid from key 0 (TileWork::of)
    using Pages = typename T::Pages;
    constexpr bool claims = T::kClaims;

    if (threadIdx.x == 0) {
        hopper::barrier_init(pipe.q_full(), 1);
        hopper::barrier_init(pipe.q_empty(), T::kConsumers * 4);  // one arrival per consumer warp
        for (int s = 0; s < T::kStages; ++s) {
            hopper::barrier_init(pipe.k_full(s), elements ? Pages::kThreads : 1);
            hopper::barrier_init(pipe.v_full(s), elements ? Pages::kThreads : 1);
            hopper::barrier_init(pipe.k_empty(s), T::kConsumers * 4);
            hopper::barrier_init(pipe.v_empty(s), T::kConsumers * 4);
        }
        hopper::barrier_init_fence();
    }
    __syncthreads();

    if (warpgroup == 0) {  // ---------------------------------------------------------- producer
        hopper::release_registers<T::kShape.producer_registers>();
        const uint32_t base = hopper::shared_address(shared);
        if (elements || (on_pages && threadIdx.x >= 32)) {
            // Whole warps walking from shared memory (produce()): the warpgroup copying element
            // rows, or the warps after the first issuing a paged tile's later parts, one per part
            // (paged_tiles.h; a walk of their own: in thread 0's, the producer spilled).
            if (!elements && int(threadIdx.x / 32) >= Pages::issuers(__ffs(p.page_size) - 1)) return;
            produce<T, Work, true>(p, tiling, maps, base, key_grid, [&](uint32_t full, uint32_t destination, uint4 walk, uint4 more, int i, bool v) {
                // walk: tiles_end, key tiles, first ring slot, StepPages entry; more: KV head,
                // kv_end, StepPages shift (produce()).
                const int k0 = int(walk.x) - (i + 1) * T::kBlockKeys, head_kv = int(more.x), kv_end = int(more.y);
                const StepPages pages{int(walk.w), int(more.z)};
                if (!elements) {
                    if (threadIdx.x % 32 == 0)
                        Pages::template load<false>(full, destination, v ? &maps.v : &maps.k, p.block_table, pages, p.page_size, head_kv, k0, kv_end,
                                                    threadIdx.x / 32);
                } else if (v) {
                    Pages::copy(full, destination, p.v, p.v_strides, p.block_table, pages, head_kv, k0, kv_end, p.head_dim);
                } else {
                    Pages::copy(full, destination, p.k, p.k_strides, p.block_table, pages, head_kv, k0, kv_end, p.head_dim);
                }
            });
            return;
        }
        if (threadIdx.x == 0) {  // Q, K and V by TMA; a paged tile's first part, and all of one reaching past its keys
            hopper::prefetch_tensor_map(&maps.k);
            hopper::prefetch_tensor_map(&maps.v);
            const auto load_kv = [&](uint32_t full, uint32_t destination, const Work& work, uint4, int i, bool v) {
                const int k0 = work.first_key(i, T::kBlockKeys);
                if constexpr (T::kPages) {
                    if (on_pages) {
                        const StepPages pages = StepPages::of(p.block_table, p.cu_seqlens_kv, p.max_pages_per_seq, p.page_size, work.tile.batch);
                        Pages::template load<true>(full, destination, v ? &maps.v : &maps.k, p.block_table, pages, p.page_size, work.tile.head_kv, k0,
                                                   work.kv_end, 0);
                        return;
                    }
                }
                hopper::barrier_arrive_expect(full, T::kKVBytes);
                for (int atom = 0; atom < T::kAtoms; ++atom)
                    hopper::tma_load_4d(destination + atom * T::kBlockKeys * wgmma::kRowBytes, v ? &maps.v : &maps.k,
                                        atom * wgmma::kAtomColumns, work.kv_row(k0), work.tile.head_kv, work.kv_batch(p), full);
            };
            produce<T, Work, false>(p, tiling, maps, base, key_grid, load_kv);
        }
        return;
    }

    // --------------------------------------------------------------------------- consumers
    __shared__ Work placements[T::kConsumers * 4];  // one per consumer warp
    hopper::claim_registers<T::kShape.consumer_registers>();
    const int consumer = warpgroup - 1;
    const int thread = threadIdx.x % wgmma::kThreads;
    const int row0 = consumer * wgmma::kRows;  // this warpgroup's first row in a tile
    const bool leader = thread % 32 == 0;      // arrives on "empty" barriers for its warp
    const float scale_log2 = p.scale * kLog2e;
    const auto row_of = [](int e) { return wgmma::row_half(e); };
    // The scoring options (kOptions): the rule, each row's ALiBi slope, and which of them the
    // launch asks for (the main loop's steps are compiled for each, as for the mask).
    FragmentScoring<2> scoring;
    const bool capped = T::kOptions && p.softcap != 0.f, biased = T::kOptions && p.alibi_slopes != nullptr;
    if constexpr (T::kOptions) scoring.init(p.scale, p.softcap);
    [[maybe_unused]] const bool bounded = BoundedScores::fit(p.softcap * kLog2e);  // with_scoring's (kBoundedCaps)
    // Dropout (kOptions). Nothing of it is held through the main loop (there the d128 kernel
    // spills): the generator's state and the rows' numbers are loaded per key tile.
    const bool dropping = T::kOptions && p.dropout.p != 0.f;

    float o[T::kHeadDim / 2];
    float s[T::kBlockKeys / 2];
    uint32_t probabilities[T::kBlockKeys / wgmma::kK][4];
    FragmentSoftmax<2, Group<4>> softmax;
    Work work{};            // the current work tile (kept in shared memory for the epilogue: see below)
    KeyTiles<kMasked, 2> keys;  // what the main loop needs of it
    int slot = 0;            // the K/V ring slot of the next key tile

    // P.V reads its A operand from these registers while it runs: keep them until its wait.
    auto pin_probabilities = [&] {
#pragma unroll
        for (int k = 0; k < T::kBlockKeys / wgmma::kK; ++k) hopper::pin_registers(probabilities[k]);
    };
    // Descriptors start from addresses the compiler cannot precompute, so that it derives each
    // step's descriptor when issuing rather than holding them all in registers.
    auto qk_gemm = [&](int stage) {
        const wgmma::Descriptor q =
            wgmma::k_major_operand(hopper::opaque(hopper::shared_address(q_tile)) + row0 * wgmma::kRowBytes);
        const wgmma::Descriptor k =
            wgmma::k_major_operand(hopper::opaque(hopper::shared_address(shared + T::kKOffset + stage * T::kKVBytes)));
        hopper::pin_registers(s);  // every write to the operands happens before the fence
        hopper::wgmma_fence();
#pragma unroll
        for (int step = 0; step < T::kHeadDim / wgmma::kK; ++step)
            wgmma_ss<T::kBlockKeys, kDType, false>(s, q.step(wgmma::k_major_step(T::kBlockRows, step)),
                                                   k.step(wgmma::k_major_step(T::kBlockKeys, step)), step > 0);
        hopper::wgmma_commit();
    };
    auto pv_gemm = [&](int stage) {
        const wgmma::Descriptor v = wgmma::n_major_operand(
            hopper::opaque(hopper::shared_address(shared + T::kVOffset + stage * T::kKVBytes)), T::kBlockKeys);
        hopper::pin_registers(o);
        pin_probabilities();
        hopper::wgmma_fence();
#pragma unroll
        for (int step = 0; step < T::kBlockKeys / wgmma::kK; ++step)
            wgmma_rs<T::kHeadDim, kDType, true>(o, probabilities[step], v.step(wgmma::n_major_step(step)), 1);
        hopper::wgmma_commit();
    };
    // Key tile i's dot products as scores with softcapping (kCapped) and ALiBi (kBiased), in the
    // log2 domain (the softmax then takes them with a scale of 1); elsewhere left as they are.
    // ALiBi subtracts slope |diagonal - key| (any sign of slope), the distance a per-row float
    // minus the element's column (no per-element integer conversion). Unmasked steps' tiles lie
    // on one side of every row's diagonal (tiles crossing one take the masked step), where the
    // bias is linear in the column: one fused multiply-add, the side folded into the slope.
    auto apply_scoring = [&](int i, auto kCapped, auto kBiased, auto masked) {
        if constexpr (decltype(kCapped)::value || decltype(kBiased)::value) {
            const int tile_k0 = keys.first_key(i, T::kBlockKeys), k0 = tile_k0 + 2 * (thread % 4);  // k0: the thread's first column
            float distance[2], slope[2];  // per row: diagonal - k0, and the slope (unmasked: signed by the side)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                distance[h] = float(keys.diagonal[h] - k0);
                const bool above = tile_k0 > keys.diagonal[h];
                slope[h] = decltype(masked)::value || !above ? scoring.slope_log2[h] : -scoring.slope_log2[h];
            }
#pragma unroll
            for (int e = 0; e < T::kBlockKeys / 2; ++e) {
                const int h = wgmma::row_half(e);
                const float column = float(8 * (e / 4) + e % 2);
                const float bias = !decltype(kBiased)::value ? 0.f
                                   : decltype(masked)::value ? slope[h] * fabsf(distance[h] - column)
                                                             : fmaf(-slope[h], column, slope[h] * distance[h]);
                // The score's fused multiply-add subtracts the bias (written out: ptxas left it a multiply and an add).
                if constexpr (kBoundedCap<decltype(kCapped)>)
                    s[e] = fmaf(scoring.rule.cap_log2, tanh_of_scaled(s[e] * scoring.rule.dot_scale),
                                -BoundedScores::offset(scoring.rule.cap_log2));
                else
                    s[e] = decltype(kCapped)::value ? fmaf(scoring.rule.cap_log2, tanh_of_scaled(s[e] * scoring.rule.dot_scale), -bias)
                                                    : fmaf(s[e], scoring.rule.dot_scale, -bias);
            }
        }
    };
    // ALiBi alone on an unmasked step, folded into the softmax: scale (dot + slope / scale x
    // column) - slope x distance, the dot products taking the column's term (one fused multiply-
    // add a score, where apply_scoring's form takes two) and each row's last term an offset of
    // its scaled scores (docs/decisions.md, "ALiBi folded into the softmax"). Not at d256: its
    // causal serving kernels spill with it (as they did when apply_scoring shared these per-row
    // lines, so each keeps its own).
    constexpr bool kFoldedAlibi = T::kHeadDim <= 128;
    auto fold_alibi = [&](int i, float (&offset)[2]) {
        const int tile_k0 = keys.first_key(i, T::kBlockKeys), k0 = tile_k0 + 2 * (thread % 4);  // k0: the thread's first column
        float per_column[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const float slope = tile_k0 > keys.diagonal[h] ? -scoring.slope_log2[h] : scoring.slope_log2[h];  // by the side
            offset[h] = -slope * float(keys.diagonal[h] - k0);
            per_column[h] = __fdividef(slope, scale_log2);
        }
#pragma unroll
        for (int e = 0; e < T::kBlockKeys / 2; ++e) s[e] = fmaf(per_column[wgmma::row_half(e)], float(8 * (e / 4) + e % 2), s[e]);
    };
    // The softmax's update: of the raw dot products (scaled), or of the scores apply_scoring made.
    auto update_softmax = [&](auto kCapped, auto kBiased, float (&rescale)[2]) {
        if constexpr (kBoundedCap<decltype(kCapped)>)
            softmax.update_bounded(s, BoundedScores::offset(scoring.rule.cap_log2), rescale, row_of);
        else
            softmax.update(s, decltype(kCapped)::value || decltype(kBiased)::value ? 1.f : scale_log2, rescale, row_of);
    };
    // Calls step(kCapped, kBiased) with the launch's scoring options as compile-time flags
    // (kCapped: std::true_type, or BoundedCap where the scores need no running maximum).
    // kBoundedCaps compiles four steps as the others do: a cap past BoundedScores' range takes
    // the capped and biased one at zero slopes (a fifth step spilled d128's options kernel; at
    // d256 the bounded step spilled the packed one).
    constexpr bool kBoundedCaps = kDType == DType::bf16 && T::kHeadDim <= 128;
    auto with_scoring = [&](auto&& step) {
        if constexpr (T::kOptions) {
            if constexpr (kBoundedCaps) {  // one call of each step: each call inlines a copy
                if (capped && (biased || !bounded)) return step(std::true_type{}, std::true_type{});
                if (capped) return step(BoundedCap{}, std::false_type{});
            } else {
                if (capped && biased) return step(std::true_type{}, std::true_type{});
                if (capped) return step(std::true_type{}, std::false_type{});
            }
            if (biased) return step(std::false_type{}, std::true_type{});
        }
        return step(std::false_type{}, std::false_type{});
    };
    // Dropout on key tile i's packed probabilities (16-bit halves of P.V's A operand: element
    // e is half e % 2 of probabilities[e / 8][e % 8 / 2]), once no wgmma runs and the scores'
    // registers are free: the keep bits first, then the selects. Where the tile starts on a
    // 16-key boundary (every tile of a sequence whose length is a multiple of 16) each Philox
    // call serves four of the thread's elements (common/dropout.h); elsewhere one.
    auto drop_probabilities = [&](int i) {
        static_assert(T::kBlockKeys / 2 <= 64, "dropout's keep bits: one 64-bit word per key tile");
        const int k0 = keys.first_key(i, T::kBlockKeys), t = thread % 4;
        const Dropout dropout = Dropout::of(p.dropout);
        const Work& placed = placements[threadIdx.x / 32 - 4];  // the work tile (this warp's copy)
        Dropout::Row rows[2];  // the thread's two rows: stream b * heads_q + h, and position
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + wgmma::accumulator_position(thread, 2 * h).row;
            rows[h] = dropout.row(int64_t(placed.tile.batch) * p.heads_q + placed.tile.head0 + row / tiling.rows_per_head,
                                  placed.tile.position0 + row % tiling.rows_per_head);
        }
        const auto halves = [&](bool low, bool high) { return (low ? 0xFFFFu : 0u) | (high ? 0xFFFF0000u : 0u); };
        // Element e is bit e of the keep bits. The Philox calls unrolled, but at d256 (o alone is
        // 128 registers), where unrolled they spill: one at a time there.
        uint64_t kept = 0;
        if (k0 % 16 == 0) {
            constexpr int kCalls = T::kBlockKeys / 8, kUnrolled = T::kHeadDim <= 128 ? kCalls : 1;
#pragma unroll(kUnrolled)
            for (int c = 0; c < kCalls; ++c) {  // row half h, keys 16 m + 8 c' + 2 t + e: word 2 c' + e
                const int h = c % 2, m = c / 2;
                const PhiloxWords words = dropout.randoms(h ? rows[1] : rows[0], k0 + 16 * m + 2 * t);
                const uint32_t bits = uint32_t(dropout.keeps(words.w[0])) | uint32_t(dropout.keeps(words.w[1])) << 1 |
                                      uint32_t(dropout.keeps(words.w[2])) << 4 | uint32_t(dropout.keeps(words.w[3])) << 5;
                kept |= uint64_t(bits) << (8 * m + 2 * h);  // elements 8 m + 2 h + {0, 1} and 8 m + 4 + 2 h + {0, 1}
            }
        } else {
#pragma unroll 1
            for (int e = 0; e < T::kBlockKeys / 2; ++e)
                kept |= uint64_t(dropout.keeps(wgmma::row_half(e) ? rows[1] : rows[0], k0 + 8 * (e / 4) + 2 * t + e % 2)) << e;
        }
#pragma unroll
        for (int e = 0; e < T::kBlockKeys / 2; e += 2)
            probabilities[e / 8][e % 8 / 2] &= halves((kept >> e) & 1u, (kept >> (e + 1)) & 1u);
    };
    // Masked keys of key tile i get -inf.
    auto apply_mask = [&](int i) {
        const int k0 = keys.first_key(i, T::kBlockKeys);
#pragma unroll
        for (int e = 0; e < T::kBlockKeys / 2; ++e)
            if (!keys.sees(wgmma::row_half(e), k0 + wgmma::accumulator_position(thread, e).column)) s[e] = -INFINITY;
    };
    // Probabilities as the A operand of P.V: step k is columns 16k .. 16k + 15.
    auto pack_probabilities = [&] {
#pragma unroll
        for (int k = 0; k < T::kBlockKeys / wgmma::kK; ++k)
#pragma unroll
            for (int r = 0; r < 4; ++r) probabilities[k][r] = hopper::pack_pair<kDType>(s[8 * k + 2 * r], s[8 * k + 2 * r + 1]);
    };
    auto rescale_output = [&](const float (&rescale)[2]) {
#pragma unroll
        for (int e = 0; e < T::kHeadDim / 2; ++e) o[e] *= rescale[wgmma::row_half(e)];
    };
    // The tensor cores, in turn: wait for this consumer's turn, then hand it to the next one.
    auto take_turn = [&] {
        if constexpr (T::kConsumers > 1) hopper::named_barrier_sync(T::kTurnBarrier + consumer, 2 * wgmma::kThreads);
    };
    auto pass_turn = [&] {
        if constexpr (T::kConsumers > 1)
            hopper::named_barrier_arrive(T::kTurnBarrier + (consumer + 1) % T::kConsumers, 2 * wgmma::kThreads);
    };
    auto release_q = [&] { hopper::barrier_arrive_if(pipe.q_empty(), leader); };
    // Tile row `row`'s position, and where its output goes (nullptr where the row does not exist).
    auto position_of = [&](int row) { return work.tile.position0 + row % tiling.rows_per_head; };
    auto output_row = [&](int row) -> uint16_t* {
        const int head_in_tile = row / tiling.rows_per_head;
        if (head_in_tile >= work.tile.heads || !work.has_position(position_of(row))) return nullptr;
        return static_cast<uint16_t*>(p.o) + int64_t(work.q_batch(p)) * p.o_strides.batch +
               int64_t(work.tile.head0 + head_in_tile) * p.o_strides.head + int64_t(work.q_row(position_of(row))) * p.o_strides.row;
    };
    constexpr int kChunksPerRow = T::kHeadDim / 8;  // 16-byte chunks

    if (consumer == T::kConsumers - 1) pass_turn();  // consumer 0 goes first
    int q_loads = 0;
    for (int step = 0;; ++step) {
        int index = 0, sequence = -1;
        if (claims) {  // Q's barrier publishes the tile's index and sequence (produce())
            hopper::barrier_wait(pipe.q_full(), uint32_t(q_loads) & 1u);
            // Read by the lane that frees Q's slot (and so the words) for its warp, and shared.
            if (leader) index = *pipe.claimed(q_loads & 1), sequence = *pipe.claimed(2 + (q_loads & 1));
            index = __shfl_sync(0xffffffffu, index, 0), sequence = __shfl_sync(0xffffffffu, sequence, 0);
            ++q_loads;
            if (index == kNoMoreTiles) break;
        } else {
            if (!has_step(tiling, step, gridDim.x)) break;
            index = persistent_tile(tiling, step, blockIdx.x, gridDim.x);
            if (index < 0) continue;
        }
        work = Work::of(p, tiling, index, T::kBlockKeys, key_grid, sequence);
        if (!work.has_rows) continue;
        // The tile's placement waits for the epilogue in shared memory, one copy per warp (warp-
        // uniform values): deriving it again there costs a tile's worth of divisions, and
        // registers through the main loop would spill at d64.
        Work& kept = placements[threadIdx.x / 32 - 4];  // warp 4 is the first consumer warp
        if (thread % 32 == 0) kept = work;
        __syncwarp();
        {
            int position[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) position[h] = position_of(row0 + wgmma::accumulator_position(thread, 2 * h).row);
            keys = KeyTiles<kMasked, 2>::of(work, tiling, row0, wgmma::kRows, p.window, position, T::kBlockKeys);
            if constexpr (T::kOptions) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int row = row0 + wgmma::accumulator_position(thread, 2 * h).row;
                    const int head_in_tile = row / tiling.rows_per_head;
                    scoring.set_row(h, sequence_slopes(p.alibi_slopes, p.alibi_batch_stride, work.tile.batch),
                                    work.tile.head0 + head_in_tile, head_in_tile < work.tile.heads);
                }
            }
        }
        softmax.init();
#pragma unroll
        for (int e = 0; e < T::kHeadDim / 2; ++e) o[e] = 0.f;
        float total[2] = {0.f, 0.f}, inverse[2] = {0.f, 0.f};  // per row: sum of exponentials, its reciprocal

        if (keys.count > 0) {
            if (elements)  // the producer has no registers to copy Q: this warpgroup's rows, copied here
                Pages::template copy_q<T::kBlockRows>(hopper::shared_address(q_tile), p, tiling, work, row0, T::kEpilogueBarrier + consumer);
            else if (!claims)
                hopper::barrier_wait(pipe.q_full(), uint32_t(q_loads++) & 1u);
            // Key tiles that none of this warpgroup's rows sees: handed back unread, the turn
            // passed on (every consumer takes one turn per key tile).
            auto skip = [&](int i) {
                const int stage = P::stage(slot + i);
                hopper::barrier_wait(pipe.k_full(stage), P::parity(slot + i));  // so that the arrivals count for this slot
                take_turn();
                pass_turn();
                hopper::barrier_arrive_if(pipe.k_empty(stage), leader);
                hopper::barrier_wait(pipe.v_full(stage), P::parity(slot + i));
                hopper::barrier_arrive_if(pipe.v_empty(stage), leader);
            };
            for (int i = 0; i < keys.begin; ++i) skip(i);
            if (keys.begin < keys.end) {
                // The first key tile seen: scores, then probabilities.
                const int first = P::stage(slot + keys.begin);
                hopper::barrier_wait(pipe.k_full(first), P::parity(slot + keys.begin));
                take_turn();
                qk_gemm(first);
                pass_turn();
                hopper::wgmma_wait<0>();
                hopper::pin_registers(s);
                hopper::barrier_arrive_if(pipe.k_empty(first), leader);
                if (T::kOwnOutputRows) hopper::barrier_arrive_if(pipe.q_empty(), leader && keys.end - keys.begin == 1);
                float rescale[2];  // for O, before it takes the latest key tile's P.V
                with_scoring([&](auto kCapped, auto kBiased) {
                    apply_scoring(keys.begin, kCapped, kBiased, std::true_type{});
                    if (keys.needs_mask(keys.begin, T::kBlockKeys)) apply_mask(keys.begin);
                    update_softmax(kCapped, kBiased, rescale);
                });
                pack_probabilities();
                if (dropping) drop_probabilities(keys.begin);

                // Key tile i's scores and tile i-1's P.V, issued together; O is rescaled in
                // between. Straight-line code from the issue to the last wait, the mask chosen
                // outside it: ptxas waits for a running wgmma at the first branch after it.
                auto overlapped_step = [&](int i, auto masked, auto kCapped, auto kBiased) {
                    const int stage = P::stage(slot + i), previous = P::stage(slot + i - 1);
                    hopper::barrier_wait(pipe.k_full(stage), P::parity(slot + i));
                    take_turn();
                    qk_gemm(stage);
                    if constexpr (!kBoundedCap<decltype(kCapped)>) rescale_output(rescale);
                    hopper::barrier_wait(pipe.v_full(previous), P::parity(slot + i - 1));
                    pv_gemm(previous);
                    pass_turn();
                    hopper::wgmma_wait<1>();  // the scores are done; P.V may still run
                    hopper::pin_registers(s);
                    hopper::barrier_arrive_if(pipe.k_empty(stage), leader);
                    if constexpr (T::kOwnOutputRows)  // the producer may load the next Q
                        hopper::barrier_arrive_if(pipe.q_empty(), leader && i == keys.end - 1);
                    if constexpr (kFoldedAlibi && decltype(kBiased)::value && !decltype(kCapped)::value && !decltype(masked)::value) {
                        float offset[2];
                        fold_alibi(i, offset);
                        softmax.update(s, scale_log2, rescale, row_of, offset);
                    } else {
                        apply_scoring(i, kCapped, kBiased, masked);
                        if constexpr (decltype(masked)::value) apply_mask(i);
                        update_softmax(kCapped, kBiased, rescale);
                    }
                    hopper::wgmma_wait<0>();  // P.V of tile i-1 is done: its registers are free
                    hopper::pin_registers(o);
                    pin_probabilities();
                    hopper::barrier_arrive_if(pipe.v_empty(previous), leader);
                    pack_probabilities();
                    if (dropping) drop_probabilities(i);
                };
                for (int i = keys.begin + 1; i < keys.end; ++i) {
                    with_scoring([&](auto kCapped, auto kBiased) {
                        if (keys.needs_mask(i, T::kBlockKeys, /*one_sided=*/decltype(kBiased)::value))
                            overlapped_step(i, std::true_type{}, kCapped, kBiased);
                        else
                            overlapped_step(i, std::false_type{}, kCapped, kBiased);
                    });
                }

                const int last = P::stage(slot + keys.end - 1);
                rescale_output(rescale);
                hopper::barrier_wait(pipe.v_full(last), P::parity(slot + keys.end - 1));
                pv_gemm(last);
                // The rows' sums are final: their reduction and reciprocal run under the last P.V.
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    total[h] = softmax.total(h);
                    inverse[h] = total[h] > 0.f ? __fdividef(dropping ? 1.f / (1.f - p.dropout.p) : 1.f, total[h]) : 0.f;
                }
                hopper::wgmma_wait<0>();
                hopper::pin_registers(o);
                pin_probabilities();
                hopper::barrier_arrive_if(pipe.v_empty(last), leader);
            } else if (T::kOwnOutputRows) {
                release_q();
            }
            for (int i = keys.end; i < keys.count; ++i) skip(i);
            slot += keys.count;
        } else if (claims) {
            release_q();  // only the tile's index was published
        }
        work = kept;
        __syncwarp();  // read by every lane before the next tile's copy

        // ---- epilogue: normalise, stage the 16-bit rows, store the rows that exist.
        if (p.lse) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + wgmma::accumulator_position(thread, 2 * h).row;
                if (thread % 4 == 0 && output_row(row)) {
                    const int head = work.tile.head0 + row / tiling.rows_per_head;
                    p.lse[lse_index<kServing>(p, work.tile.batch, head, position_of(row))] = softmax.lse(h, total[h]);
                }
            }
        }
        // The bounded step sums the probabilities that P.V takes rounded to bf16, and none is
        // exactly 1 (as a row maximum's is): a row that sees a single key divides by its rounded
        // probability instead, so that it returns that key's value exactly, as FlashAttention does.
        if constexpr (kBoundedCaps) {
            if (capped && bounded && !biased) {
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int position = position_of(row0 + wgmma::accumulator_position(thread, 2 * h).row);
                    int lo, hi;
                    work.mask.key_range(position, position, lo, hi);
                    const float cut = DTypeTraits<DType::bf16>::unpack1(DTypeTraits<DType::bf16>::pack(total[h]));
                    if (hi - lo == 1 && cut > 0.f) inverse[h] = __fdividef(dropping ? 1.f / (1.f - p.dropout.p) : 1.f, cut);
                }
            }
        }
        // 16 bytes of an output row from `column` on: one vector, or element rows' elements.
        auto store_chunk = [&](uint16_t* row, int column, const uint4& chunk) {
            if (elements) store_chunk_elements(row + column, p.head_dim - column, chunk);
            else *reinterpret_cast<uint4*>(row + column) = chunk;
        };
        if (keys.count == 0) {  // no key seen: zeros, straight to memory (the staging rows may be the next Q's)
            for (int chunk = thread; chunk < wgmma::kRows * kChunksPerRow; chunk += wgmma::kThreads) {
                const int column = chunk % kChunksPerRow * 8;
                if (uint16_t* row = column < p.head_dim ? output_row(row0 + chunk / kChunksPerRow) : nullptr)
                    store_chunk(row, column, make_uint4(0, 0, 0, 0));
            }
            continue;
        }
        const int epilogue = T::kEpilogueBarrier + consumer;
        if (T::kOwnOutputRows) {  // the previous tile's output has left the staging rows
            if (thread == 0) hopper::bulk_wait_read();
            hopper::named_barrier_sync(epilogue, wgmma::kThreads);
        }
#pragma unroll
        for (int e = 0; e < T::kHeadDim / 2; e += 2) {
            const wgmma::Position at = wgmma::accumulator_position(thread, e);
            const float scale = inverse[wgmma::row_half(e)];
            *reinterpret_cast<uint32_t*>(output_rows + wgmma::swizzled_offset(T::kBlockRows, row0 + at.row, at.column)) =
                hopper::pack_pair<kDType>(o[e] * scale, o[e + 1] * scale);
        }
        // A TMA store where it writes only rows that exist: one head's rows, starting inside the
        // sequence and ending inside it or cut off by the tensor's end (a padded batch's). Elsewhere
        // (GQA heads packed in a tile, either end of a sequence, element rows) the threads copy
        // the rows that exist.
        const int position0 = work.tile.position0 + row0;
        if (!elements && tiling.heads_per_tile == 1 && (!kMasked || position0 >= 0) &&
            (position0 + wgmma::kRows <= work.len_q || (!tiling.packed && work.len_q == p.seqlen_q))) {
            hopper::fence_async_shared();
            hopper::named_barrier_sync(epilogue, wgmma::kThreads);
            if (thread == 0) {
                for (int atom = 0; atom < T::kAtoms; ++atom)
                    hopper::tma_store_4d(&maps.o, output_rows + (atom * T::kBlockRows + row0) * wgmma::kRowBytes,
                                         atom * wgmma::kAtomColumns, work.q_row(position0), work.tile.head0, work.q_batch(p));
                hopper::bulk_commit();
            }
        } else {
            hopper::named_barrier_sync(epilogue, wgmma::kThreads);
            for (int chunk = thread; chunk < wgmma::kRows * kChunksPerRow; chunk += wgmma::kThreads) {
                const int row = row0 + chunk / kChunksPerRow, column = chunk % kChunksPerRow * 8;
                if (uint16_t* out = column < p.head_dim ? output_row(row) : nullptr)
                    store_chunk(out, column, *reinterpret_cast<const uint4*>(output_rows + wgmma::swizzled_offset(T::kBlockRows, row, column)));
            }
        }
        if (!T::kOwnOutputRows) {  // the staging rows were Q's: free them once the output has left them
            if (thread == 0) hopper::bulk_wait_read();
            hopper::named_barrier_sync(epilogue, wgmma::kThreads);
            release_q();
        }
    }
    if (thread == 0) hopper::bulk_wait();  // the block's shared memory lives until its stores are done
    if (consumer == 0) take_turn();  // the last consumer's final hand-over
}

}  // namespace mmaprefill
}  // namespace fmha
