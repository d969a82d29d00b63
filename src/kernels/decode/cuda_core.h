// The decode family's CUDA-core variants (short keys, and long keys where the arch or the group
// width has no warp MMA): teams of lanes hold key rows, fp32 dot products and online softmax.
#pragma once

#include <hip/hip_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/paged_kv.h"
#include "kernels/common/scoring.h"
#include "kernels/config.h"
#include "kernels/decode/work_item.h"
#include "kernels/numeric.h"

namespace fmha {
namespace decode {

template <class T, class Numeric>
__device__ inline float dot(const uint4 (&a)[T::kVecsPerLane], const uint4 (&b)[T::kVecsPerLane]) {
    float sum = 0.f;
#pragma unroll
    for (int v = 0; v < T::kVecsPerLane; ++v) {
        const uint32_t aw[4] = {a[v].x, a[v].y, a[v].z, a[v].w}, bw[4] = {b[v].x, b[v].y, b[v].z, b[v].w};
#pragma unroll
        for (int w = 0; w < 4; ++w) {
            const float2 x = Numeric::unpack2(aw[w]), y = Numeric::unpack2(bw[w]);
            sum = fmaf(x.x, y.x, fmaf(x.y, y.y, sum));
        }
    }
    return sum;
}

// Eight K or V elements widened for one row's use (the narrow few-keys ranges). On NVIDIA, bf16
// through cvt.f32.bf16, which ptxas converts anew for each row as it does fp16's cvt.f32.f16:
// the shifts and masks of numeric.h it computes once and keeps across the pass's rows, every
// key's fp32 copy live at once (d128, 8 keys, 4 rows: 190 registers against fp16's 128).
template <class Numeric>
__device__ inline void widen8(const uint4& w, float (&out)[8]) {
#if defined(__HIP_PLATFORM_NVIDIA__)
    if constexpr (std::is_same_v<Numeric, DTypeTraits<DType::bf16>>) {
        const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
            asm("{.reg .b16 lo, hi; mov.b32 {lo, hi}, %2; cvt.f32.bf16 %0, lo; cvt.f32.bf16 %1, hi;}"
                : "=f"(out[2 * i]), "=f"(out[2 * i + 1]) : "r"(words[i]));
        return;
    }
#endif
    unpack8<Numeric>(w, out);
}

// The same, with a's elements already widened ([vector][element]).
template <class T, class Numeric>
__device__ inline float dot(const float (&a)[T::kVecsPerLane][8], const uint4 (&b)[T::kVecsPerLane]) {
    float sum = 0.f;
#pragma unroll
    for (int v = 0; v < T::kVecsPerLane; ++v) {
        float y[8];
        widen8<Numeric>(b[v], y);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum = fmaf(a[v][e], y[e], sum);
    }
    return sum;
}

// Calls fn(std::integral_constant<int, S>) with S = max(keys, Min) slots, at most Max.
template <int Max, int Min, class Fn>
__device__ inline void with_slots(int keys, Fn&& fn) {
    if constexpr (Max > Min) {
        if (keys < Max) return with_slots<Max - 1, Min>(keys, fn);
    }
    fn(std::integral_constant<int, Max>{});
}

template <class T, class Config>
__global__ void __launch_bounds__(T::kThreads) attend_kernel(const FwdParams p, const Plan plan) {
    constexpr int GroupWidth = T::kGroupWidth;
    using Numeric = DTypeTraits<Config::dtype>;
    using Team = Group<T::kTeamWidth>;
    constexpr int R = T::kRows, U = T::kKeysPerSlice, V = T::kVecsPerLane;
    constexpr bool kMasked = Config::mask == Mask::causal;

    const int lane = threadIdx.x % GroupWidth;
    const int slice = lane / T::kTeamWidth;
    const int team_lane = lane % T::kTeamWidth;
    const int group_in_block = threadIdx.x / GroupWidth;
    const float scale_log2 = p.scale * kLog2e;
    const auto* q_base = static_cast<const uint16_t*>(p.q);
    const auto* k_base = static_cast<const uint16_t*>(p.k);
    const auto* v_base = static_cast<const uint16_t*>(p.v);
    extern __shared__ float4 block_shared[];  // split launches: BlockPartials
    const BlockPartials<T> block(reinterpret_cast<float*>(block_shared));

    // Column of this lane's vector v (lanes past the head dimension hold zeros).
    auto column = [&](int v) { return (v * T::kTeamWidth + team_lane) * T::kVec; };

    for (int64_t first = int64_t(blockIdx.x) * T::kGroups; first < plan.items;
         first += int64_t(gridDim.x) * T::kGroups) {
        const WorkItem item = locate<T::kOptions>(p, plan, first + group_in_block);
        const RowSink<T, Config> sink{p, plan, item, block, group_in_block};

        // This pass's rows, and the key range of the pass within its split.
        QueryRow rows[R];
        VisibleKeys<kMasked> visible;
#pragma unroll
        for (int r = 0; r < R; ++r) {
            rows[r] = query_row(p, plan, item, item.pass * R + r);
            visible.add(rows[r], item.len_kv, p.window);
        }
        int kv_lo, kv_hi;
        visible.key_range(item.len_kv, kv_lo, kv_hi);
        RowScoring scoring[R];
        if constexpr (T::kOptions) {
#pragma unroll
            for (int r = 0; r < R; ++r) scoring[r] = RowScoring::of(p.scale, p.softcap, sequence_slopes(p.alibi_slopes, p.alibi_batch_stride, item.batch),
                                                       rows[r].head, rows[r]);
        }

        uint4 q[R][V];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint16_t* row = row_start(q_base, p.q_strides, packed_only<T::kOptions>(p.cu_seqlens_q), item.batch, rows[r].head, rows[r].position);
#pragma unroll
            for (int v = 0; v < V; ++v) {
                q[r][v] = make_uint4(0, 0, 0, 0);
                if (rows[r].valid && column(v) < T::kHeadDim) q[r][v] = *reinterpret_cast<const uint4*>(row + column(v));
            }
        }

        float row_max[R], row_sum[R], acc[R][V][T::kVec];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            row_max[r] = -INFINITY;
            row_sum[r] = 0.f;
#pragma unroll
            for (int v = 0; v < V; ++v) {
#pragma unroll
                for (int e = 0; e < T::kVec; ++e) acc[r][v][e] = 0.f;
            }
        }

        // Slice s stores rows r with r % kSlices == s. A row that saw no key gets zeros.
        auto store_row = [&](int r) {
            if (!rows[r].valid || r % T::kSlices != slice) return;
            // An IEEE division: with a fast reciprocal ptxas stored the rows together, at up to 77
            // more registers (docs/decisions.md).
            const float inv = row_sum[r] > 0.f ? 1.f / row_sum[r] : 0.f;
#pragma unroll
            for (int v = 0; v < V; ++v) {
                if (column(v) < T::kHeadDim) sink.store8(r, rows[r], column(v), acc[r][v], inv);
            }
            if (team_lane == 0) sink.store_lse(r, rows[r], row_max[r], row_sum[r]);
        };

        // Merges row r's slice states in a one-step variant, as soon as the row is done
        // (butterfly: every slice ends with the total; the long-keys variants merge all rows
        // after their loop).
        auto merge_slices = [&](int r) {
#pragma unroll
            for (int offset = T::kTeamWidth; offset < GroupWidth; offset *= 2) {
                const float other_max = __shfl_xor(row_max[r], offset, GroupWidth);
                const float other_sum = __shfl_xor(row_sum[r], offset, GroupWidth);
                const MergeWeights w = merge_max(row_max[r], other_max);
                row_sum[r] = row_sum[r] * w.mine + other_sum * w.theirs;
#pragma unroll
                for (int v = 0; v < V; ++v) {
#pragma unroll
                    for (int e = 0; e < T::kVec; ++e)
                        acc[r][v][e] = acc[r][v][e] * w.mine + __shfl_xor(acc[r][v][e], offset, GroupWidth) * w.theirs;
                }
            }
        };

        const uint16_t* k_rows = row_start(k_base, p.k_strides, packed_only<T::kOptions>(p.cu_seqlens_kv), item.batch, item.head_kv, 0);
        const uint16_t* v_rows = row_start(v_base, p.v_strides, packed_only<T::kOptions>(p.cu_seqlens_kv), item.batch, item.head_kv, 0);
        // The options variant's rows, which may be paged (the plain variant's code is as it was).
        using Rows = KvRows<T::kOptions>;
        const Rows k_paged = Rows::of(p.k, p.k_strides, p.cu_seqlens_kv, p.block_table, p.max_pages_per_seq, p.page_size, item.batch, item.head_kv);
        const Rows v_paged = Rows::of(p.v, p.v_strides, p.cu_seqlens_kv, p.block_table, p.max_pages_per_seq, p.page_size, item.batch, item.head_kv);
        auto k_row = [&](int key) { return T::kOptions ? k_paged.row(key, p.k_strides) : k_rows + int64_t(key) * p.k_strides.row; };
        auto v_row = [&](int key) { return T::kOptions ? v_paged.row(key, p.v_strides) : v_rows + int64_t(key) * p.v_strides.row; };
        // S (a std::integral_constant) of the U key slots hold keys; the others none of any item.
        auto process_step = [&](int step, auto live) {
            constexpr int S = decltype(live)::value;
            const int first_key = kv_lo + (item.split + step * plan.splits) * T::kKeysPerStep;
            // The 16-key few-keys range skips the work of key slots u that no lane's key fills
            // (its range may hold far fewer keys than its step): a count uniform over the wave,
            // as the shuffles of the groups sharing it need (T::kSkipsEmptySlots).
            [[maybe_unused]] int live_slots = S;
            if constexpr (T::kSkipsEmptySlots)
                live_slots = uniform_trip_count<T>((kv_hi - first_key + T::kSlices - 1) / T::kSlices);
            // Issue every load of the step before any use.
            uint4 k[S][V], val[S][V];
#pragma unroll
            for (int u = 0; u < S; ++u) {
                const int key = first_key + u * T::kSlices + slice;
#pragma unroll
                for (int v = 0; v < V; ++v) {
                    k[u][v] = val[u][v] = make_uint4(0, 0, 0, 0);
                    if (key < kv_hi && column(v) < T::kHeadDim) {
                        k[u][v] = *reinterpret_cast<const uint4*>(k_row(key) + column(v));
                        val[u][v] = *reinterpret_cast<const uint4*>(v_row(key) + column(v));
                    }
                }
            }

            // Per row: scores in the log2 domain (keys outside the row's view get -inf), then
            // the online softmax, which rescales what was accumulated to the new running maximum.
#pragma unroll
            for (int r = 0; r < R; ++r) {
                float score[S];
                [[maybe_unused]] float q_wide[V][8];  // T::kWidensQueryOnce
                if constexpr (T::kWidensQueryOnce) {
#pragma unroll
                    for (int v = 0; v < V; ++v) unpack8<Numeric>(q[r][v], q_wide[v]);
                }
#pragma unroll
                for (int u = 0; u < S; ++u) {
                    score[u] = -INFINITY;
                    if (T::kSkipsEmptySlots && u >= live_slots) continue;
                    const int key = first_key + u * T::kSlices + slice;
                    float s;
                    if constexpr (T::kWidensQueryOnce) s = Team::sum(dot<T, Numeric>(q_wide, k[u]));
                    else s = Team::sum(dot<T, Numeric>(q[r], k[u]));
                    if constexpr (T::kOptions)
                        score[u] = key < kv_hi && rows[r].template sees<kMasked>(key, p.window) ? scoring[r].log2_score(s, key) : -INFINITY;
                    else
                        score[u] = key < kv_hi && rows[r].template sees<kMasked>(key, p.window) ? s * scale_log2 : -INFINITY;
                }
                float step_max = score[0];
#pragma unroll
                for (int u = 1; u < S; ++u) step_max = fmaxf(step_max, score[u]);
                float reference;
                const float rescale = raise_max<T::kShortKeys>(row_max[r], step_max, reference);
                row_sum[r] *= rescale;
#pragma unroll
                for (int v = 0; v < V; ++v) {
#pragma unroll
                    for (int e = 0; e < T::kVec; ++e) acc[r][v][e] *= rescale;
                }
#pragma unroll
                for (int u = 0; u < S; ++u) {
                    if (T::kSkipsEmptySlots && u >= live_slots) continue;
                    const float prob = exp2_approx(score[u] - reference);
                    row_sum[r] += prob;
#pragma unroll
                    for (int v = 0; v < V; ++v) {
                        float x[8];
                        if constexpr (T::kWidensQueryOnce) widen8<Numeric>(val[u][v], x);
                        else unpack8<Numeric>(val[u][v], x);
#pragma unroll
                        for (int e = 0; e < T::kVec; ++e) acc[r][v][e] = fmaf(prob, x[e], acc[r][v][e]);
                    }
                }
                // With every key in this one step, the row is done: merging its slices and
                // storing it now frees its registers for the next row.
                if constexpr (T::kShortKeys) {
                    merge_slices(r);
                    store_row(r);
                }
            }
        };
        // The short-keys variant has every key in one step: no loop, so the query rows
        // need no registers past their scores. Keys past kv_hi load nothing and score -inf,
        // so an empty key range (an inactive item, a row with no key) needs no branch, and the
        // loads wait for no wave-wide trip count (docs/decisions.md). The narrow 8-key range
        // computes only the slots the launch's keys fill (p.seqlen_kv: uniform, no trip count to
        // share), each slot count in straight-line code of its own.
        if constexpr (T::kNarrowFew && U > kMinNarrowSlots) {
            with_slots<U, kMinNarrowSlots>(p.seqlen_kv, [&](auto live) { process_step(0, live); });
        } else if constexpr (T::kShortKeys) {
            process_step(0, std::integral_constant<int, U>{});
        } else {
            const int steps = uniform_trip_count<T>(split_steps(kv_lo, kv_hi, T::kKeysPerStep, item.split, plan.by_splits));
            for (int step = 0; step < steps; ++step) process_step(step, std::integral_constant<int, U>{});
        }

        if constexpr (!T::kShortKeys) {
            // Merge the slices' softmax states (butterfly: every slice ends with the total).
#pragma unroll
            for (int offset = T::kTeamWidth; offset < GroupWidth; offset *= 2) {
#pragma unroll
                for (int r = 0; r < R; ++r) {
                    const float other_max = __shfl_xor(row_max[r], offset, GroupWidth);
                    const float other_sum = __shfl_xor(row_sum[r], offset, GroupWidth);
                    const MergeWeights w = merge_max(row_max[r], other_max);
                    row_sum[r] = row_sum[r] * w.mine + other_sum * w.theirs;
#pragma unroll
                    for (int v = 0; v < V; ++v) {
#pragma unroll
                        for (int e = 0; e < T::kVec; ++e)
                            acc[r][v][e] = acc[r][v][e] * w.mine + __shfl_xor(acc[r][v][e], offset, GroupWidth) * w.theirs;
                    }
                }
            }
#pragma unroll
            for (int r = 0; r < R; ++r) store_row(r);
        }
        if constexpr (kMergesInBlock<T>) {
            if (plan.block_splits > 1) merge_block<T, Config>(p, plan, first, block);
        }
    }
}

}  // namespace decode
}  // namespace fmha
