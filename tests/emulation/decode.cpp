// The decode family on the host through tests/emulation/hip: its CUDA-core variants
// (kernels/decode/cuda_core.h) at AMD's waves of 64 lanes (CDNA) and 32 (RDNA3), the AMD build's
// decode, which no GPU here runs; and the tensor-core variant (kernels/decode/tensor_core.h) on
// NVIDIA's warp MMAs, emulated from their documented layouts (warp_mma.h), whose code is otherwise
// checked only on the device. Each variant the launchers take (two keys, few keys, the long-keys
// loop with its key splits merged in the block and through the workspace by common/split.h's
// combine kernel; 1, 2 and 4 rows a pass, more rows in passes; the tensor-core variant's staged
// one-step items in passes of 8 and 16 rows and its loop; the run-time options' variants:
// softcapping, ALiBi, a paged cache) is checked against attention in double precision from the
// same 16-bit inputs: GQA and MQA, causal with more queries than keys (rows that see no key), a
// window, per-sequence key counts, pages in shuffled order, outputs and LSEs poisoned before the
// launch. Built and run like backward.cpp (fmha_test.py does; Clang 15 or later):
//   clang++-17 -std=c++20 -O1 -Wno-psabi -pthread -I tests/emulation -I src -I generated \
//       tests/emulation/decode.cpp -o /tmp/decode && /tmp/decode
#include "warp_mma.h"
#include "hip/hip_runtime_api.h"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

// What kernels/common/schedule.h asks of the runtime (the plan here takes its groups from a case).
constexpr hipError_t hipSuccess = 0;
constexpr int hipDeviceAttributeMultiprocessorCount = 0;
inline hipError_t hipGetDevice(int* device) { return *device = 0, hipSuccess; }
inline hipError_t hipDeviceGetAttribute(int* value, int, int) { return *value = 1, hipSuccess; }
// Integer shuffles (a group's trip count) through the float exchange, bit for bit.
inline int __shfl_xor(int x, int mask, int width = 64) {
    return __builtin_bit_cast(int, __shfl_xor(__builtin_bit_cast(float, x), mask, width));
}
inline thread_local dim3 blockDim;

// The kernels' dynamic shared memory (a block's merge buffer): one block runs at a time.
#undef __shared__
#define __shared__
namespace fmha::decode {
alignas(16) float4 block_shared[128 * 1024 / sizeof(float4)];
}  // namespace fmha::decode

#include "fmha_catalogue.h"
#include "kernels/common/split.h"
#include "kernels/decode/kernel_of.h"
#include "kernels/decode/plan.h"

using namespace fmha;
using namespace fmha::decode;

struct Case {
    int batch, hq, hkv, sq, skv;
    int window = -1;      // causal: the keys left of the diagonal a row sees (-1: every one)
    bool ragged = false;  // per-sequence key counts, 1 to skv (FwdParams::seqlens_kv)
    // The groups the plan takes the device to run at once: few split the key range.
    int64_t resident_groups = int64_t(1) << 20;
    float softcap = 0.f;
    bool alibi = false;  // a slope per query head
    int page_size = 0;   // K and V in pages of this many keys, in shuffled order (0: contiguous)
};

// A grid of blocks of `threads` lanes in waves of `lanes`, one block at a time.
template <class Kernel>
void run_blocks(int64_t blocks, int threads, int lanes, Kernel kernel) {
    gridDim.x = unsigned(blocks);
    for (int64_t b = 0; b < blocks; ++b) {
        std::barrier<> all(threads);
        std::vector<std::unique_ptr<std::barrier<>>> waves;
        EmulatedBlock block{&all};
        block.lanes = lanes;
        for (int w = 0; w < threads / lanes; ++w) block.wave[w] = waves.emplace_back(new std::barrier<>(lanes)).get();
        emulated_block = &block;
        auto warps = std::make_unique<EmulatedWarps>();  // NVIDIA's warps of 32 (warp_mma.h)
        for (int w = 0; w < threads / 32; ++w) warps->warp[w] = waves.emplace_back(new std::barrier<>(32)).get();
        emulated_warps = warps.get();
        std::vector<std::thread> workers;  // a thread a lane
        for (int t = 0; t < threads; ++t)
            workers.emplace_back([&, t] {
                threadIdx.x = t, blockIdx.x = unsigned(b);
                blockDim.x = unsigned(threads);
                kernel();
            });
        for (auto& worker : workers) worker.join();
    }
}

// Variant T of Config's decode on case c, against the reference; prints one line.
template <class Config, class T>
bool run(const char* name, const Case& c, unsigned seed) {
    constexpr int d = Config::head_dim;
    constexpr bool kCausal = Config::mask == Mask::causal;
    using Numeric = DTypeTraits<Config::dtype>;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    // Token-major [b, s, h, d], as Python passes them.
    std::vector<uint16_t> q(size_t(c.batch) * c.sq * c.hq * d), k(size_t(c.batch) * c.skv * c.hkv * d), v(k.size());
    for (auto* x : {&q, &k, &v})
        for (auto& e : *x) e = Numeric::pack(2.f * u(rng));
    std::vector<uint16_t> o(q.size(), 0xffff);  // NaN in both dtypes: every row must be written
    std::vector<float> lse(size_t(c.batch) * c.hq * c.sq, NAN);
    std::vector<int> lengths(c.batch, c.skv);
    if (c.ragged)
        for (auto& length : lengths) length = 1 + int(rng() % c.skv);
    std::vector<float> slopes(c.hq);
    for (int h = 0; h < c.hq; ++h) slopes[h] = std::exp2(-8.f * (h + 1) / c.hq);
    // Paged: sequence b's page n is page table[b][n] of [pages, page_size, hkv, d] (FwdParams).
    const int pages = c.page_size ? (c.skv + c.page_size - 1) / c.page_size : 0;
    std::vector<int> table(size_t(c.batch) * pages);
    for (size_t n = 0; n < table.size(); ++n) table[n] = int(n);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<uint16_t> k_pages(table.size() * c.page_size * c.hkv * d), v_pages(k_pages.size());
    for (int b = 0; b < c.batch && c.page_size; ++b)
        for (int j = 0; j < c.skv; ++j) {
            const size_t from = (size_t(b) * c.skv + j) * c.hkv * d;
            const size_t to = (size_t(table[size_t(b) * pages + j / c.page_size]) * c.page_size + j % c.page_size) * c.hkv * d;
            std::copy_n(&k[from], c.hkv * d, &k_pages[to]), std::copy_n(&v[from], c.hkv * d, &v_pages[to]);
        }

    FwdParams p{};
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data();
    p.q_strides = p.o_strides = {int64_t(c.sq) * c.hq * d, d, int64_t(c.hq) * d};
    p.k_strides = p.v_strides = {int64_t(c.skv) * c.hkv * d, d, int64_t(c.hkv) * d};
    p.batch = c.batch, p.heads_q = c.hq, p.heads_kv = c.hkv, p.seqlen_q = c.sq, p.seqlen_kv = c.skv, p.head_dim = d;
    p.seqlens_kv = c.ragged ? lengths.data() : nullptr;
    if (c.page_size) {
        p.k = k_pages.data(), p.v = v_pages.data();
        p.k_strides = p.v_strides = {int64_t(c.page_size) * c.hkv * d, d, int64_t(c.hkv) * d};
        p.block_table = table.data(), p.max_pages_per_seq = pages, p.page_size = c.page_size;
    }
    p.softcap = c.softcap;
    p.alibi_slopes = c.alibi ? slopes.data() : nullptr;
    p.scale = 1.f / std::sqrt(float(d));
    p.window = KeyWindow::of(c.window < 0 ? c.skv : c.window, kCausal ? 0 : c.sq);
    p.lse = lse.data();
    const Plan plan = make_plan<T>(p, c.resident_groups);
    std::vector<float> workspace(workspace_bytes(p, plan.workspace_splits) / sizeof(float));
    p.workspace = workspace.data(), p.workspace_bytes = workspace.size() * sizeof(float);

    // launch_variant's grid: a staged variant's warps walk the items in one wave of resident blocks.
    run_blocks(launch_blocks<T>(plan, std::max<int64_t>(1, c.resident_groups / T::kGroups)), T::kThreads, wave_size(Config::arch),
               [&] {
                   attend_kernel_of<T, Config>()(p, plan);
               });
    if (plan.workspace_splits > 1) {
        // (Its shuffles stay within teams of 8 lanes: the same on waves of 32 and 64.)
        const int64_t units = int64_t(c.batch) * c.hq * c.sq * (d / 8);
        run_blocks(grid_blocks(units * kCombineLanes, kCombineThreads, kCombineThreads), kCombineThreads, 64, [&] {
            combine_kernel<Config>(p, plan.workspace_splits, FastDivisor(p.seqlen_q), FastDivisor(p.heads_q));
        });
    }

    // The reference, per row: softmax over the keys it sees (bottom-right diagonal), in double.
    auto value = [&](uint16_t x) { return double(Numeric::unpack1(x)); };
    double error = 0.f, peak = 0.f, lse_error = 0.f;
    bool written = true;
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.hq; ++h)
            for (int i = 0; i < c.sq; ++i) {
                const int hk = h / (c.hq / c.hkv), len = lengths[b], diagonal = i + len - c.sq;
                const uint16_t* qi = &q[((size_t(b) * c.sq + i) * c.hq + h) * d];
                std::vector<double> s;
                std::vector<int> keys;
                for (int j = 0; j < len; ++j) {
                    if (kCausal && (j > diagonal || (c.window >= 0 && j < diagonal - c.window))) continue;
                    const uint16_t* kj = &k[((size_t(b) * c.skv + j) * c.hkv + hk) * d];
                    double dot = 0.;
                    for (int e = 0; e < d; ++e) dot += value(qi[e]) * value(kj[e]);
                    double score = dot * p.scale;
                    if (c.softcap != 0.f) score = c.softcap * std::tanh(score / c.softcap);
                    if (c.alibi) score -= slopes[h] * std::abs(diagonal - j);  // from the diagonal, either side
                    s.push_back(score), keys.push_back(j);
                }
                double top = -INFINITY, sum = 0.;
                for (double x : s) top = std::max(top, x);
                for (double& x : s) sum += (x = std::exp(x - top));
                const uint16_t* oi = &o[((size_t(b) * c.sq + i) * c.hq + h) * d];
                for (int e = 0; e < d; ++e) {
                    double want = 0.;
                    for (size_t n = 0; n < keys.size(); ++n) want += s[n] / sum * value(v[((size_t(b) * c.skv + keys[n]) * c.hkv + hk) * d + e]);
                    const double got = value(oi[e]);
                    written &= !std::isnan(got);
                    error = std::max(error, std::abs(got - want)), peak = std::max(peak, std::abs(want));
                }
                const float got_lse = lse[(size_t(b) * c.hq + h) * c.sq + i];
                if (keys.empty()) written &= got_lse == -INFINITY;
                else lse_error = std::max(lse_error, std::abs(double(got_lse) - (top + std::log(sum))));
            }
    // 16-bit outputs: half an ulp of the largest, and a little for fp32's order of adds.
    const double tolerance = (Config::dtype == DType::fp16 ? 1e-3 : 8e-3) * std::max(peak, 1.);
    const bool ok = written && error <= tolerance && lse_error <= 1e-4;
    std::string options = kCausal ? (c.window >= 0 ? " causal window " + std::to_string(c.window) : " causal") : "";
    options += std::string(c.ragged ? " ragged" : "") + (c.alibi ? " ALiBi" : "");
    if (c.softcap != 0.f) options += " softcap " + std::to_string(c.softcap).substr(0, 3);
    if (c.page_size) options += " pages of " + std::to_string(c.page_size);
    std::printf("%s %-30s %s d%d b%d h%d/%d s_q %d s_kv %d%s: %d split(s) (%d in the block), error %.1e (of %.1e), LSE %.1e\n",
                ok ? "ok  " : "FAIL", name, Config::dtype == DType::fp16 ? "fp16" : "bf16", d, c.batch, c.hq, c.hkv, c.sq, c.skv,
                options.c_str(), plan.splits, plan.block_splits, error, tolerance, lse_error);
    return ok;
}

// AMD's configs (gfx90a; a wave of 64 lanes) and the variants decode.h's with_variant takes there.
template <DType kD, int kDim, HeadsKind kHeads, Mask kMask>
using Amd = KernelConfig<kD, kDim, kHeads, kMask, Arch::gfx90a>;
template <class Config, int Rows>
using TwoKeys = Traits<Config, 64, Rows, Keys::two>;
template <class Config, int Rows>
using FewKeys = Traits<Config, 64, Rows, Keys::few>;
template <class Config, int Rows>
using LongKeys = Traits<Config, 64, Rows, Keys::many>;
// With run-time options: 4 rows a pass, up to the few-keys range and past it.
template <class Config>
using FewKeysWithOptions = WithOptions<Traits<Config, 64, 4, Keys::few>>;
template <class Config>
using LongKeysWithOptions = WithOptions<Traits<Config, 64, 4, Keys::many>>;

int main() {
    using F64 = Amd<DType::fp16, 64, HeadsKind::gqa, Mask::causal>;
    using B128 = Amd<DType::bf16, 128, HeadsKind::gqa, Mask::nomask>;
    using F128Mha = Amd<DType::fp16, 128, HeadsKind::mha, Mask::causal>;
    using B256 = Amd<DType::bf16, 256, HeadsKind::mqa, Mask::causal>;
    bool ok = true;
    // Two keys: a team of lanes per work item, several items a wave; rows in passes.
    ok &= run<F64, TwoKeys<F64, 1>>("two keys, 1 row", {3, 8, 8, 1, 2}, 1);
    ok &= run<B128, TwoKeys<B128, 4>>("two keys, 4 rows", {5, 8, 2, 1, 2}, 2);
    ok &= run<F64, TwoKeys<F64, 2>>("two keys, 2 rows, s_q 2", {4, 4, 4, 2, 2, -1, true}, 3);
    // Few keys: the group's teams take interleaved keys, each lane several keys' loads.
    ok &= run<F64, FewKeys<F64, 4>>("few keys, 4 rows (8 a head)", {3, 8, 2, 2, 13, -1, true}, 4);
    ok &= run<B128, FewKeys<B128, 2>>("few keys, 2 rows", {4, 4, 2, 1, 16}, 5);
    ok &= run<F128Mha, FewKeys<F128Mha, 1>>("few keys, 1 row, s_q 3", {3, 4, 4, 3, 5, 1}, 6);
    ok &= run<B256, FewKeys<B256, 4>>("few keys, d256 MQA", {2, 4, 1, 1, 7}, 7);
    // The long-keys loop: more queries than keys, windows, ragged lengths; then the key range
    // split across groups, merged in the block and (more splits than a block's groups) through
    // the workspace and the combine kernel.
    ok &= run<F64, LongKeys<F64, 4>>("long keys, 4 rows", {2, 8, 2, 1, 77}, 8);
    ok &= run<F64, LongKeys<F64, 2>>("long keys, s_q > keys", {3, 4, 4, 40, 33, -1, true}, 9);
    ok &= run<B128, LongKeys<B128, 1>>("long keys, split in blocks", {1, 2, 2, 1, 300, -1, false, 8}, 10);
    ok &= run<F128Mha, LongKeys<F128Mha, 2>>("long keys, window, split", {1, 2, 2, 2, 500, 100, true, 4}, 11);
    ok &= run<B128, LongKeys<B128, 4>>("long keys, workspace splits", {1, 8, 2, 1, 1000, -1, false, 64}, 12);
    ok &= run<B256, LongKeys<B256, 4>>("long keys, d256, workspace", {2, 4, 1, 1, 600, -1, true, 32}, 13);
    // Run-time options (common/scoring.h, common/paged_kv.h), each with the others' paths.
    ok &= run<F64, FewKeysWithOptions<F64>>("few keys, options", {3, 8, 2, 2, 11, -1, true, 1 << 20, 2.f, true}, 14);
    ok &= run<B128, FewKeysWithOptions<B128>>("two keys, options, paged", {4, 4, 1, 1, 2, -1, false, 1 << 20, 0.f, true, 16}, 15);
    ok &= run<F128Mha, LongKeysWithOptions<F128Mha>>("long keys, options, paged", {2, 4, 4, 3, 200, 50, true, 1 << 20, 1.5f, true, 16}, 16);
    ok &= run<B128, LongKeysWithOptions<B128>>("long keys, paged, workspace", {1, 8, 2, 1, 900, -1, true, 64, 0.f, false, 64}, 17);
    ok &= run<B256, LongKeysWithOptions<B256>>("long keys, d256, options", {2, 4, 1, 2, 300, -1, false, 16, 3.f, true, 32}, 18);
    // gfx1100 (RDNA3): waves of 32 lanes, long-keys passes of at most 4 rows (decode.h).
    using Rdna = KernelConfig<DType::fp16, 128, HeadsKind::gqa, Mask::causal, Arch::gfx1100>;
    ok &= run<Rdna, Traits<Rdna, 32, 1, Keys::two>>("gfx1100 two keys", {3, 8, 8, 1, 2}, 21);
    ok &= run<Rdna, Traits<Rdna, 32, 2, Keys::few>>("gfx1100 few keys", {3, 4, 2, 1, 9, -1, true}, 22);
    ok &= run<Rdna, Traits<Rdna, 32, 4, Keys::many>>("gfx1100 long keys, workspace", {2, 8, 2, 1, 400, -1, true, 16}, 23);
    ok &= run<Rdna, WithOptions<Traits<Rdna, 32, 4, Keys::many>>>("gfx1100 long keys, options", {2, 8, 2, 2, 150, 40, true, 8, 2.f, true, 16}, 24);
    // ALiBi on both sides of the diagonal (no mask, more queries than one).
    ok &= run<B128, FewKeysWithOptions<B128>>("few keys, ALiBi both sides", {2, 4, 2, 3, 12, -1, true, 1 << 20, 0.f, true}, 19);
    ok &= run<B128, LongKeysWithOptions<B128>>("long keys, ALiBi both sides", {1, 4, 2, 4, 150, -1, false, 8, 0.f, true, 16}, 20);
    // NVIDIA (sm90): the tensor-core variant on warp MMAs, warps of 32 lanes (decode.h's
    // with_variant). Up to 16 keys its warps stage each next work item in shared memory, in passes
    // of 8 rows or, up to d128, of 16 (more rows in more passes; rows that see no key); past them
    // the loop, its splits merged in the block and through the workspace; paged plain launches;
    // the run-time options.
    using N64 = KernelConfig<DType::bf16, 64, HeadsKind::gqa, Mask::causal, Arch::sm90>;
    using N128 = KernelConfig<DType::fp16, 128, HeadsKind::mha, Mask::causal, Arch::sm90>;
    using N128NoMask = KernelConfig<DType::bf16, 128, HeadsKind::gqa, Mask::nomask, Arch::sm90>;
    using N256 = KernelConfig<DType::fp16, 256, HeadsKind::mqa, Mask::causal, Arch::sm90>;
    ok &= run<N64, MmaTraits<N64, 1, true>>("staged, passes of 8", {3, 8, 2, 2, 7, -1, true}, 31);
    ok &= run<N64, MmaTraits<N64, 2, true>>("staged, a pass of 16", {3, 8, 1, 2, 16, -1, true}, 32);
    ok &= run<N64, MmaTraits<N64, 2, true>>("staged, two passes of 16", {2, 16, 1, 2, 12}, 33);
    ok &= run<N128, MmaTraits<N128, 2, true>>("staged, s_q > keys", {2, 4, 4, 11, 9, -1, true}, 34);
    ok &= run<N128NoMask, MmaTraits<N128NoMask, 1, true>>("staged, no mask", {3, 8, 2, 3, 13, -1, true}, 35);
    // One block's warps walking every item: each copies its next item while it computes one.
    ok &= run<N64, MmaTraits<N64, 1, true>>("staged, warps walking items", {5, 8, 2, 3, 11, -1, true, 4}, 44);
    ok &= run<N128, MmaTraits<N128, 2, true>>("staged, passes of 16 walking", {4, 6, 2, 4, 7, -1, true, 4}, 45);
    ok &= run<N256, MmaTraits<N256, 1, true>>("staged, d256 MQA", {2, 4, 1, 3, 5}, 36);
    // 16-row passes with the rows as M (staged_rows_kernel): no mask, 20 rows in two passes; a window.
    ok &= run<N128NoMask, MmaTraits<N128NoMask, 2, true, 4, 1, true>>("staged 16 rows as M, no mask", {3, 8, 2, 5, 14, -1, true}, 46);
    ok &= run<N64, MmaTraits<N64, 2, true, 4, 1, true>>("staged 16 rows as M, window", {3, 8, 2, 3, 12, 5, true}, 47);
    ok &= run<N256, MmaTraits<N256, 2, true, 4, 1, true>>("staged 16 rows as M, d256 in parts", {7, 6, 1, 2, 9, -1, true, 4}, 48);
    // Tiles of several KV heads: 2 heads of up to 8 rows and 8 keys, 4 of up to 4 and 4; head
    // counts that leave the last tile part empty.
    ok &= run<N64, MmaTraits<N64, 2, true, 4, 2>>("staged, 2 heads a tile", {3, 10, 5, 1, 7, -1, true, 4}, 49);
    ok &= run<N128, MmaTraits<N128, 2, true, 4, 2>>("staged, 2 heads a tile, MHA", {2, 3, 3, 6, 8, -1, true}, 50);
    ok &= run<N64, MmaTraits<N64, 2, true, 4, 4>>("staged, 4 heads a tile", {3, 14, 7, 2, 4, -1, true, 4}, 51);
    ok &= run<N128NoMask, MmaTraits<N128NoMask, 2, true, 4, 2>>("staged, 2 heads a tile, no mask", {3, 8, 4, 2, 5, -1, true}, 53);
    using N256Gqa = KernelConfig<DType::bf16, 256, HeadsKind::gqa, Mask::causal, Arch::sm90>;
    ok &= run<N256Gqa, MmaTraits<N256Gqa, 2, true, 4, 4>>("staged, 4 heads a tile, d256", {3, 12, 6, 2, 4, -1, true, 4}, 52);
    ok &= run<N128NoMask, MmaTraits<N128NoMask, 1>>("tensor-core loop, split in blocks", {2, 8, 2, 1, 300, -1, true, 16}, 37);
    ok &= run<N64, MmaTraits<N64, 1>>("tensor-core loop, window", {1, 4, 2, 3, 200, 50, true, 8}, 38);
    ok &= run<N128, MmaTraits<N128, 1>>("tensor-core loop, workspace", {1, 4, 2, 2, 600, -1, false, 64}, 39);
    ok &= run<N128NoMask, WithPages<MmaTraits<N128NoMask, 1>>>("tensor-core loop, paged", {2, 8, 2, 1, 100, -1, true, 16, 0.f, false, 16}, 40);
    ok &= run<N128, WithOptions<MmaTraits<N128, 1>>>("tensor-core loop, options", {2, 4, 4, 3, 150, 40, true, 8, 2.f, true, 16}, 41);
    ok &= run<N64, WithOptions<MmaTraits<N64, 1>>>("tensor-core, options, few keys", {3, 8, 2, 2, 11, -1, true, 1 << 20, 0.f, true}, 42);
    std::printf("%s\n", ok ? "all cases match the reference" : "SOME CASES FAILED");
    return ok ? 0 : 1;
}
