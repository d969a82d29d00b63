// The tensor-core prefill main loop on Hopper (wgmma, TMA, mbarriers; sm_90a).
//
// A block owns one tile of query rows (common/tile_schedule.h) and walks the keys those rows
// see in tiles of kBlockKeys, from the last tile back to the first, so that the tiles needing
// the causal mask come first and every tile ends inside the sequence (keys at negative
// positions read as zeros and are masked). Warpgroup 0 is the producer: one thread issues
// TMA loads of Q once and of K and V into a kStages-deep ring of shared-memory tiles, each
// completing on a "full" barrier and given back on an "empty" one. Warpgroups 1.. are
// consumers of 64 query rows each:
//   S = Q.K^T (wgmma, both from shared memory) -> mask -> online softmax (fp32, exp2) ->
//   P (16-bit, in registers: the accumulator layout is the A-operand layout) -> O += P.V.
// Two overlaps hide the softmax under tensor-core work (docs/mmaprefill.md):
// - inside a warpgroup, tile j's Q.K^T and tile j-1's P.V are issued together, and tile j's
//   softmax runs while P.V runs;
// - across warpgroups, named barriers hand the tensor cores from one consumer to the next
//   (each issues its two GEMMs in turn), so one's softmax runs under the others' GEMMs.
// The epilogue normalises O, stages it through the warpgroup's own Q rows and writes whole
// 16-byte chunks of valid rows; the natural-log LSE of each row goes to p.lse if asked.
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/fragment_softmax.h"
#include "kernels/common/mask.h"
#include "kernels/common/sequence.h"
#include "kernels/common/tile_schedule.h"
#include "kernels/config.h"
#include "kernels/mma/wgmma.h"
#include "kernels/mmaprefill/tiles.h"
#include "platform/hip_on_cuda/hopper.h"

namespace fmha {
namespace mmaprefill {

template <class Config>
struct WgmmaTraits {
    static constexpr TileShape kShape =
        tile_shape<MatrixCore::wgmma>(Config::head_dim, Config::mask == Mask::causal, Config::dtype);
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kConsumers = kShape.consumers;
    static constexpr int kBlockRows = kConsumers * wgmma::kRows;
    static constexpr int kBlockKeys = kShape.block_keys;
    static constexpr int kStages = kShape.stages;
    static constexpr int kThreads = (kConsumers + 1) * wgmma::kThreads;
    static constexpr int kAtoms = (kHeadDim + wgmma::kAtomColumns - 1) / wgmma::kAtomColumns;

    // Shared memory: Q, the K ring, the V ring (1024-byte aligned swizzle atoms), barriers.
    static constexpr int kQBytes = wgmma::tile_bytes(kBlockRows, kHeadDim);
    static constexpr int kKVBytes = wgmma::tile_bytes(kBlockKeys, kHeadDim);
    static constexpr int kKOffset = kQBytes;
    static constexpr int kVOffset = kKOffset + kStages * kKVBytes;
    static constexpr int kBarrierOffset = kVOffset + kStages * kKVBytes;
    static constexpr int kBarriers = 1 + 4 * kStages;  // Q full; K and V full and empty per stage
    static constexpr int kAlignment = 1024;             // of the dynamic shared memory we use
    static constexpr int kSharedBytes = kBarrierOffset + kBarriers * 8 + kAlignment;

    // Named barriers: 1 .. kConsumers hand the tensor cores between consumers; then one per
    // consumer for its epilogue.
    static constexpr int kTurnBarrier = 1;
    static constexpr int kEpilogueBarrier = kTurnBarrier + kConsumers;

    static_assert(kHeadDim % wgmma::kK == 0 && kHeadDim <= 256, "wgmma N: a multiple of 16 up to 256");
    static_assert(kBlockKeys % wgmma::kK == 0 && kBlockKeys <= 256, "key tile: a multiple of 16 up to 256");
    static_assert(kSharedBytes <= 227 * 1024, "Hopper's shared memory per block");
    static_assert(kEpilogueBarrier + kConsumers <= 16, "named barriers");
};

// The three tensors as TMA maps; a __grid_constant__ kernel parameter, so TMA reads them in place.
struct TensorMaps {
    CUtensorMap q, k, v;
};

// Where the block's barriers live, and the phase bookkeeping of the K/V ring.
template <class T>
struct Pipeline {
    uint64_t* words;
    __device__ uint64_t* q_full() const { return words; }
    __device__ uint64_t* k_full(int stage) const { return words + 1 + stage; }
    __device__ uint64_t* k_empty(int stage) const { return words + 1 + T::kStages + stage; }
    __device__ uint64_t* v_full(int stage) const { return words + 1 + 2 * T::kStages + stage; }
    __device__ uint64_t* v_empty(int stage) const { return words + 1 + 3 * T::kStages + stage; }
    // Tile i's stage, and the parity of the round of the ring it is in.
    __device__ static int stage(int i) { return i % T::kStages; }
    __device__ static uint32_t parity(int i) { return uint32_t(i / T::kStages) & 1u; }
};

// The keys the block's rows see, walked back from kv_end in tiles of kBlockKeys.
struct KeyWalk {
    int kv_end;
    int tiles;
    __device__ int first_key(int i, int block_keys) const { return kv_end - (i + 1) * block_keys; }
};

template <class Config>
__global__ void __launch_bounds__(WgmmaTraits<Config>::kThreads, 1)
    wgmma_kernel(const FwdParams p, const PrefillTiling tiling, const __grid_constant__ TensorMaps maps) {
    using T = WgmmaTraits<Config>;
    using P = Pipeline<T>;
    constexpr bool kCausal = Config::mask == Mask::causal;
    constexpr DType kDType = Config::dtype;

    const PrefillTile tile = locate_tile(tiling, blockIdx.x, p.heads_q, p.heads_kv);
    const int len_q = sequence_length(p.seqlens_q, tile.batch, p.seqlen_q);
    const int len_kv = sequence_length(p.seqlens_kv, tile.batch, p.seqlen_kv);
    if (tile.position0 >= len_q) return;  // the whole block: no row of this tile exists
    const KeyMask<kCausal> mask = KeyMask<kCausal>::of(len_q, len_kv, p.window);
    const int last_position = min(tile.position0 + tiling.rows_per_head, len_q) - 1;
    KeyWalk walk;
    {
        const int kv_begin = mask.first_key(tile.position0);
        walk.kv_end = mask.end_key(last_position);
        walk.tiles = walk.kv_end > kv_begin ? (walk.kv_end - kv_begin + T::kBlockKeys - 1) / T::kBlockKeys : 0;
    }

    extern __shared__ uint8_t shared_raw[];
    uint8_t* shared = reinterpret_cast<uint8_t*>(
        (reinterpret_cast<uintptr_t>(shared_raw) + T::kAlignment - 1) / T::kAlignment * T::kAlignment);
    uint8_t* q_tile = shared;
    const P pipe{reinterpret_cast<uint64_t*>(shared + T::kBarrierOffset)};
    const int warpgroup = threadIdx.x / wgmma::kThreads;

    if (threadIdx.x == 0) {
        hopper::barrier_init(pipe.q_full(), 1);
        for (int s = 0; s < T::kStages; ++s) {
            hopper::barrier_init(pipe.k_full(s), 1);
            hopper::barrier_init(pipe.v_full(s), 1);
            hopper::barrier_init(pipe.k_empty(s), T::kConsumers * 4);  // one arrival per consumer warp
            hopper::barrier_init(pipe.v_empty(s), T::kConsumers * 4);
        }
        hopper::barrier_init_fence();
    }
    __syncthreads();

    if (warpgroup == 0) {  // ---------------------------------------------------------- producer
        hopper::release_registers<T::kShape.producer_registers>();
        if (threadIdx.x != 0 || walk.tiles == 0) return;
        hopper::prefetch_tensor_map(&maps.q);
        hopper::prefetch_tensor_map(&maps.k);
        hopper::prefetch_tensor_map(&maps.v);
        hopper::barrier_arrive_expect(pipe.q_full(), T::kAtoms * tiling.rows_per_head * tiling.heads_per_tile * wgmma::kRowBytes);
        for (int atom = 0; atom < T::kAtoms; ++atom)
            hopper::tma_load_4d(q_tile + atom * T::kBlockRows * wgmma::kRowBytes, &maps.q, atom * wgmma::kAtomColumns,
                                tile.position0, tile.head0, int(tile.batch), pipe.q_full());
        for (int i = 0; i < walk.tiles; ++i) {
            const int stage = P::stage(i), k0 = walk.first_key(i, T::kBlockKeys);
            uint8_t* k_tile = shared + T::kKOffset + stage * T::kKVBytes;
            uint8_t* v_tile = shared + T::kVOffset + stage * T::kKVBytes;
            hopper::barrier_wait(pipe.k_empty(stage), P::parity(i) ^ 1u);
            hopper::barrier_arrive_expect(pipe.k_full(stage), T::kKVBytes);
            for (int atom = 0; atom < T::kAtoms; ++atom)
                hopper::tma_load_4d(k_tile + atom * T::kBlockKeys * wgmma::kRowBytes, &maps.k, atom * wgmma::kAtomColumns,
                                    k0, tile.head_kv, int(tile.batch), pipe.k_full(stage));
            hopper::barrier_wait(pipe.v_empty(stage), P::parity(i) ^ 1u);
            hopper::barrier_arrive_expect(pipe.v_full(stage), T::kKVBytes);
            for (int atom = 0; atom < T::kAtoms; ++atom)
                hopper::tma_load_4d(v_tile + atom * T::kBlockKeys * wgmma::kRowBytes, &maps.v, atom * wgmma::kAtomColumns,
                                    k0, tile.head_kv, int(tile.batch), pipe.v_full(stage));
        }
        return;
    }

    // --------------------------------------------------------------------------- consumers
    hopper::claim_registers<T::kShape.consumer_registers>();
    const int consumer = warpgroup - 1;
    const int thread = threadIdx.x % wgmma::kThreads;
    const int row0 = consumer * wgmma::kRows;  // this warpgroup's first row in the tile
    const bool leader = thread % 32 == 0;      // arrives on "empty" barriers for its warp

    // This thread's two rows: their positions, and whether they exist.
    int position[2];
    bool row_exists[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int row = row0 + wgmma::accumulator_position(thread, 2 * h).row;
        const int head_in_tile = row / tiling.rows_per_head;
        position[h] = tile.position0 + row % tiling.rows_per_head;
        row_exists[h] = head_in_tile < tile.heads && position[h] < len_q;
    }
    // Positions this warpgroup's rows span, for deciding which key tiles need the mask.
    const bool packed = tiling.heads_per_tile > 1;
    const int span_first = packed ? tile.position0 : tile.position0 + row0;
    const int span_last = packed ? last_position : min(tile.position0 + row0 + wgmma::kRows - 1, len_q - 1);
    auto needs_mask = [&](int k0) {
        if (k0 < 0) return true;
        if (!kCausal) return k0 + T::kBlockKeys > len_kv;
        return k0 + T::kBlockKeys - 1 > mask.diagonal(span_first) || k0 <= mask.diagonal(span_last) - p.window;
    };

    float o[T::kHeadDim / 2];
    float s[T::kBlockKeys / 2];
    uint32_t probabilities[T::kBlockKeys / wgmma::kK][4];
    FragmentSoftmax<2, 4> softmax;
    softmax.init();
#pragma unroll
    for (int e = 0; e < T::kHeadDim / 2; ++e) o[e] = 0.f;
    const float scale_log2 = p.scale * kLog2e;
    const auto row_of = [](int e) { return wgmma::row_half(e); };

    // P.V reads its A operand from these registers while it runs: keep them until its wait.
    auto pin_probabilities = [&] {
#pragma unroll
        for (int k = 0; k < T::kBlockKeys / wgmma::kK; ++k) hopper::pin_registers(probabilities[k]);
    };
    auto qk_gemm = [&](int stage) {
        const uint8_t* k_tile = shared + T::kKOffset + stage * T::kKVBytes;
        hopper::pin_registers(s);  // every write to the operands happens before the fence
        hopper::wgmma_fence();
#pragma unroll
        for (int k = 0; k < T::kHeadDim / wgmma::kK; ++k)
            wgmma_ss<T::kBlockKeys, kDType, false>(s, wgmma::k_major_operand(q_tile, T::kBlockRows, row0, k),
                                                   wgmma::k_major_operand(k_tile, T::kBlockKeys, 0, k), k > 0);
        hopper::wgmma_commit();
    };
    auto pv_gemm = [&](int stage) {
        const uint8_t* v_tile = shared + T::kVOffset + stage * T::kKVBytes;
        hopper::pin_registers(o);
        pin_probabilities();
        hopper::wgmma_fence();
#pragma unroll
        for (int k = 0; k < T::kBlockKeys / wgmma::kK; ++k)
            wgmma_rs<T::kHeadDim, kDType, true>(o, probabilities[k], wgmma::n_major_operand(v_tile, T::kBlockKeys, k), 1);
        hopper::wgmma_commit();
    };
    // Masked keys of tile i get -inf; so do keys before the sequence (negative positions).
    auto apply_mask = [&](int i) {
        const int k0 = walk.first_key(i, T::kBlockKeys);
#pragma unroll
        for (int e = 0; e < T::kBlockKeys / 2; ++e) {
            const int key = k0 + wgmma::accumulator_position(thread, e).column;
            if (key < 0 || !mask.sees(position[wgmma::row_half(e)], key)) s[e] = -INFINITY;
        }
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

    if (walk.tiles > 0) {
        if (consumer == T::kConsumers - 1) pass_turn();  // consumer 0 goes first
        hopper::barrier_wait(pipe.q_full(), 0);

        // Tile 0: scores, then probabilities.
        hopper::barrier_wait(pipe.k_full(0), 0);
        take_turn();
        qk_gemm(0);
        pass_turn();
        hopper::wgmma_wait<0>();
        hopper::pin_registers(s);
        if (leader) hopper::barrier_arrive(pipe.k_empty(0));
        if (needs_mask(walk.first_key(0, T::kBlockKeys))) apply_mask(0);
        float rescale[2];  // for O, before it takes the latest tile's P.V
        softmax.update(s, scale_log2, rescale, row_of);
        pack_probabilities();

        for (int i = 1; i < walk.tiles; ++i) {
            // Tile i's scores and tile i-1's P.V, issued together; O is rescaled in between.
            const int stage = P::stage(i), previous = P::stage(i - 1);
            hopper::barrier_wait(pipe.k_full(stage), P::parity(i));
            take_turn();
            qk_gemm(stage);
            rescale_output(rescale);
            hopper::barrier_wait(pipe.v_full(previous), P::parity(i - 1));
            pv_gemm(previous);
            pass_turn();
            hopper::wgmma_wait<1>();  // the scores are done; P.V may still run
            hopper::pin_registers(s);
            if (leader) hopper::barrier_arrive(pipe.k_empty(stage));
            if (needs_mask(walk.first_key(i, T::kBlockKeys))) apply_mask(i);
            softmax.update(s, scale_log2, rescale, row_of);
            hopper::wgmma_wait<0>();  // P.V of tile i-1 is done: its registers are free
            hopper::pin_registers(o);
            pin_probabilities();
            if (leader) hopper::barrier_arrive(pipe.v_empty(previous));
            pack_probabilities();
        }

        const int last = P::stage(walk.tiles - 1);
        rescale_output(rescale);
        hopper::barrier_wait(pipe.v_full(last), P::parity(walk.tiles - 1));
        pv_gemm(last);
        hopper::wgmma_wait<0>();
        hopper::pin_registers(o);
        pin_probabilities();
        if (leader) hopper::barrier_arrive(pipe.v_empty(last));
        if (consumer == 0) take_turn();  // the last consumer's final hand-over
    }

    // ---- epilogue: normalise, stage the 16-bit rows in this warpgroup's Q rows, store.
    float inverse[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const float total = softmax.total(h);
        inverse[h] = total > 0.f ? 1.f / total : 0.f;
        if (p.lse && row_exists[h] && thread % 4 == 0) {
            const int head = tile.head0 + (row0 + wgmma::accumulator_position(thread, 2 * h).row) / tiling.rows_per_head;
            p.lse[(tile.batch * p.heads_q + head) * p.seqlen_q + position[h]] = softmax.lse(h, total);
        }
    }
#pragma unroll
    for (int e = 0; e < T::kHeadDim / 2; e += 2) {
        const wgmma::Position at = wgmma::accumulator_position(thread, e);
        const float scale = inverse[wgmma::row_half(e)];
        *reinterpret_cast<uint32_t*>(q_tile + wgmma::swizzled_offset(T::kBlockRows, row0 + at.row, at.column)) =
            hopper::pack_pair<kDType>(o[e] * scale, o[e + 1] * scale);
    }
    hopper::named_barrier_sync(T::kEpilogueBarrier + consumer, wgmma::kThreads);

    constexpr int kChunksPerRow = T::kHeadDim / 8;  // 16-byte chunks
    auto* out = static_cast<uint16_t*>(p.o) + tile.batch * p.o_strides.batch;
    for (int chunk = thread; chunk < wgmma::kRows * kChunksPerRow; chunk += wgmma::kThreads) {
        const int row = row0 + chunk / kChunksPerRow, column = chunk % kChunksPerRow * 8;
        const int head_in_tile = row / tiling.rows_per_head;
        const int pos = tile.position0 + row % tiling.rows_per_head;
        if (head_in_tile >= tile.heads || pos >= len_q) continue;
        const uint4 value = *reinterpret_cast<const uint4*>(q_tile + wgmma::swizzled_offset(T::kBlockRows, row, column));
        *reinterpret_cast<uint4*>(out + int64_t(tile.head0 + head_in_tile) * p.o_strides.head + int64_t(pos) * p.o_strides.row +
                                  column) = value;
    }
}

}  // namespace mmaprefill
}  // namespace fmha
