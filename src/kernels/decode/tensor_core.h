// The decode family's tensor-core variant (NVIDIA mma.sync): long key ranges, a warp per work item.
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/common/memory.h"
#include "kernels/common/paged_kv.h"
#include "kernels/common/scoring.h"
#include "kernels/config.h"
#include "kernels/decode/work_item.h"
#include "kernels/group.h"
#include "kernels/mma/mma_sync.h"
#include "kernels/numeric.h"

namespace fmha {
namespace decode {

// The tensor-core variant, for archs with mma.sync and key ranges longer than a step: the
// CUDA-core variant pays a shuffle reduction and conversions for every key and row, more
// instructions per byte than the memory system needs at long key ranges. Here a warp owns a
// work item and, per step of 16 keys, computes S^T = K Q^T and O^T += V^T P^T with m16n8k16
// MMAs (mma/mma_sync.h): keys and head dims on the M side, the pass's query rows (8 per row tile)
// on N. Loads go straight from memory into fragments. The order of head dims within a dot
// product is free, so K and Q fragments are plain 16-byte vectors (lane 4g + t: keys g and
// g + 8, vectors 4i + t of the row); a V^T register pairs two keys, built from two 16-byte
// rows by one byte permute (lane 4g + t: keys 2t, 2t + 1, 2t + 8, 2t + 9, vectors g + 8j).
//
// StagesItems: launches whose every key fits one step (seqlen_kv <= 16) walk their items with
// persistent warps, each copying its next item's Q, K and V into shared memory (cp.async) while
// it computes this one: an item of few keys is otherwise a chain of two trips to memory that
// its warp runs alone (docs/decisions.md, "Decode: one-step items staged a work item ahead").
//
// Warps: a block's warps. Four (small blocks, finer occupancy steps), or kWideWarps for the plain
// and paged launches whose items take at least that many splits: a block then merges all of an
// item's splits in shared memory, where blocks of four send them through the workspace and the
// combine kernel (takes_wide_blocks() in decode.h; docs/decisions.md).
//
// HeadsPerTile, RowsAsM: staged items of 16 rows (two row tiles) that run staged_rows_kernel
// (decode/staged_rows.h), the rows on the M side, of one KV head or of HeadsPerTile KV heads'
// few rows and keys each.
inline constexpr int kWideWarps = 16;
template <class Config, int RowTiles, bool StagesItems = false, int Warps = 4, int HeadsPerTile = 1, bool RowsAsM = (HeadsPerTile > 1)>
struct MmaTraits : BlockShape {
    static constexpr int kThreads = 32 * Warps;
    // sm_90 blocks may ask for up to 227 KB; a wide block's merge buffer takes 66 KB at head dim 128.
    static constexpr int kMaxBlockPartialBytes = 96 * 1024;
    static constexpr int kHeadDim = Config::head_dim;
    static constexpr int kGroupWidth = 32;  // a warp
    static constexpr int kGroups = kThreads / kGroupWidth;
    static constexpr int kVec = vector_bytes(Config::arch) / 2;
    static constexpr int kVecsPerRow = kHeadDim / kVec;
    static constexpr int kRowTiles = RowTiles;
    static constexpr int kTileRows = 8 * RowTiles;
    static constexpr int kHeadsPerTile = HeadsPerTile;  // KV heads whose items share a tile (rows as M)
    static constexpr int kRows = kTileRows / HeadsPerTile;  // rows per pass (of each KV head)
    static constexpr int kKeysPerStep = 16;
    static constexpr int kKeySlots = kKeysPerStep / HeadsPerTile;  // of each KV head a step
    // A wide block takes all of an item's splits where they are 8 key steps a warp or fewer
    // (docs/decisions.md, "Decode: one wide block an item for short key ranges").
    static constexpr int kOneBlockMaxKeys = Warps > 4 ? Warps * 8 * kKeysPerStep : 0;
    static constexpr int kKVectors = kHeadDim / 32;  // per key and lane (and per Q row)
    static constexpr int kVVectors = kHeadDim / 64;  // per key and lane
    static constexpr int kDimTiles = kHeadDim / 16;  // M tiles of O^T
    static constexpr bool kWarpMma = true;
    static constexpr bool kStagesItems = StagesItems;
    static constexpr bool kShortKeys = StagesItems;  // one step: no loop, no key splits
    static constexpr bool kRowsAsM = RowsAsM;  // staged_rows_kernel
    static_assert(!RowsAsM || (StagesItems && RowTiles == 2), "rows as M: staged items of 16 rows");
    static_assert(HeadsPerTile == 1 || RowsAsM, "several KV heads a tile: staged_rows_kernel only");
    static constexpr Keys kKeys = Keys::many;
    static constexpr int kKeyRange = StagesItems ? kKeysPerStep : INT32_MAX;
    // One row tile up to head dim 128 fits 128 registers: 4 blocks (16 warps) per multiprocessor,
    // or one wide block; asking for it measured faster on the long-KV cases (docs/decisions.md).
    // Head dim 256 (one row tile) takes up to 255: 2 blocks, each warp's 16 KB step in flight.
    // Staged items of two row tiles at head dim 128 take 3 blocks (168 registers): at 4 they spilled;
    // with the rows as M (staged_rows_kernel) they fit 96 registers at head dim 64: 5 blocks, and
    // at 128 shared memory holds them to 3 (16 KB a warp).
    static constexpr int kMinBlocks = Warps > 4             ? 1
                                      : kHeadDim > 128      ? 2
                                      : RowTiles == 1       ? 4
                                      : StagesItems         ? (kHeadDim > 64 ? 3 : RowsAsM ? 5 : 4)
                                                            : 1;
    // There Q's fragments wait in shared memory, which frees 16 registers, and ptxas's schedule
    // of the key loop measured faster; two row tiles (registers to spare at 1 block per
    // multiprocessor) measured slower with it (docs/decisions.md). At head dim 256 they take
    // 16 KB, which beside a split launch's merge buffer passes the 48 KB a block gets unasked
    // (resident_blocks() asks).
    static constexpr bool kQueryInShared = RowTiles == 1 || StagesItems;  // staged items: always

    static_assert(kVec == 8 && kHeadDim % 64 == 0, "fragments are built from 16-byte vectors");
    static_assert(wave_size(Config::arch) == kGroupWidth, "MMAs take a whole warp");
};

// Word w (0..3) of a 16-byte vector.
__device__ inline uint32_t word(const uint4& v, int w) { return w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w; }

// Staged items' rows in shared memory, [row][16-byte chunk], the chunks of row r permuted by
// an XOR with r & 7: the copies (a warp's lanes on consecutive chunks), the K and Q fragments'
// matrix reads (ldmatrix: eight rows' chunk c a phase) and the V reads (8 lanes a phase: four
// rows' 32 bytes) then meet no bank twice. The index of chunk c of row r, in rows of
// kRowChunks chunks (a whole head dim's, or a part of it):
template <class T, int kRowChunks = T::kHeadDim / 8>
__device__ inline int staged_chunk(int r, int c) {
    return r * kRowChunks + (c ^ (r & 7));
}

// A lane's Q^T fragments (B of S^T = K Q^T), [row tile][vector]: in registers or, where
// T::kQueryInShared, in the lane's own slots of shared memory, read back at every use.
template <class T>
struct QueryFragments {
    using Shared = uint4[T::kRowTiles][T::kKVectors][32];  // [row tile][vector][lane]
    uint4 registers[T::kQueryInShared ? 1 : T::kRowTiles][T::kKVectors];
    Shared& shared;
    int lane;

    __device__ QueryFragments(Shared& warp_slots, int lane_) : shared(warp_slots), lane(lane_) {}
    // Vector i of row tile rt from `from`, or zeros where !valid; complete once wait() has
    // passed. The options variant up to head dim 128 copies it into shared memory
    // asynchronously, so that its paging lookups and first loads need not wait for Q's; the
    // plain variant and head dim 256 measured slower so (docs/decisions.md, "Decode steps: Q by
    // asynchronous copies").
    static constexpr bool kCopied = T::kQueryInShared && T::kOptions && T::kHeadDim <= 128;
    __device__ void load(int rt, int i, const uint16_t* from, bool valid) {
        if constexpr (kCopied) {
            copy_async<16>(&shared[rt][i][lane], from, valid);
            return;
        }
        const uint4 x = valid ? *reinterpret_cast<const uint4*>(from) : make_uint4(0, 0, 0, 0);
        if constexpr (T::kQueryInShared) shared[rt][i][lane] = x;
        else registers[rt][i] = x;
    }
    __device__ void wait() const {
        if constexpr (kCopied) copy_async_wait_all();
    }
    __device__ uint4 get(int rt, int i) const {
        if constexpr (T::kQueryInShared) return load_shared_volatile(&shared[rt][i][lane]);
        else return registers[rt][i];
    }
    // Staged items hold Q as rows (StagedRows' layout): the B fragments (B[k][n] = Q[n][k]) of
    // row tile rt for head dims 32i .. 32i + 31, two MMA steps of 16: {b0, b1} of the first,
    // {b0, b1} of the second (ldmatrix: lane l reads row 8 rt + l % 8, chunk 4i + l / 8).
    __device__ void staged_pair(int rt, int i, uint32_t (&b)[4]) const {
        load_matrices_x4<false>(b, &shared[0][0][0] + staged_chunk<T>(8 * rt + lane % 8, 4 * i + lane / 8));
    }
};

// The options variant's per-lane state, waiting in shared memory as Q does (a lane reads back
// only its own slots): in registers it took the variant past the 128 of 4 blocks per
// multiprocessor, where the plain variant runs, and spilled.
template <class T>
struct OptionSlots {
    // The lane's rows 8 rt + 2t + e: {first, end} of the keys the row sees (none where it does
    // not exist), its ALiBi slope x log2(e) (bits) and its diagonal.
    uint4 view[T::kRowTiles][2][32];
    // The same rows for the stores after the key loop: {head, position}, position -1 where the
    // row does not exist.
    uint2 row[T::kRowTiles][2][32];
    uint2 rule[32];   // the ScoreRule {dot_scale, cap_log2} (bits)
    uint4 pages[32];  // the work item's StepPages {entry, shift} and KV head
};

// A warp's staged K and V rows (dynamic shared memory: at head dim 256 a block's pass 48 KB).
template <class T>
struct StagedRows {
    uint4 k[T::kKeysPerStep * T::kHeadDim / 8], v[T::kKeysPerStep * T::kHeadDim / 8];
};

// Where a row starts in global memory, and whether it exists.
struct GlobalRow {
    const uint16_t* start;
    bool valid;
};

// Copies Rows rows into a staged tile, the warp's lanes on consecutive 16-byte chunks, so that
// each copy instruction reads whole sectors (the fragments' own order, 64 bytes a row over
// four neighbouring lanes, read each sector twice through L2; docs/decisions.md). row(r):
// where row r starts and whether it exists (zeros where not).
template <class T, int Rows, class RowFn>
__device__ inline void copy_rows(uint4* tile, int lane, RowFn&& row) {
    constexpr int kChunks = T::kHeadDim / 8, kRowsPerCopy = 32 / kChunks;
    const int chunk = lane % kChunks;
#pragma unroll
    for (int first = 0; first < Rows; first += kRowsPerCopy) {
        const int r = first + lane / kChunks;
        const auto [start, valid] = row(r);
        copy_async<16>(&tile[staged_chunk<T>(r, chunk)], start + chunk * 8, valid);
    }
}

// A work item and the keys its pass sees, [kv_lo, kv_hi).
struct ItemKeys {
    WorkItem item;
    int kv_lo, kv_hi;
};

// The item of the tile's h-th KV head (T::kHeadsPerTile > 1: item.head_kv is the tile's index).
template <class T>
__device__ inline WorkItem item_of_head(WorkItem item, int h) {
    item.head_kv = item.head_kv * T::kHeadsPerTile + h;
    return item;
}

// Row r of a staged tile (T::kTileRows rows): row r % T::kRows of the tile's KV head r / T::kRows
// (one head unless T::kHeadsPerTile > 1; a head past the last one is not valid). of_head: that
// head's item.
template <class T>
__device__ inline QueryRow tile_query_row(const FwdParams& p, const Plan& plan, const WorkItem& item, int r, WorkItem& of_head) {
    if constexpr (T::kHeadsPerTile == 1) {
        of_head = item;
        return query_row(p, plan, item, item.pass * T::kRows + r);
    }
    of_head = item_of_head<T>(item, r / T::kRows);
    QueryRow row = query_row(p, plan, of_head, of_head.pass * T::kRows + r % T::kRows);
    row.valid = row.valid && of_head.head_kv < p.heads_kv;
    return row;
}

// The K or V rows of a staged item (`base`: p.k or p.v) into a warp's tile, zeros past its keys.
// A tile of several KV heads (T::kHeadsPerTile) holds each head's T::kKeySlots keys in turn.
template <class T>
__device__ inline void copy_key_rows(const FwdParams& p, const ItemKeys& at, const void* base, const TensorStrides& strides,
                                     uint4* tile, int lane) {
    const auto* rows = static_cast<const uint16_t*>(base);
    if constexpr (T::kHeadsPerTile == 1) {
        const uint16_t* first = row_start(rows, strides, nullptr, at.item.batch, at.item.head_kv, at.kv_lo);
        copy_rows<T, T::kKeysPerStep>(tile, lane, [&](int r) {
            return GlobalRow{first + int64_t(r) * strides.row, at.kv_lo + r < at.kv_hi};
        });
    } else {
        // Key slot s: key kv_lo + s % kKeySlots of the tile's head s / kKeySlots; a head past the
        // last one copies zeros.
        copy_rows<T, T::kKeysPerStep>(tile, lane, [&](int slot) {
            const int head_kv = item_of_head<T>(at.item, slot / T::kKeySlots).head_kv, key = at.kv_lo + slot % T::kKeySlots;
            return GlobalRow{row_start(rows, strides, nullptr, at.item.batch, head_kv, key), key < at.kv_hi && head_kv < p.heads_kv};
        });
    }
}

// Staged items: copies the Q rows (T::kTileRows, into q_tile) and the K rows of the item at
// `index` into a warp's tiles, and its V rows unless v_tile is null (copy_key_rows later);
// zeros past its keys and rows, and only zeros for an index past the last item. A tile of
// several KV heads holds each head's T::kRows rows in turn: the item's head_kv is the tile's,
// its heads head_kv x heads a tile on.
template <class T, bool kMasked>
__device__ inline ItemKeys stage_item(const FwdParams& p, const Plan& plan, int64_t index, uint4* q_tile, uint4* k_tile,
                                      uint4* v_tile, int lane) {
    ItemKeys at{locate<false, T::kHeadsPerTile>(p, plan, index)};
    pass_key_range<kMasked>(p, plan, at.item, T::kRows, at.kv_lo, at.kv_hi);
    const auto* q = static_cast<const uint16_t*>(p.q);
    copy_rows<T, T::kTileRows>(q_tile, lane, [&](int r) {
        WorkItem of_head;
        const QueryRow row = tile_query_row<T>(p, plan, at.item, r, of_head);
        return GlobalRow{row_start(q, p.q_strides, nullptr, of_head.batch, row.head, row.position), row.valid};
    });
    copy_key_rows<T>(p, at, p.k, p.k_strides, k_tile, lane);
    if (v_tile != nullptr) copy_key_rows<T>(p, at, p.v, p.v_strides, v_tile, lane);
    return at;
}

template <class T, class Config>
__global__ void __launch_bounds__(T::kThreads, T::kMinBlocks) mma_attend_kernel(const FwdParams p, const Plan plan) {
    constexpr DType kDType = Config::dtype;
    using Numeric = DTypeTraits<kDType>;
    constexpr int RT = T::kRowTiles, KV = T::kKVectors, VV = T::kVVectors, kTiles = T::kDimTiles;
    constexpr bool kMasked = Config::mask == Mask::causal;
    static_assert(!(T::kStagesItems && T::kOptions), "staged items: the plain variant only");

    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int warp_in_block = threadIdx.x / 32;
    const float scale_log2 = p.scale * kLog2e;
    const auto* q_base = static_cast<const uint16_t*>(p.q);
    const auto* k_base = static_cast<const uint16_t*>(p.k);
    const auto* v_base = static_cast<const uint16_t*>(p.v);
    extern __shared__ float4 block_shared[];  // split launches: BlockPartials; staged items: StagedRows
    const BlockPartials<T> block(reinterpret_cast<float*>(block_shared));
    StagedRows<T>& staged = reinterpret_cast<StagedRows<T>*>(block_shared)[T::kStagesItems ? warp_in_block : 0];
    // (static: the host emulation's __shared__ is empty, and its lanes must share these too.)
    static __shared__ typename QueryFragments<T>::Shared query_shared[T::kQueryInShared ? T::kGroups : 1];
    static __shared__ OptionSlots<T> option_slots[T::kOptions ? T::kGroups : 1];

    // Staged items: copies the item at `index` into the warp's tiles.
    [[maybe_unused]] auto stage = [&](int64_t index) {
        return stage_item<T, kMasked>(p, plan, index, &query_shared[warp_in_block][0][0][0], staged.k, staged.v, lane);
    };
    // Their warps walk the items persistently (the launch has at most a resident wave of
    // blocks); each item's copies were issued during the warp's previous item.
    [[maybe_unused]] ItemKeys next;
    if constexpr (T::kStagesItems) next = stage(int64_t(blockIdx.x) * T::kGroups + warp_in_block);

    for (int64_t first = int64_t(blockIdx.x) * T::kGroups; first < plan.items;
         first += int64_t(gridDim.x) * T::kGroups) {
        const WorkItem item = T::kStagesItems ? next.item : locate<T::kOptions>(p, plan, first + warp_in_block);
        const RowSink<T, Config> sink{p, plan, item, block, warp_in_block};
        auto row_at = [&](int r) { return query_row(p, plan, item, item.pass * T::kRows + r); };

        int kv_lo, kv_hi;
        if constexpr (T::kStagesItems) kv_lo = next.kv_lo, kv_hi = next.kv_hi;
        else pass_key_range<kMasked>(p, plan, item, T::kRows, kv_lo, kv_hi);
        // A paged variant's rows (the options variant's, packed ones too). Its steps start on
        // multiples of 16 keys (the keys below kv_lo that this adds are masked for every row), so
        // that each step lies on one page (StepPages): one table entry, loaded a step ahead,
        // places its K and V rows; the first step's is read before anything else, so that its
        // latency passes under Q's loads and the rows' setup rather than before the first K loads.
        int page = 0;  // of the step's keys
        auto item_pages = [&] { return StepPages::of(p.block_table, p.cu_seqlens_kv, p.max_pages_per_seq, p.page_size, item.batch); };
        if constexpr (T::kPaged) {
            kv_lo -= kv_lo % T::kKeysPerStep;
            const int first_key = kv_lo + item.split * T::kKeysPerStep;
            if (first_key < kv_hi) page = item_pages().page_of(p.block_table, first_key);
        }

        // Q^T fragments: row 8 rt + g, vectors 4i + t. Rows past the pass's end are zeros; they
        // compute scores nobody stores. (A staged item's are in its tile.)
        QueryFragments<T> q(query_shared[T::kQueryInShared ? warp_in_block : 0], lane);
        // The rows of this lane's scores and outputs: 8 rt + 2t + e.
        QueryRow mine[RT][2];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
            if constexpr (!T::kStagesItems) {
                const QueryRow row = row_at(8 * rt + g);
                const uint16_t* src = row_start(q_base, p.q_strides, packed_only<T::kOptions>(p.cu_seqlens_q), item.batch, row.head, row.position);
#pragma unroll
                for (int i = 0; i < KV; ++i)
                    q.load(rt, i, src + (4 * i + t) * 8, row.valid);
            }
            mine[rt][0] = row_at(8 * rt + 2 * t);
            mine[rt][1] = row_at(8 * rt + 2 * t + 1);
        }
        OptionSlots<T>& slots = option_slots[T::kOptions ? warp_in_block : 0];
        if constexpr (T::kOptions) {
            const ScoreRule rule = ScoreRule::of(p.scale, p.softcap);
            const StepPages pages = item_pages();
            slots.rule[lane] = make_uint2(__float_as_uint(rule.dot_scale), __float_as_uint(rule.cap_log2));
            slots.pages[lane] = make_uint4(pages.entry, pages.shift, item.head_kv, 0);
#pragma unroll
            for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const QueryRow& row = mine[rt][e];
                    VisibleKeys<kMasked> sees;  // a row that does not exist sees none
                    sees.add(row, item.len_kv, p.window);
                    int lo, hi;
                    sees.key_range(item.len_kv, lo, hi);
                    slots.view[rt][e][lane] =
                        make_uint4(lo, hi,
                                   __float_as_uint(ScoreRule::slope_log2(
                                       sequence_slopes(p.alibi_slopes, p.alibi_batch_stride, item.batch), row.head, row)),
                                   row.diagonal);
                    slots.row[rt][e][lane] = make_uint2(row.head, row.valid ? row.position : -1);
                }
            }
        }

        float row_max[RT][2], row_sum[RT][2], acc[RT][kTiles][4];
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) row_max[rt][e] = -INFINITY, row_sum[rt][e] = 0.f;
#pragma unroll
            for (int m = 0; m < kTiles; ++m) acc[rt][m][0] = acc[rt][m][1] = acc[rt][m][2] = acc[rt][m][3] = 0.f;
        }

        // Orders nothing (a lane reads back only its own slots), but ptxas schedules the key loop
        // after it differently: without it Q in shared memory measured no faster (docs/decisions.md).
        if constexpr (T::kQueryInShared) sync_warp();
        // The plain variant's rows (a paged variant's are k_step's below).
        const uint16_t* k_rows = row_start(k_base, p.k_strides, nullptr, item.batch, item.head_kv, 0);
        const uint16_t* v_rows = row_start(v_base, p.v_strides, nullptr, item.batch, item.head_kv, 0);
        // A staged item is one step, run even where it sees no key (its rows then store zeros).
        const int steps = T::kStagesItems ? 1 : split_steps(kv_lo, kv_hi, T::kKeysPerStep, item.split, plan.by_splits);
        for (int step = 0; step < steps; ++step) {
            const int base = kv_lo + (item.split + step * plan.splits) * T::kKeysPerStep;
            // Where the step's rows start: key `row0_key`'s row is k_step (and v_step).
            const uint16_t* k_step = k_rows;
            const uint16_t* v_step = v_rows;
            int row0_key = 0;
            if constexpr (T::kPaged) {
                // The options variant keeps the item's paging in its slots ({entry, shift, KV head}).
                const uint4 slot = T::kOptions ? load_shared_volatile(&slots.pages[lane])
                                               : make_uint4(item_pages().entry, item_pages().shift, item.head_kv, 0);
                const int shift = int(slot.y);
                k_step = StepPages::row(k_base + int64_t(slot.z) * p.k_strides.head, page, base, shift, p.k_strides);
                v_step = StepPages::row(v_base + int64_t(slot.z) * p.v_strides.head, page, base, shift, p.v_strides);
                row0_key = base;
                page = StepPages{int(slot.x), shift}.page_of(p.block_table, min(base + plan.splits * T::kKeysPerStep, kv_hi - 1));  // the next step's
            }
            auto k_row = [&](int key) { return k_step + int64_t(key - row0_key) * p.k_strides.row; };
            auto v_row = [&](int key) { return v_step + int64_t(key - row0_key) * p.v_strides.row; };
            if constexpr (T::kStagesItems) {  // its copies, every lane's
                copy_async_wait_all();
                sync_warp();
            }
            // Every load of the step first: K keys base + g + 8h; V keys base + 2t + (s & 1) + 8 (s / 2)
            // (a staged item's from its tiles, whose rows start at base: K as the MMAs' A fragments
            // of head dims 16 m .. 16 m + 15, ldmatrix's lane l reading key l % 8 + 8 (l / 8 % 2),
            // chunk 2 m + l / 16, so that no register moves build them).
            uint4 k[2][KV], v[4][VV];
            [[maybe_unused]] uint32_t k_staged[kTiles][4];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int key = base + g + 8 * h;
#pragma unroll
                for (int i = 0; i < KV; ++i) {
                    if constexpr (!T::kStagesItems)
                        k[h][i] = key < kv_hi ? *reinterpret_cast<const uint4*>(k_row(key) + (4 * i + t) * 8) : make_uint4(0, 0, 0, 0);
                }
            }
            if constexpr (T::kStagesItems) {
#pragma unroll
                for (int m = 0; m < kTiles; ++m)
                    load_matrices_x4<false>(k_staged[m], &staged.k[staged_chunk<T>(lane % 8 + 8 * (lane / 8 % 2), 2 * m + lane / 16)]);
            }
#pragma unroll
            for (int s = 0; s < 4; ++s) {
                const int key = base + 2 * t + (s & 1) + 8 * (s / 2);
#pragma unroll
                for (int j = 0; j < VV; ++j) {
                    if constexpr (T::kStagesItems) v[s][j] = load_shared_volatile(&staged.v[staged_chunk<T>(key - base, g + 8 * j)]);
                    else v[s][j] = key < kv_hi ? *reinterpret_cast<const uint4*>(v_row(key) + (g + 8 * j) * 8)
                                               : make_uint4(0, 0, 0, 0);
                }
            }
            q.wait();  // Q's copies, once the first step's loads are out (later steps: nothing to wait for)

            // V^T fragments, shared by the row tiles. Tile 4j + w holds head dims
            // 8 (g + 8j) + 2w (A row g: low halves) and that + 1 (A row g + 8: high halves).
            uint32_t vt[kTiles][4];
#pragma unroll
            for (int j = 0; j < VV; ++j) {
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    const uint32_t k0 = word(v[0][j], w), k1 = word(v[1][j], w), k8 = word(v[2][j], w), k9 = word(v[3][j], w);
                    vt[4 * j + w][0] = low_halves(k0, k1);
                    vt[4 * j + w][1] = high_halves(k0, k1);
                    vt[4 * j + w][2] = low_halves(k8, k9);
                    vt[4 * j + w][3] = high_halves(k8, k9);
                }
            }

#pragma unroll
            for (int rt = 0; rt < RT; ++rt) {
                // s[2h + e]: key base + g + 8h, row 8 rt + 2t + e.
                float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
                for (int i = 0; i < KV; ++i) {
                    if constexpr (T::kStagesItems) {
                        uint32_t qb[4];
                        q.staged_pair(rt, i, qb);
#pragma unroll
                        for (int half = 0; half < 2; ++half) {
                            const uint32_t b[2] = {qb[2 * half], qb[2 * half + 1]};
                            mma_16x8x16<kDType>(s, k_staged[2 * i + half], b);
                        }
                        continue;
                    }
                    const uint4 qi = q.get(rt, i);
#pragma unroll
                    for (int half = 0; half < 2; ++half) {
                        const uint32_t a[4] = {word(k[0][i], 2 * half), word(k[1][i], 2 * half),
                                               word(k[0][i], 2 * half + 1), word(k[1][i], 2 * half + 1)};
                        const uint32_t b[2] = {word(qi, 2 * half), word(qi, 2 * half + 1)};
                        mma_16x8x16<kDType>(s, a, b);
                    }
                }
                // Staged items: the tiles are read (every fragment is in an MMA or in V^T's), so the
                // warp's next item's copies may go out.
                if constexpr (T::kStagesItems) {
                    if (rt == RT - 1) {
                        sync_warp();  // every lane's reads
                        next = stage(first + int64_t(gridDim.x) * T::kGroups + warp_in_block);
                    }
                }

                // Online softmax per row; a row's 16 scores are spread over the 8 lanes of its t.
                float prob[4];
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    float score[2];
                    [[maybe_unused]] uint4 view;
                    [[maybe_unused]] ScoreRule rule;
                    if constexpr (T::kOptions) {
                        view = load_shared_volatile(&slots.view[rt][e][lane]);
                        const uint2 r = load_shared_volatile(&slots.rule[lane]);
                        rule = {__uint_as_float(r.x), __uint_as_float(r.y)};
                    }
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int key = base + g + 8 * h;
                        if constexpr (T::kOptions) {
                            score[h] = (!kMasked || key >= int(view.x)) && key < int(view.y)
                                           ? rule.capped(s[2 * h + e]) - ScoreRule::bias(__uint_as_float(view.z), int(view.w), key)
                                           : -INFINITY;
                        } else
                            score[h] = key < kv_hi && mine[rt][e].template sees<kMasked>(key, p.window) ? s[2 * h + e] * scale_log2
                                                                                                         : -INFINITY;
                    }
                    float step_max = fmaxf(score[0], score[1]);
#pragma unroll
                    for (int offset = 4; offset < 32; offset *= 2) step_max = fmaxf(step_max, __shfl_xor(step_max, offset));
                    float reference;
                    const float rescale = raise_max<T::kShortKeys>(row_max[rt][e], step_max, reference);
                    prob[e] = exp2_approx(score[0] - reference);
                    prob[2 + e] = exp2_approx(score[1] - reference);
                    row_sum[rt][e] = row_sum[rt][e] * rescale + prob[e] + prob[2 + e];  // this lane's part
#pragma unroll
                    for (int m = 0; m < kTiles; ++m) acc[rt][m][e] *= rescale, acc[rt][m][2 + e] *= rescale;
                }

                // P^T as B: lanes hold P^T[key][row] pairs over rows; a transpose pairs them over keys.
                const uint32_t pb[2] = {
                    transpose_8x8<kDType>(pack2<Numeric>(prob[0], prob[1])),
                    transpose_8x8<kDType>(pack2<Numeric>(prob[2], prob[3]))};
#pragma unroll
                for (int m = 0; m < kTiles; ++m) mma_16x8x16<kDType>(acc[rt][m], vt[m], pb);
            }
        }
        q.wait();  // (a range of no steps) no copy may land in the next work item's Q

        // Store: lane 4g + t holds rows 8 rt + 2t + e, head dims 8 (g + 8j) + 2w (acc[..][4j + w][e])
        // and + 1 (acc[..][4j + w][2 + e]). A row that saw no key gets zeros.
#pragma unroll
        for (int rt = 0; rt < RT; ++rt) {
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float sum = row_sum[rt][e];
#pragma unroll
                for (int offset = 4; offset < 32; offset *= 2) sum += __shfl_xor(sum, offset);
                // The options variant finds its rows again: it kept none through the key loop.
                if constexpr (T::kOptions) {
                    const uint2 row = load_shared_volatile(&slots.row[rt][e][lane]);
                    mine[rt][e].head = int(row.x), mine[rt][e].position = int(row.y), mine[rt][e].valid = int(row.y) >= 0;
                }
                if (!mine[rt][e].valid) continue;
                // Staged items: a fast reciprocal (sum >= 1 needs no range fix-up). The loop's
                // options variant spilled with it; it keeps the IEEE division (docs/decisions.md).
                const float inv = sum > 0.f ? (T::kStagesItems ? __fdividef(1.f, sum) : 1.f / sum) : 0.f;
#pragma unroll
                for (int j = 0; j < VV; ++j) {
                    float x[8];
#pragma unroll
                    for (int w = 0; w < 4; ++w) x[2 * w] = acc[rt][4 * j + w][e], x[2 * w + 1] = acc[rt][4 * j + w][2 + e];
                    sink.store8(8 * rt + 2 * t + e, mine[rt][e], 8 * (g + 8 * j), x, inv);
                }
                if (g == 0) sink.store_lse(8 * rt + 2 * t + e, mine[rt][e], row_max[rt][e], sum);
            }
        }
        if constexpr (kMergesInBlock<T>) {
            if (plan.block_splits > 1) merge_block<T, Config>(p, plan, first, block);
        }
    }
    if constexpr (T::kStagesItems) copy_async_wait_all();  // the copies past the last item land before the block ends
}

}  // namespace decode
}  // namespace fmha
