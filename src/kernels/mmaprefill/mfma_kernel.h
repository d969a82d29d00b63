// The tensor-core prefill main loop on CDNA (MFMA 32x32x8, wave64: gfx908, gfx90a, gfx942).
//
// A block takes work tiles of query rows in turn (common/tile_schedule.h, as on Hopper). For a
// tile, it walks the keys its rows see in tiles of kBlockKeys, from the last key tile back to
// the first (key_tiles.h: the tiles needing the causal mask come first, every tile ends inside
// the sequence, keys at negative positions are zeros and masked); a wave skips the key tiles
// none of its rows sees.
// All waves load: the 256 threads fetch key tile i + 1 from global memory into registers
// (16-byte loads) while tile i is computed, its K during the scores and its V during the softmax
// and P.V, and store each into the other of two LDS stages (K row-major, V transposed as V^T;
// d256 has one V^T stage, stored after a second barrier); one barrier per key tile. Each wave
// owns 32 query rows, whose Q stays in registers for the whole work tile, and computes
// transposed products, so that nothing moves between lanes (kernels/mma/mfma.h has the
// layouts):
//   S^T = K.Q^T (lane: 16 keys of one query row per 32-key block) -> mask -> online softmax
//   (fp32, exp2; a row's other keys are in lane l ^ 32) -> P^T (16-bit, in registers: the
//   accumulators are the next product's B operand) -> O^T += V^T.P^T.
// The epilogue divides each lane's O^T column (one query row, 4 head-dim values per register
// group) by its row sum and stores the rows that exist, 8 bytes at a time; the natural-log LSE
// of each row goes to p.lse if asked. docs/mmaprefill.md holds it against the Hopper loop.
// Softcapping and ALiBi (common/scoring.h) turn a tile's dot products into log2-domain scores
// before the mask, where the launch asks for them (a wave-uniform branch per key tile).
// Dropout (common/dropout.h) zeroes probabilities after the softmax has summed them, one
// Philox call per element (the transposed layout holds no four of one call's columns), and
// the epilogue scales O by 1 / (1 - p).
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/dropout.h"
#include "kernels/common/element_rows.h"
#include "kernels/common/fragment_softmax.h"
#include "kernels/common/paged_kv.h"
#include "kernels/common/rows.h"
#include "kernels/common/scoring.h"
#include "kernels/common/tile_schedule.h"
#include "kernels/config.h"
#include "kernels/group.h"
#include "kernels/mma/mfma.h"
#include "kernels/mmaprefill/key_tiles.h"
#include "kernels/mmaprefill/limits.h"
#include "kernels/mmaprefill/tiles.h"
#include "kernels/numeric.h"

namespace fmha {
namespace mmaprefill {

template <class Config>
struct MfmaTraits {
    static constexpr TileShape kShape =
        tile_shape<MatrixCore::mfma>(Config::head_dim, Config::mask == Mask::causal, Config::dtype, false, Variant::plain);
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kConsumers = kShape.consumers;  // waves of 32 query rows
    static constexpr int kBlockRows = kConsumers * mfma::kBlock;
    static constexpr int kBlockKeys = kShape.block_keys;
    static constexpr int kThreads = kConsumers * mfma::kWaveLanes;
    static constexpr int kKeyBlocks = kBlockKeys / mfma::kBlock;                     // 32-key blocks of S^T
    static constexpr int kDimSteps = kHeadDim / mfma::kK;                            // k steps of K.Q^T
    static constexpr int kKeySteps = kBlockKeys / mfma::kK;                          // k steps of V^T.P^T
    static constexpr int kDimBlocks = (kHeadDim + mfma::kBlock - 1) / mfma::kBlock;  // 32-row blocks of O^T
    static constexpr int kChunksPerRow = kHeadDim / 8;                               // 16-byte chunks
    static constexpr int kTileChunks = kBlockKeys * kChunksPerRow;                   // of a K (or V) tile
    static constexpr int kChunksPerThread = (kTileChunks + kThreads - 1) / kThreads;

    // LDS, in 16-bit elements: kKStages stages of K (key rows of kHeadDim), then kVStages of V^T
    // (head-dim rows of kBlockKeys, as many as O^T's whole 32-row blocks read; rows past
    // kHeadDim feed only O^T rows that are never stored, so they are never written). Rows are
    // padded by 16 bytes.
    static constexpr int kKStages = 2;
    static constexpr int kVStages = kShape.stages;
    static constexpr int kKStride = kHeadDim + 8;
    static constexpr int kVStride = kBlockKeys + 8;
    static constexpr int kKElements = kBlockKeys * kKStride;
    static constexpr int kVElements = kDimBlocks * mfma::kBlock * kVStride;
    static constexpr int kSharedBytes = (kKStages * kKElements + kVStages * kVElements) * 2;

    static_assert(kHeadDim % 16 == 0 && kHeadDim <= 256, "head_dim: a multiple of 16 up to 256");
    static_assert(kBlockKeys % mfma::kBlock == 0, "key tile: whole 32-key blocks (the M of K.Q^T)");
    static_assert(kVStages == 1 || kVStages == 2, "one V^T stage, or two used in turn");
    static_assert(kSharedBytes <= shared_bytes(Config::arch), "the arch's LDS per workgroup");
};

template <class Config>
__global__ void __launch_bounds__(MfmaTraits<Config>::kThreads)
    mfma_kernel(const FwdParams p, const PrefillTiling tiling) {
    using T = MfmaTraits<Config>;
    using Numeric = DTypeTraits<Config::dtype>;
    constexpr bool kMasked = Config::mask == Mask::causal;
    using Work = TileWork<kMasked>;

    __shared__ uint4 shared_storage[T::kSharedBytes / 16];
    uint16_t* const shared = reinterpret_cast<uint16_t*>(shared_storage);
    const auto k_tile = [&](int stage) { return shared + stage * T::kKElements; };
    const auto v_tile = [&](int stage) { return shared + T::kKStages * T::kKElements + stage * T::kVElements; };

    // The wave's index in a scalar register: what derives from it (the rows' key range) is uniform.
    const int wave = __builtin_amdgcn_readfirstlane(threadIdx.x / mfma::kWaveLanes);
    const int lane = threadIdx.x % mfma::kWaveLanes;
    const int row0 = wave * mfma::kBlock;  // this wave's first row in a tile
    const int row = row0 + lane % mfma::kBlock;  // this lane's query row (lane ^ 32 holds its other keys)
    const int half = lane / mfma::kBlock;  // the lane holds items 4 half .. 4 half + 3 of each k step
    const float scale_log2 = p.scale * kLog2e;
    const auto row_of = [](int) { return 0; };
    const bool scored = p.softcap != 0.f || p.alibi_slopes != nullptr;
    FragmentScoring<1> scoring;  // this lane's row's ALiBi slope beside the launch's rule
    scoring.init(p.scale, p.softcap);
    const bool dropping = mfma_takes_dropout(T::kHeadDim) && p.dropout.p != 0.f;
    const bool elements = element_rows(p.head_dim);  // rows not in 16-byte vectors (element_rows.h)
    const Dropout dropout = dropping ? Dropout::of(p.dropout) : Dropout{};
    Dropout::Row dropout_row{};  // this lane's row's counter words

    mfma::Accumulator o[T::kDimBlocks];  // O^T: 32 head-dim rows x this wave's 32 query rows each
    mfma::Operand q[T::kDimSteps];       // Q^T as the B operand of K.Q^T, for the whole work tile
    uint4 k_next[T::kChunksPerThread], v_next[T::kChunksPerThread];  // the next key tile, on its way to LDS
    FragmentSoftmax<1, XorPair<mfma::kBlock>> softmax;
    Work work{};             // the current work tile
    KeyTiles<kMasked, 1> keys;  // what this wave's main loop needs of it

    // Tile row r's position, and whether it exists (a packed tile's head, inside the sequence).
    const auto position_of = [&](int r) { return work.tile.position0 + r % tiling.rows_per_head; };
    const auto row_exists = [&](int r) { return r / tiling.rows_per_head < work.tile.heads && work.has_position(position_of(r)); };
    // Chunk c of this thread in a K or V tile: its key and first head-dim column (chunks run
    // along the rows, so a wave's loads are whole rows).
    const auto chunk_of = [&](int c, int& key, int& column) {
        const int n = threadIdx.x + c * T::kThreads;
        key = n / T::kChunksPerRow, column = n % T::kChunksPerRow * 8;
        return T::kTileChunks % T::kThreads == 0 || n < T::kTileChunks;
    };
    // Key tile i's rows of K (or V) into registers; keys before the sequence, and columns past a
    // smaller head_dim than the kernel's, are zeros. Element rows: element by element.
    const auto fetch = [&](const void* tensor, const TensorStrides& strides, int i, uint4 (&next)[T::kChunksPerThread]) {
        const int k0 = work.first_key(i, T::kBlockKeys);
        const auto rows = KvRows<true>::of(tensor, strides, p.cu_seqlens_kv, p.block_table, p.max_pages_per_seq, p.page_size,
                                           work.tile.batch, work.tile.head_kv);
#pragma unroll
        for (int c = 0; c < T::kChunksPerThread; ++c) {
            int key, column;
            if (!chunk_of(c, key, column)) continue;
            // Loads without a branch: a key before the sequence (a column past the head_dim) reads
            // key 0 (column 0) and is replaced by zeros.
            const bool inside = k0 + key >= 0 && column < p.head_dim;
            const uint16_t* row = rows.row(max(k0 + key, 0), strides);
            if (elements) next[c] = inside ? load_chunk_elements(row + column, p.head_dim - column) : make_uint4(0, 0, 0, 0);
            else next[c] = inside ? *reinterpret_cast<const uint4*>(row + column) : make_uint4(0, 0, 0, 0);
        }
    };
    // The fetched rows into LDS: K as they are, V transposed.
    const auto store_k = [&](int stage) {
#pragma unroll
        for (int c = 0; c < T::kChunksPerThread; ++c) {
            int key, column;
            if (chunk_of(c, key, column)) *reinterpret_cast<uint4*>(k_tile(stage) + key * T::kKStride + column) = k_next[c];
        }
    };
    const auto store_v = [&](int stage) {
        uint16_t* const vt = v_tile(stage);
#pragma unroll
        for (int c = 0; c < T::kChunksPerThread; ++c) {
            int key, column;
            if (!chunk_of(c, key, column)) continue;
            const uint32_t words[4] = {v_next[c].x, v_next[c].y, v_next[c].z, v_next[c].w};
#pragma unroll
            for (int e = 0; e < 8; ++e) vt[(column + e) * T::kVStride + key] = uint16_t(words[e / 2] >> (16 * (e % 2)));
        }
    };
    // Key tile i's scores, S^T = K.Q^T, from K stage `stage`.
    mfma::Accumulator scores[T::kKeyBlocks];
    const auto score = [&](int stage) {
        const uint16_t* const kt = k_tile(stage) + (lane % mfma::kBlock) * T::kKStride + 4 * half;
#pragma unroll
        for (int b = 0; b < T::kKeyBlocks; ++b) scores[b] = mfma::Accumulator{};
#pragma unroll
        for (int t = 0; t < T::kDimSteps; ++t)
#pragma unroll
            for (int b = 0; b < T::kKeyBlocks; ++b)
                mfma::mma_32x32x8<Config::dtype, Config::arch>(
                    scores[b], *reinterpret_cast<const mfma::Operand*>(kt + b * mfma::kBlock * T::kKStride + t * mfma::kK), q[t]);
    };
    // Then the mask, the softmax and O^T += V^T.P^T, from V^T stage `stage`.
    const auto accumulate = [&](int i, int stage) {
        const uint16_t* const vt = v_tile(stage) + (lane % mfma::kBlock) * T::kVStride + 4 * half;
        float s[T::kKeyBlocks * mfma::kAccumulators];
#pragma unroll
        for (int e = 0; e < T::kKeyBlocks * mfma::kAccumulators; ++e) s[e] = scores[e / mfma::kAccumulators][e % mfma::kAccumulators];
        const int k0 = keys.first_key(i, T::kBlockKeys);
        const auto key_of = [&](int e) {
            return k0 + e / mfma::kAccumulators * mfma::kBlock + mfma::d_element(lane, e % mfma::kAccumulators).row;
        };
        if (scored) {  // scores in the log2 domain (the softmax then takes a scale of 1)
#pragma unroll
            for (int e = 0; e < T::kKeyBlocks * mfma::kAccumulators; ++e)
                s[e] = scoring.rule.capped(s[e]) - ScoreRule::bias(scoring.slope_log2[0], keys.diagonal[0], key_of(e));
        }
        if (keys.needs_mask(i, T::kBlockKeys)) {  // masked keys get -inf
#pragma unroll
            for (int e = 0; e < T::kKeyBlocks * mfma::kAccumulators; ++e)
                if (!keys.sees(0, key_of(e))) s[e] = -INFINITY;
        }
        float rescale[1];
        softmax.update(s, scored ? 1.f : scale_log2, rescale, row_of);
        if (dropping) {  // keep bits first: a loop of one Philox call per element, then the selects
            constexpr int kElements = T::kKeyBlocks * mfma::kAccumulators;
            static_assert(kElements <= 64, "dropout's keep bits: one 64-bit word per key tile");
            uint64_t kept = 0;
#pragma unroll 1
            for (int e = 0; e < kElements; ++e) kept |= uint64_t(dropout.keeps(dropout_row, key_of(e))) << e;
#pragma unroll
            for (int e = 0; e < kElements; ++e) s[e] = (kept >> e) & 1u ? s[e] : 0.f;
        }
#pragma unroll
        for (int c = 0; c < T::kDimBlocks; ++c) o[c] *= rescale[0];
        // P^T as the B operand of k step `step` (keys 8 step .. 8 step + 7 of the tile).
        mfma::Operand probabilities[T::kKeySteps];
#pragma unroll
        for (int step = 0; step < T::kKeySteps; ++step) {
            const float* block = s + step / 4 * mfma::kAccumulators;
            const int r = mfma::b_register(step % 4, 0);
            probabilities[step] = mfma::Operand{pack2<Numeric>(block[r], block[r + 1]), pack2<Numeric>(block[r + 2], block[r + 3])};
        }
#pragma unroll
        for (int c = 0; c < T::kDimBlocks; ++c)
#pragma unroll
            for (int step = 0; step < T::kKeySteps; ++step)
                mfma::mma_32x32x8<Config::dtype, Config::arch>(
                    o[c], *reinterpret_cast<const mfma::Operand*>(vt + c * mfma::kBlock * T::kVStride + step * mfma::kK),
                    probabilities[step]);
    };

    for (int step = 0; has_step(tiling, step, gridDim.x); ++step) {
        const int index = persistent_tile(tiling, step, blockIdx.x, gridDim.x);
        if (index < 0) continue;
        work = Work::of(p, tiling, index, T::kBlockKeys);
        if (!work.has_rows) continue;  // uniform over the block, as everything up to the epilogue
        {
            const int position[1] = {position_of(row)};
            keys = KeyTiles<kMasked, 1>::of(work, tiling, row0, mfma::kBlock, p.window, position, T::kBlockKeys);
            scoring.set_row(0, sequence_slopes(p.alibi_slopes, p.alibi_batch_stride, work.tile.batch),
                            work.tile.head0 + row / tiling.rows_per_head, row_exists(row));
            if (dropping)
                dropout_row = dropout.row(int64_t(work.tile.batch) * p.heads_q + work.tile.head0 + row / tiling.rows_per_head,
                                          position[0]);
        }
        softmax.init();
#pragma unroll
        for (int c = 0; c < T::kDimBlocks; ++c) o[c] = mfma::Accumulator{};
        {  // this lane's 4 of each k step's 8 head-dim values of its row (zeros for rows that do not exist)
            const bool exists = row_exists(row);
            const auto* q_row = row_start(static_cast<const uint16_t*>(p.q), p.q_strides, p.cu_seqlens_q, work.tile.batch,
                                          work.tile.head0 + row / tiling.rows_per_head, position_of(row));
#pragma unroll
            for (int t = 0; t < T::kDimSteps; ++t) {
                const int column = t * mfma::kK + 4 * half;
                if (!exists || column >= p.head_dim) {
                    q[t] = mfma::Operand{0, 0};
                } else if (elements) {
                    const ElementWords<4> e = load_elements<4>(q_row + column, p.head_dim - column);
                    q[t] = mfma::Operand{e.w[0], e.w[1]};
                } else {
                    q[t] = *reinterpret_cast<const mfma::Operand*>(q_row + column);
                }
            }
        }

        if (keys.count > 0) {
            __syncthreads();  // every wave is done with the previous work tile's LDS stages
            fetch(p.k, p.k_strides, 0, k_next);
            fetch(p.v, p.v_strides, 0, v_next);
            store_k(0);
            store_v(0);
            __syncthreads();
            // Key tile i + 1 on its way while tile i is computed: its K during the scores, its V
            // during the softmax and P.V (so that their registers are not held at once).
            for (int i = 0; i < keys.count; ++i) {
                const bool next = i + 1 < keys.count, seen = i >= keys.begin && i < keys.end;
                if (next) fetch(p.k, p.k_strides, i + 1, k_next);
                if (seen) score(i % T::kKStages);
                if (next) {
                    store_k((i + 1) % T::kKStages);  // its readers, tile i - 1's scores, passed the last barrier
                    fetch(p.v, p.v_strides, i + 1, v_next);
                }
                if (seen) accumulate(i, i % T::kVStages);
                if (next) {
                    if (T::kVStages == 1) __syncthreads();  // every wave is done with the only V^T stage
                    store_v((i + 1) % T::kVStages);
                    __syncthreads();
                }
            }
        }

        // ---- epilogue: normalise; store the rows that exist (a row that saw no key: zeros).
        const float total = softmax.total(0);
        const float inverse = total > 0.f ? (dropping ? dropout.keep_scale : 1.f) / total : 0.f;
        if (row_exists(row)) {
            const int head = work.tile.head0 + row / tiling.rows_per_head;
            if (p.lse && half == 0) p.lse[lse_index(p, work.tile.batch, head, position_of(row))] = softmax.lse(0, total);
            uint16_t* const out = row_start(static_cast<uint16_t*>(p.o), p.o_strides, p.cu_seqlens_q, work.tile.batch, head, position_of(row));
#pragma unroll
            for (int c = 0; c < T::kDimBlocks; ++c)
#pragma unroll
                for (int g = 0; g < mfma::kAccumulators / 4; ++g) {
                    const int column = c * mfma::kBlock + mfma::d_element(lane, 4 * g).row;  // 4 consecutive head-dim values
                    const ElementWords<4> values{{pack2<Numeric>(o[c][4 * g] * inverse, o[c][4 * g + 1] * inverse),
                                                  pack2<Numeric>(o[c][4 * g + 2] * inverse, o[c][4 * g + 3] * inverse)}};
                    if (column >= p.head_dim) continue;
                    if (elements) store_elements<4>(out + column, p.head_dim - column, values);
                    else *reinterpret_cast<uint2*>(out + column) = make_uint2(values.w[0], values.w[1]);
                }
        }
    }
}

}  // namespace mmaprefill
}  // namespace fmha
