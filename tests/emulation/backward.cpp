// The backward's kernels (kernels/mmabwd/: preprocess, convert, and two main loops: mmabwd's on
// mma.sync, simtbwd's on the CUDA cores) run on the host through tests/emulation/hip, with
// mma.sync and ldmatrix computed from the PTX ISA's documented layouts (kernels/mma/mma_sync.h
// states them) by the 32 lanes of a warp, each a thread. Checked against dq, dk, dv in double
// precision from the same 16-bit inputs and the forward's LSE: odd lengths, GQA and MQA, causal
// with more or fewer queries than keys, a window, per-sequence lengths, rows that see no key, and
// an LSE gradient. The SIMT loop is the AMD build's backward: this is where it is checked.
// Built and run like mfma_prefill.cpp (fmha_test.py does; Clang 15 or later):
//   clang++-17 -std=c++20 -O1 -Wno-psabi -pthread -I tests/emulation -I src -I generated \
//       tests/emulation/backward.cpp -o /tmp/backward && /tmp/backward
#include "warp_mma.h"

#include <cstdio>

#include "fmha_catalogue.h"
#include <atomic>
#include <chrono>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

// The main loop's dynamic shared memory: one block runs at a time.
#undef __shared__
#define __shared__
#define __align__(n)  // the definition below is aligned

namespace fmha {
namespace mmabwd {
alignas(16) uint8_t shared[96 * 1024];
}  // namespace mmabwd
namespace simtbwd {
alignas(16) uint8_t shared[48 * 1024];
}  // namespace simtbwd

inline std::mutex atomic_mutex;

}  // namespace fmha

inline float atomicAdd(float* address, float value) {
    std::lock_guard<std::mutex> lock(fmha::atomic_mutex);
    const float old = *address;
    *address += value;
    return old;
}
inline float2 atomicAdd(float2* address, float2 value) {
    std::lock_guard<std::mutex> lock(fmha::atomic_mutex);
    const float2 old = *address;
    address->x += value.x, address->y += value.y;
    return old;
}

// The deterministic mode's turn counters (kernels/mmabwd/dq_turns.h).
inline int atomicAdd(int* address, int value) {
    std::lock_guard<std::mutex> lock(fmha::atomic_mutex);
    const int old = *address;
    *address += value;
    return old;
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }

inline thread_local dim3 blockDim;

#include "kernels/mmabwd/mfma_kernel.h"
#include "kernels/mmabwd/mma_sync_kernel.h"
#include "kernels/simtbwd/simt_kernel.h"

using namespace fmha;

struct Case {
    int batch, hq, hkv, sq, skv, window;  // window: causal only (0: none)
    bool varlen, d_lse;
    float dropout = 0.f;  // the forward's (common/dropout.h): the kernel regenerates its mask
    bool packed = false;  // varlen's lengths as a packed batch: tokens [total, h, d], cu_seqlens
    bool deterministic = false;  // dQ's adds in turns (dq_turns.h)
    float softcap = 0.f;         // the scoring options (mmabwd/step_scoring.h)
    bool alibi = false;          // slopes per query head
    // The problem's head_dim where smaller than the kernel's (0: the kernel's); its rows then
    // end in 8 guard columns of random inputs and poisoned outputs that must stay so.
    int head_dim = 0;
};

template <class Kernel>
void run_grid(int blocks_x, int blocks_y, int blocks_z, int threads, Kernel kernel) {
    for (int z = 0; z < blocks_z; ++z)
        for (int y = 0; y < blocks_y; ++y)
            for (int x = 0; x < blocks_x; ++x) {
                std::barrier<> all(threads), w0(32), w1(32), w2(32), w3(32), v0(64), v1(64), v2(64), v3(64);
                EmulatedBlock block{&all, {&v0, &v1, &v2, &v3}};
                EmulatedWarps warps{{&w0, &w1, &w2, &w3}};
                emulated_block = &block, emulated_warps = &warps;
                std::vector<std::thread> lanes;
                for (int t = 0; t < threads; ++t)
                    lanes.emplace_back([&, t] {
                        threadIdx.x = t, blockIdx.x = x, blockIdx.y = y, blockIdx.z = z;
                        blockDim.x = unsigned(threads);
                        kernel();
                    });
                for (auto& lane : lanes) lane.join();
            }
}

// mmabwd's main loop on the Config's arch (mma.sync on NVIDIA, MFMA on AMD); kSimt: simtbwd's
// instead (no deterministic loop).
template <class Config, bool kSimt = false>
bool run(const Case& c, unsigned seed) {
    constexpr bool kMfma = !kSimt && matrix_core(Config::arch) == MatrixCore::mfma;
    constexpr DType kD = Config::dtype;
    constexpr bool kCausal = Config::mask == Mask::causal;
    using Numeric = DTypeTraits<kD>;
    const int d = c.head_dim ? c.head_dim : Config::head_dim, pitch = d + (c.head_dim ? 8 : 0);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    auto bits = [&](std::vector<uint16_t>& x, float s) { for (auto& e : x) e = Numeric::pack(s * u(rng)); };
    auto value = [&](uint16_t x) { return double(Numeric::unpack1(x)); };
    // Token-major [b, s, h, d], as Python passes them; packed: [tokens, h, d], whose batch stride
    // is the row stride (FwdParams).
    auto strides = [&](int heads, int seq) {
        return TensorStrides{c.packed ? int64_t(heads) * pitch : int64_t(seq) * heads * pitch, pitch, int64_t(heads) * pitch};
    };
    std::vector<int> lq(c.batch, c.sq), lkv(c.batch, c.skv);
    if (c.varlen || c.packed)
        for (int b = 0; b < c.batch; ++b) lq[b] = 1 + rng() % c.sq, lkv[b] = 1 + rng() % c.skv;
    std::vector<int> cu_q(c.batch + 1, 0), cu_kv(c.batch + 1, 0);
    for (int b = 0; b < c.batch; ++b) cu_q[b + 1] = cu_q[b] + lq[b], cu_kv[b + 1] = cu_kv[b] + lkv[b];
    const int tokens_q = c.packed ? cu_q[c.batch] : c.batch * c.sq, tokens_kv = c.packed ? cu_kv[c.batch] : c.batch * c.skv;
    const size_t nq = size_t(tokens_q) * c.hq * pitch, nkv = size_t(tokens_kv) * c.hkv * pitch;
    std::vector<uint16_t> q(nq), k(nkv), v(nkv), o(nq), d_o(nq), dq(nq, 0x7e00), dk(nkv, 0x7e00), dv(nkv, 0x7e00);
    bits(q, 2.f), bits(k, 2.f), bits(v, 1.f), bits(d_o, 1.f), bits(o, 3.f);  // (o: its guard columns; the rest below)
    const TensorStrides sq = strides(c.hq, c.sq), skv = strides(c.hkv, c.skv);
    auto at = [&](const TensorStrides& s, int b, int h, int i) {
        const std::vector<int>& cu = &s == &sq ? cu_q : cu_kv;  // (which side: the strides passed)
        return size_t((c.packed ? cu[b] : b) * s.batch + h * s.head + i * s.row);
    };
    const int window = kCausal && c.window ? c.window : c.skv;
    const double scale = 1.0 / std::sqrt(double(d));

    // The reference: P from the scores, O and LSE as the forward gives them, then the gradients.
    const size_t rows = size_t(tokens_q) * c.hq;  // LSE [b, h, s] ([h, tokens] packed)
    std::vector<float> lse(rows, 777.f), d_lse(rows, 0.f);
    for (auto& x : d_lse) x = c.d_lse ? u(rng) : 0.f;
    std::vector<double> rq(nq, 0.0), rk(nkv, 0.0), rv(nkv, 0.0);
    const int group = c.hq / c.hkv;
    std::vector<float> slopes(c.hq);
    for (int h = 0; h < c.hq; ++h) slopes[h] = 0.05f * float(h + 1);
    const int64_t seed_offset[2] = {int64_t(uint64_t(seed) * 0x9E3779B97F4A7C15ull), int64_t(seed) << 33};
    const Dropout dropout = Dropout::of(c.dropout, uint64_t(seed_offset[0]), uint64_t(seed_offset[1]));
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.hq; ++h) {
            const int hk = h / group;
            for (int i = 0; i < lq[b]; ++i) {
                const int diag = i + lkv[b] - lq[b];
                // Scores by FwdParams' rule; grad: d score / d (scale dot), 1 - tanh^2 where capped.
                std::vector<double> p(lkv[b], 0.0), grad(lkv[b], 1.0);
                double m = -INFINITY;
                for (int j = 0; j < lkv[b]; ++j) {
                    if (kCausal && !(j <= diag && j > diag - window)) { p[j] = -INFINITY; continue; }
                    double dot = 0;
                    for (int x = 0; x < d; ++x) dot += value(q[at(sq, b, h, i) + x]) * value(k[at(skv, b, hk, j) + x]);
                    p[j] = dot * scale;
                    if (c.softcap > 0) {
                        const double t = std::tanh(p[j] / c.softcap);
                        p[j] = c.softcap * t, grad[j] = 1 - t * t;
                    }
                    if (c.alibi) p[j] -= slopes[h] * std::abs(diag - j);
                    m = std::max(m, p[j]);
                }
                const size_t row = c.packed ? size_t(h) * tokens_q + cu_q[b] + i : (size_t(b) * c.hq + h) * c.sq + i;
                if (m == -INFINITY) {  // sees no key: O = 0, LSE -inf, no gradient
                    lse[row] = -INFINITY;
                    for (int x = 0; x < d; ++x) o[at(sq, b, h, i) + x] = 0;
                    continue;
                }
                double sum = 0;
                for (auto& e : p) sum += e == -INFINITY ? 0.0 : std::exp(e - m);
                lse[row] = float(m + std::log(sum));
                for (auto& e : p) e = e == -INFINITY ? 0.0 : std::exp(e - m) / sum;
                // Z / (1 - p) per key: what multiplied V (1 without dropout).
                std::vector<double> z(lkv[b], 1.0);
                for (int j = 0; j < lkv[b] && c.dropout > 0; ++j)
                    z[j] = dropout.keeps(dropout.row(int64_t(b) * c.hq + h, i), j) ? 1.0 / (1.0 - c.dropout) : 0.0;
                std::vector<double> out(d, 0.0);
                for (int j = 0; j < lkv[b]; ++j)
                    for (int x = 0; x < d; ++x) out[x] += p[j] * z[j] * value(v[at(skv, b, hk, j) + x]);
                double dd = 0;
                for (int x = 0; x < d; ++x) {
                    o[at(sq, b, h, i) + x] = Numeric::pack(float(out[x]));
                    dd += value(d_o[at(sq, b, h, i) + x]) * value(o[at(sq, b, h, i) + x]);
                }
                for (int j = 0; j < lkv[b]; ++j) {
                    if (p[j] == 0.0) continue;
                    double dp = 0;
                    for (int x = 0; x < d; ++x) dp += value(d_o[at(sq, b, h, i) + x]) * value(v[at(skv, b, hk, j) + x]);
                    const double ds = grad[j] * p[j] * (dp * z[j] - dd + d_lse[row]);
                    for (int x = 0; x < d; ++x) {
                        rv[at(skv, b, hk, j) + x] += p[j] * z[j] * value(d_o[at(sq, b, h, i) + x]);
                        rq[at(sq, b, h, i) + x] += scale * ds * value(k[at(skv, b, hk, j) + x]);
                        rk[at(skv, b, hk, j) + x] += scale * ds * value(q[at(sq, b, h, i) + x]);
                    }
                }
            }
        }

    BwdParams p{};
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data(), p.d_o = d_o.data();
    p.dq = dq.data(), p.dk = dk.data(), p.dv = dv.data();
    p.q_strides = p.o_strides = p.d_o_strides = p.dq_strides = sq;
    p.k_strides = p.v_strides = p.dk_strides = p.dv_strides = skv;
    p.lse = lse.data(), p.d_lse = c.d_lse ? d_lse.data() : nullptr;
    p.batch = c.batch, p.heads_q = c.hq, p.heads_kv = c.hkv, p.seqlen_q = c.sq, p.seqlen_kv = c.skv, p.head_dim = d;
    p.seqlens_q = c.varlen ? lq.data() : nullptr, p.seqlens_kv = c.varlen ? lkv.data() : nullptr;
    if (c.packed) p.cu_seqlens_q = cu_q.data(), p.cu_seqlens_kv = cu_kv.data(), p.total_q = tokens_q, p.total_kv = tokens_kv;
    p.scale = float(scale), p.window = KeyWindow::of(window - 1, kCausal ? 0 : c.sq);  // causal: keys up to the diagonal
    p.dropout = {c.dropout, c.dropout > 0 ? seed_offset : nullptr};
    p.deterministic = c.deterministic;
    p.softcap = c.softcap, p.alibi_slopes = c.alibi ? slopes.data() : nullptr;
    std::vector<float> workspace(mmabwd::Workspace::bytes(p, Config::head_dim) / 4, 12345.f);  // garbage: the launch initialises it
    p.workspace = workspace.data(), p.workspace_bytes = workspace.size() * 4;

    using T = std::conditional_t<kMfma, mmabwd::MfmaTiles<Config>, mmabwd::Tiles<Config>>;
    using S = simtbwd::SimtTiles<Config>;
    static_assert((kSimt || T::kSharedBytes <= int(sizeof(mmabwd::shared))) && S::kSharedBytes <= int(sizeof(simtbwd::shared)));
    const int row_blocks = int((mmabwd::Workspace::rows(p) * (Config::head_dim / 8) + 255) / 256);
    run_grid(row_blocks, 1, 1, 256, [&] { mmabwd::preprocess_kernel<Config>(p); });
    // Blocks run one at a time, in order: a deterministic turn that is not exactly the count of
    // the lower tiles' adds never comes, and the watchdog fails the case instead of hanging.
    std::atomic<bool> finished{false};
    std::thread watchdog([&] {
        for (int tick = 0; tick < 1200 && !finished; ++tick) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        if (!finished) {
            std::printf("FAIL: a block waits for a dQ turn that never comes (dq_turns.h)\n");
            std::fflush(stdout);
            std::_Exit(1);
        }
    });
    const auto loop = [&](auto deterministic, auto options) {
        if constexpr (kSimt) {
            static_assert(!deterministic);
            run_grid(int(mmabwd::KeyTile::count(p, S::kKeys)), 1, 1, S::kThreads,
                     [&] { simtbwd::simt_kernel<Config, options>(p); });
        } else if constexpr (kMfma) {
            run_grid(int(mmabwd::KeyTile::count(p, T::kKeys)), 1, 1, T::kThreads,
                     [&] { mmabwd::mfma_kernel<Config, deterministic, options>(p); });
        } else {
            run_grid(int(mmabwd::KeyTile::count(p, T::kKeys)), 1, 1, T::kThreads,
                     [&] { mmabwd::mma_sync_kernel<Config, deterministic, options>(p); });
        }
    };
    const auto with_options = [&](auto deterministic) {
        if (has_scoring_options(p)) loop(deterministic, std::true_type{});
        else loop(deterministic, std::false_type{});
    };
    if constexpr (!kSimt) {
        if (c.deterministic) with_options(std::true_type{});
        else with_options(std::false_type{});
    } else {
        with_options(std::false_type{});
    }
    finished = true;
    watchdog.join();
    run_grid(row_blocks, 1, 1, 256, [&] { mmabwd::convert_kernel<Config>(p); });

    // Error relative to each tensor's largest reference value; padded rows must be zero, guard
    // columns still poisoned.
    auto check = [&](const char* what, const std::vector<uint16_t>& got, const std::vector<double>& ref, double& worst) {
        double peak = 1e-30;
        for (double r : ref) peak = std::max(peak, std::abs(r));
        worst = 0;
        for (size_t i = 0; i < got.size(); ++i) {
            if (int(i % pitch) >= d) {
                if (got[i] != 0x7e00) worst = INFINITY;
                continue;
            }
            const double g = value(got[i]);
            worst = std::isnan(g) ? INFINITY : std::max(worst, std::abs(g - ref[i]) / peak);
            if (worst == INFINITY) break;
        }
        (void)what;
    };
    double eq, ek, ev;
    check("dq", dq, rq, eq), check("dk", dk, rk, ek), check("dv", dv, rv, ev);
    const double tolerance = kD == DType::fp16 ? 4e-3 : 3e-2;
    const bool ok = eq < tolerance && ek < tolerance && ev < tolerance;
    std::printf("%s %s %s d%d%s b%d h%d/%d s_q %d s_kv %d window %d%s%s%s%s: dq %.2e dk %.2e dv %.2e (of the peak)\n",
                ok ? "ok  " : "FAIL", kSimt ? "simt    " : kMfma ? "mfma    " : "mma.sync", kD == DType::fp16 ? "fp16" : "bf16", d,
                c.head_dim ? (" on d" + std::to_string(Config::head_dim)).c_str() : "", c.batch, c.hq, c.hkv, c.sq, c.skv,
                kCausal ? window : 0, c.packed ? " packed" : c.varlen ? " varlen" : "", c.d_lse ? " dLSE" : "",
                c.deterministic ? " deterministic" : "", c.alibi ? " ALiBi" : "", eq, ek, ev);
    if (c.softcap > 0) std::printf("     (softcap %.1f)\n", c.softcap);
    if (c.dropout > 0) std::printf("     (dropout %.2f)\n", c.dropout);
    return ok;
}

template <DType kD, int kD_, Mask kMask, Arch kArch = Arch::sm90>
using Cfg = KernelConfig<kD, kD_, HeadsKind::gqa, kMask, kArch>;
template <DType kD, int kD_, Mask kMask>
using Gfx90a = Cfg<kD, kD_, kMask, Arch::gfx90a>;

int main() {
    bool ok = true;
    ok &= run<Cfg<DType::fp16, 64, Mask::causal>>({2, 4, 2, 33, 70, 0, false, false}, 1);
    ok &= run<Cfg<DType::bf16, 64, Mask::causal>>({1, 2, 1, 100, 37, 0, false, true}, 2);   // rows that see no key
    ok &= run<Cfg<DType::fp16, 64, Mask::nomask>>({2, 3, 3, 65, 129, 0, true, false}, 3);  // per-sequence lengths
    ok &= run<Cfg<DType::bf16, 128, Mask::causal>>({1, 3, 1, 45, 150, 20, false, false}, 4);  // MQA, window
    ok &= run<Cfg<DType::fp16, 128, Mask::nomask>>({1, 2, 2, 70, 31, 0, false, true}, 5);
    // Dropout: the mask regenerated from the forward's seed and offset.
    ok &= run<Cfg<DType::fp16, 64, Mask::causal>>({2, 4, 2, 45, 77, 0, false, true, 0.3f}, 6);
    ok &= run<Cfg<DType::bf16, 128, Mask::nomask>>({1, 2, 1, 40, 70, 0, true, false, 0.2f}, 7);
    // Packed batches: every row written (the outputs start as NaN), none past its sequence.
    ok &= run<Cfg<DType::fp16, 64, Mask::causal>>({4, 4, 2, 90, 70, 0, false, true, 0.f, true}, 8);
    ok &= run<Cfg<DType::bf16, 128, Mask::nomask>>({3, 2, 1, 40, 130, 0, false, false, 0.2f, true}, 9);
    // Deterministic: several key tiles add into each step's rows, in turns.
    ok &= run<Cfg<DType::fp16, 64, Mask::causal>>({1, 4, 2, 150, 300, 100, false, false, 0.f, false, true}, 10);
    ok &= run<Cfg<DType::bf16, 128, Mask::nomask>>({3, 2, 1, 70, 200, 0, false, false, 0.f, true, true}, 11);
    ok &= run<Cfg<DType::fp16, 64, Mask::causal>>({2, 2, 2, 300, 130, 0, true, false, 0.f, false, true}, 12);
    // Softcapping (dS times 1 - tanh^2; a cap near the scores' size, so that it bends them) and
    // ALiBi (each row's own diagonal, per sequence), with the other paths.
    ok &= run<Cfg<DType::fp16, 64, Mask::causal>>({2, 4, 2, 45, 77, 0, true, true, 0.f, false, false, 1.5f}, 13);
    ok &= run<Cfg<DType::bf16, 128, Mask::nomask>>({3, 2, 1, 40, 90, 0, false, false, 0.f, true, false, 0.f, true}, 14);
    ok &= run<Cfg<DType::fp16, 64, Mask::nomask>>({1, 4, 2, 70, 150, 0, false, true, 0.3f, false, true, 2.f, true}, 15);
    // Smaller head_dims on a larger kernel: zeros past the problem's columns, nothing written there.
    ok &= run<Cfg<DType::fp16, 128, Mask::causal>>({2, 4, 2, 45, 77, 0, false, true, 0.f, false, false, 0.f, false, 80}, 17);
    ok &= run<Cfg<DType::bf16, 64, Mask::nomask>>({3, 2, 1, 40, 70, 0, false, false, 0.2f, true, false, 0.f, false, 40}, 18);
    ok &= run<Cfg<DType::fp16, 128, Mask::causal>>({1, 4, 2, 150, 300, 100, false, false, 0.f, false, true, 0.f, false, 72}, 19);
    // The MFMA loop (an AMD arch's Config) on the same paths; gfx908's bf16 takes two half-steps.
    ok &= run<Gfx90a<DType::fp16, 64, Mask::causal>>({2, 4, 2, 33, 70, 0, false, false}, 1);
    ok &= run<Gfx90a<DType::bf16, 64, Mask::causal>>({1, 2, 1, 100, 37, 0, false, true}, 2);
    ok &= run<Gfx90a<DType::fp16, 64, Mask::nomask>>({2, 3, 3, 65, 129, 0, true, false}, 3);
    ok &= run<Gfx90a<DType::bf16, 128, Mask::causal>>({1, 3, 1, 45, 150, 20, false, false}, 4);
    ok &= run<Gfx90a<DType::fp16, 128, Mask::nomask>>({1, 2, 2, 70, 31, 0, false, true}, 5);
    ok &= run<Gfx90a<DType::fp16, 64, Mask::causal>>({2, 4, 2, 45, 77, 0, false, true, 0.3f}, 6);
    ok &= run<Gfx90a<DType::fp16, 64, Mask::causal>>({4, 4, 2, 90, 70, 0, false, true, 0.f, true}, 8);
    ok &= run<Gfx90a<DType::bf16, 128, Mask::nomask>>({3, 2, 1, 40, 130, 0, false, false, 0.2f, true}, 9);
    ok &= run<Gfx90a<DType::fp16, 64, Mask::causal>>({1, 4, 2, 150, 300, 100, false, false, 0.f, false, true}, 10);
    ok &= run<Gfx90a<DType::bf16, 128, Mask::nomask>>({3, 2, 1, 70, 200, 0, false, false, 0.f, true, true}, 11);
    ok &= run<Gfx90a<DType::fp16, 64, Mask::causal>>({2, 4, 2, 45, 77, 0, true, true, 0.f, false, false, 1.5f}, 13);
    ok &= run<Gfx90a<DType::bf16, 128, Mask::nomask>>({3, 2, 1, 40, 90, 0, false, false, 0.f, true, false, 0.f, true}, 14);
    ok &= run<Gfx90a<DType::fp16, 64, Mask::nomask>>({1, 4, 2, 70, 150, 0, false, true, 0.3f, false, true, 2.f, true}, 15);
    ok &= run<Gfx90a<DType::fp16, 128, Mask::causal>>({2, 4, 2, 45, 77, 0, false, true, 0.f, false, false, 0.f, false, 80}, 17);
    ok &= run<Cfg<DType::bf16, 128, Mask::causal, Arch::gfx908>>({1, 4, 2, 66, 97, 0, true, true}, 21);
    // The SIMT loop on the same paths but the deterministic one, and d256.
    ok &= run<Cfg<DType::fp16, 64, Mask::causal>, true>({2, 4, 2, 33, 70, 0, false, false}, 1);
    ok &= run<Cfg<DType::bf16, 64, Mask::causal>, true>({1, 2, 1, 100, 37, 0, false, true}, 2);
    ok &= run<Cfg<DType::fp16, 64, Mask::nomask>, true>({2, 3, 3, 65, 129, 0, true, false}, 3);
    ok &= run<Cfg<DType::bf16, 128, Mask::causal>, true>({1, 3, 1, 45, 150, 20, false, false}, 4);
    ok &= run<Cfg<DType::fp16, 64, Mask::causal>, true>({2, 4, 2, 45, 77, 0, false, true, 0.3f}, 6);
    ok &= run<Cfg<DType::fp16, 64, Mask::causal>, true>({4, 4, 2, 90, 70, 0, false, true, 0.f, true}, 8);
    ok &= run<Cfg<DType::bf16, 128, Mask::nomask>, true>({3, 2, 1, 40, 130, 0, false, false, 0.2f, true}, 9);
    ok &= run<Cfg<DType::fp16, 64, Mask::causal>, true>({2, 4, 2, 45, 77, 0, true, true, 0.f, false, false, 1.5f}, 13);
    ok &= run<Cfg<DType::bf16, 128, Mask::nomask>, true>({3, 2, 1, 40, 90, 0, false, false, 0.f, true, false, 0.f, true}, 14);
    ok &= run<Cfg<DType::bf16, 256, Mask::causal>, true>({1, 4, 2, 37, 50, 0, true, false, 0.1f}, 16);
    ok &= run<Cfg<DType::fp16, 128, Mask::causal>, true>({2, 4, 2, 45, 77, 0, false, true, 0.f, false, false, 0.f, false, 80}, 17);
    ok &= run<Cfg<DType::bf16, 256, Mask::nomask>, true>({2, 2, 1, 30, 40, 0, false, false, 0.f, true, false, 1.5f, true, 192}, 20);
    std::printf("%s\n", ok ? "all cases match the reference" : "SOME CASES FAILED");
    return ok ? 0 : 1;
}
