// The CDNA main loop of mmaprefill (kernels/mmaprefill/mfma_kernel.h, as the AMD build compiles
// it) run on the host through the HIP subset of hip/hip_runtime.h beside this file, against a
// reference in double precision from the same 16-bit inputs: the shape classes of the GPU tests
// (odd lengths, windows, packed GQA heads, MQA, variable lengths, both layouts and packed
// variable-length batches, paged KV caches, softcapping and ALiBi, rows that see no key, LSE,
// fewer blocks than tiles), each head-dim class and each arch's bf16 instruction.
// Where no AMD GPU is at hand this is the loop's only run: fmha_test.py builds and runs it with
// Clang 15 or later where one is installed; by hand, from the repository root after `make`:
//   clang++-15 -std=c++20 -O1 -Wno-psabi -pthread -I tests/emulation -I src -I generated \
//       tests/emulation/mfma_prefill.cpp -o /tmp/mfma_prefill && /tmp/mfma_prefill
// Prints a line per case; exits 1 if any fails.
#include "kernels/mmaprefill/mfma_kernel.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

using namespace fmha;

template <DType kDType>
uint16_t to16(float x) { return DTypeTraits<kDType>::pack(x); }
template <DType kDType>
float from16(uint16_t v) { return DTypeTraits<kDType>::unpack1(v); }

struct Case {
    int batch, hq, hkv, sq, skv;
    int left, right;  // the window's sides (-1: unbounded); causal is (-1, 0)
    bool varlen, lse;
    int layout;  // 0: [batch, heads, seq, d]; 1: [batch, seq, heads, d]; 2: packed [tokens, heads, d] (varlen)
    int blocks;  // the grid (blocks take tiles in rounds)
    float dropout = 0.f;  // common/dropout.h: the reference applies the kernel's mask
    int page_size = 0;    // > 0: K/V in shuffled pages of a paged cache (layouts 0 and 1), the rest of each page NaN
    float softcap = 0.f;  // > 0: scores softcap tanh(scale dot / softcap)
    int alibi = 0;        // ALiBi: minus slope |diagonal - key|; 1: a slope per query head, 2: per sequence and head
    int head_dim = 0;     // the problem's, rows that wide (0: the kernel's); not a multiple of 8: element rows
};

template <class Config>
bool run(const Case& c, unsigned seed) {
    constexpr DType kD = Config::dtype;
    constexpr bool kMasked = Config::mask == Mask::causal;
    const int d = c.head_dim ? c.head_dim : Config::head_dim;
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const bool packed = c.layout == 2;  // FwdParams: a packed tensor's batch stride is its row stride
    auto strides = [&](int heads, int seq) {
        return c.layout == 0 ? TensorStrides{int64_t(heads) * seq * d, int64_t(seq) * d, d}
                             : TensorStrides{packed ? int64_t(heads) * d : int64_t(heads) * seq * d, d, int64_t(heads) * d};
    };
    auto at_kv = [&](const TensorStrides& s, int b, int h, int j) {  // layouts 0 and 1
        return size_t(b * s.batch + h * s.head + j * s.row);
    };
    std::vector<int> lq(c.batch, c.sq), lkv(c.batch, c.skv);
    if (c.varlen)
        for (int b = 0; b < c.batch; ++b) lq[b] = 1 + rng() % c.sq, lkv[b] = 1 + rng() % c.skv;
    std::vector<int> cu_q(c.batch + 1, 0), cu_kv(c.batch + 1, 0);
    for (int b = 0; b < c.batch; ++b) cu_q[b + 1] = cu_q[b] + lq[b], cu_kv[b + 1] = cu_kv[b] + lkv[b];
    const size_t rows_q = packed ? size_t(cu_q.back()) : size_t(c.batch) * c.sq;
    const size_t rows_kv = packed ? size_t(cu_kv.back()) : size_t(c.batch) * c.skv;
    const size_t nq = rows_q * c.hq * d, nkv = rows_kv * c.hkv * d;
    std::vector<uint16_t> q(nq), k(nkv), v(nkv), o(nq, 0x7e00);  // poison: rows never written keep it
    for (auto& x : q) x = to16<kD>(u(rng));
    for (auto& x : k) x = to16<kD>(u(rng));
    for (auto& x : v) x = to16<kD>(u(rng));
    std::vector<float> lse(rows_q * c.hq, 12345.f);
    FwdParams p{};
    p.q = q.data(), p.k = k.data(), p.v = v.data(), p.o = o.data();
    p.q_strides = p.o_strides = strides(c.hq, c.sq);
    p.k_strides = p.v_strides = strides(c.hkv, c.skv);
    p.batch = c.batch, p.heads_q = c.hq, p.heads_kv = c.hkv, p.seqlen_q = c.sq, p.seqlen_kv = c.skv, p.head_dim = d;
    p.seqlens_q = c.varlen && !packed ? lq.data() : nullptr, p.seqlens_kv = c.varlen && !packed ? lkv.data() : nullptr;
    if (packed) {
        p.cu_seqlens_q = cu_q.data(), p.cu_seqlens_kv = cu_kv.data();
        p.total_q = cu_q.back(), p.total_kv = cu_kv.back();
    }
    const TensorStrides kv_strides = p.k_strides;  // of k and v, which the reference reads
    std::vector<uint16_t> k_pages, v_pages;
    std::vector<int> table;
    if (c.page_size > 0) {
        const int max_pages = (c.skv + c.page_size - 1) / c.page_size, pages = c.batch * max_pages;
        table.resize(pages);
        for (int n = 0; n < pages; ++n) table[n] = n;
        std::shuffle(table.begin(), table.end(), rng);
        k_pages.assign(size_t(pages) * c.page_size * c.hkv * d, 0x7e00), v_pages = k_pages;
        for (int b = 0; b < c.batch; ++b)
            for (int j = 0; j < lkv[b]; ++j)
                for (int h = 0; h < c.hkv; ++h)
                    for (int x = 0; x < d; ++x) {
                        const size_t to = ((size_t(table[b * max_pages + j / c.page_size]) * c.page_size + j % c.page_size) *
                                           c.hkv + h) * d + x;
                        k_pages[to] = k[at_kv(kv_strides, b, h, j) + x], v_pages[to] = v[at_kv(kv_strides, b, h, j) + x];
                    }
        p.k = k_pages.data(), p.v = v_pages.data();
        p.k_strides = p.v_strides = TensorStrides{int64_t(c.page_size) * c.hkv * d, d, int64_t(c.hkv) * d};
        p.block_table = table.data(), p.max_pages_per_seq = max_pages, p.page_size = c.page_size;
    }
    p.scale = 1.f / std::sqrt(float(d));
    std::vector<float> slopes(size_t(c.batch) * c.hq);
    for (size_t n = 0; n < slopes.size(); ++n) slopes[n] = std::exp2(-8.f * float(n % c.hq + 1) / float(c.hq)) * (1.f + float(n / c.hq));
    p.softcap = c.softcap, p.alibi_slopes = c.alibi ? slopes.data() : nullptr;
    const int slope_stride = c.alibi == 2 ? c.hq : 0;  // between sequences' rows
    p.alibi_batch_stride = slope_stride;
    p.window = KeyWindow::of(c.left < 0 ? c.skv : c.left, c.right < 0 ? c.sq : c.right);
    p.lse = c.lse ? lse.data() : nullptr;
    const int64_t seed_offset[2] = {int64_t(uint64_t(seed) * 0x9E3779B97F4A7C15ull), int64_t(seed) << 40};
    p.dropout = {c.dropout, c.dropout > 0 ? seed_offset : nullptr};
    const Dropout dropout = Dropout::of(c.dropout, uint64_t(seed_offset[0]), uint64_t(seed_offset[1]));
    // As mmaprefill.h's tiling_of (whose header needs the HIP runtime) makes it for AMD.
    const PrefillTiling tiling = PrefillTiling::of(p, mmaprefill::MfmaTraits<Config>::kBlockRows, kMasked, 0, 0);
    const int blocks = int(std::min<int64_t>(tiling.units, c.blocks));
    gridDim.x = blocks;
    for (int block = 0; block < blocks; ++block) {
        std::barrier<> all(256), w0(64), w1(64), w2(64), w3(64);
        EmulatedBlock state{&all, {&w0, &w1, &w2, &w3}};
        emulated_block = &state;
        std::vector<std::thread> threads;
        for (int t = 0; t < 256; ++t)
            threads.emplace_back([&, t] {
                threadIdx.x = t, blockIdx.x = block;
                mmaprefill::mfma_kernel<Config>(p, tiling);
            });
        for (auto& th : threads) th.join();
    }
    double worst = 0, worst_lse = 0;
    int untouched_bad = 0;
    auto at = [&](const TensorStrides& s, const std::vector<int>& cu, int b, int h, int i) {
        return packed ? size_t((cu[b] + i) * s.row + h * s.head) : size_t(b * s.batch + h * s.head + i * s.row);
    };
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.hq; ++h) {
            const int hk = h / (c.hq / c.hkv);
            for (int i = 0; i < c.sq; ++i) {
                const size_t orow = packed && i >= lq[b] ? 0 : at(p.o_strides, cu_q, b, h, i);
                if (i >= lq[b]) {  // past the sequence (packed: the next one's rows, or none)
                    for (int x = 0; x < d && !packed; ++x) untouched_bad += o[orow + x] != 0x7e00;
                    continue;
                }
                const int diag = i + lkv[b] - lq[b];
                std::vector<double> s(lkv[b]);
                double m = -INFINITY;
                for (int j = 0; j < lkv[b]; ++j) {
                    const bool sees = !kMasked || ((c.right < 0 || j <= diag + c.right) && (c.left < 0 || j >= diag - c.left));
                    if (!sees) { s[j] = -INFINITY; continue; }
                    double dot = 0;
                    for (int x = 0; x < d; ++x)
                        dot += double(from16<kD>(q[at(p.q_strides, cu_q, b, h, i) + x])) *
                               from16<kD>(k[at(kv_strides, cu_kv, b, hk, j) + x]);
                    s[j] = c.softcap > 0 ? c.softcap * std::tanh(dot * p.scale / c.softcap) : dot * p.scale;
                    if (c.alibi) s[j] -= double(slopes[size_t(b) * slope_stride + h]) * std::abs(diag - j);
                    m = std::max(m, s[j]);
                }
                double sum = 0;
                std::vector<double> out(d, 0.0);
                for (int j = 0; j < lkv[b]; ++j) {
                    if (s[j] == -INFINITY) continue;
                    const double e = std::exp(s[j] - m);
                    sum += e;  // the undropped probabilities' sum (and LSE)
                    const double z = c.dropout == 0.f ? 1.0
                                     : dropout.keeps(dropout.row(int64_t(b) * c.hq + h, i), j) ? 1.0 / (1.0 - c.dropout)
                                                                                                 : 0.0;
                    for (int x = 0; x < d; ++x) out[x] += e * z * from16<kD>(v[at(kv_strides, cu_kv, b, hk, j) + x]);
                }
                for (int x = 0; x < d; ++x) {
                    const double ref = sum > 0 ? out[x] / sum : 0.0;
                    worst = std::max(worst, std::fabs(ref - from16<kD>(o[orow + x])));
                }
                if (c.lse) {
                    const double ref = sum > 0 ? m + std::log(sum) : -INFINITY;
                    const float got = packed ? lse[size_t(h) * cu_q.back() + cu_q[b] + i] : lse[(size_t(b) * c.hq + h) * c.sq + i];
                    worst_lse = std::max(worst_lse, ref == -INFINITY ? (got == -INFINITY ? 0.0 : 1e9) : std::fabs(ref - got));
                }
            }
        }
    const double tolerance = kD == DType::fp16 ? 1e-2 : 3e-2;
    const bool ok = worst < tolerance && worst_lse < 1e-3 && untouched_bad == 0;
    std::printf("%s d%d %s b%d h%d/%d s%d/%d window (%d, %d)%s%s%s%s%s%s layout %d, %d blocks for %lld tiles of %d head(s): "
                "max |error| %.1e, LSE %.1e, rows past a sequence written %d: %s\n",
                kD == DType::fp16 ? "fp16" : "bf16", d, kMasked ? "causal" : "nomask", c.batch, c.hq, c.hkv, c.sq, c.skv,
                c.left, c.right, c.varlen ? " varlen" : "", c.lse ? " lse" : "", c.dropout > 0 ? " dropout" : "", c.page_size > 0 ? " paged" : "",
                c.softcap > 0 ? " softcap" : "", c.alibi == 2 ? " alibi per sequence" : c.alibi ? " alibi" : "", c.layout, blocks, (long long)tiling.tiles,
                tiling.heads_per_tile, worst, worst_lse, untouched_bad, ok ? "OK" : "FAIL");
    return ok;
}

template <DType kD, int kDim, HeadsKind kHeads, Mask kMask, Arch kArch>
using C = KernelConfig<kD, kDim, kHeads, kMask, kArch>;
constexpr DType fp16 = DType::fp16, bf16 = DType::bf16;
constexpr HeadsKind gqa = HeadsKind::gqa, mqa = HeadsKind::mqa, mha = HeadsKind::mha;
constexpr Mask nomask = Mask::nomask, causal = Mask::causal;

int main() {
    bool ok = true;
    ok &= run<C<fp16, 64, mha, nomask, Arch::gfx942>>({1, 2, 2, 130, 77, -1, -1, false, true, 0, 3}, 1);
    ok &= run<C<fp16, 64, gqa, causal, Arch::gfx942>>({2, 2, 1, 150, 200, -1, 0, false, true, 1, 2}, 2);
    ok &= run<C<bf16, 64, gqa, causal, Arch::gfx908>>({1, 4, 2, 70, 300, 44, 0, true, true, 0, 2}, 3);
    ok &= run<C<bf16, 128, mha, causal, Arch::gfx908>>({1, 2, 2, 97, 129, 39, 0, false, true, 0, 4}, 4);
    ok &= run<C<bf16, 128, gqa, nomask, Arch::gfx90a>>({2, 8, 2, 5, 70, -1, -1, true, true, 0, 3}, 5);
    ok &= run<C<fp16, 128, mqa, causal, Arch::gfx908>>({1, 6, 1, 9, 33, -1, 0, false, true, 1, 2}, 6);
    ok &= run<C<fp16, 256, gqa, causal, Arch::gfx90a>>({1, 4, 1, 33, 99, -1, 0, true, false, 1, 3}, 7);
    ok &= run<C<bf16, 256, mha, nomask, Arch::gfx908>>({1, 1, 1, 40, 65, -1, -1, false, true, 0, 1}, 8);
    ok &= run<C<fp16, 80, mha, causal, Arch::gfx942>>({1, 2, 2, 200, 60, -1, 0, false, true, 0, 2}, 9);
    // Packed variable-length batches: virtual query blocks located by binary search (causal ones
    // end-aligned per sequence), GQA heads packed in a tile, the LSE as [heads, tokens].
    ok &= run<C<fp16, 64, gqa, causal, Arch::gfx942>>({5, 4, 2, 90, 140, -1, 0, true, true, 2, 3}, 10);
    ok &= run<C<bf16, 128, mha, nomask, Arch::gfx90a>>({4, 2, 2, 100, 60, -1, -1, true, true, 2, 2}, 11);
    ok &= run<C<fp16, 128, gqa, causal, Arch::gfx908>>({6, 8, 2, 20, 30, 8, 0, true, true, 2, 4}, 12);
    // Two-sided windows (FlashAttention's local attention): rows whose window lies past the
    // keys' end see none (zeros, LSE -inf).
    ok &= run<C<fp16, 64, gqa, causal, Arch::gfx942>>({2, 4, 2, 70, 150, 5, 3, false, true, 1, 3}, 13);
    ok &= run<C<bf16, 128, mha, causal, Arch::gfx90a>>({4, 2, 2, 60, 90, -1, 7, true, true, 2, 2}, 14);
    ok &= run<C<fp16, 64, mha, causal, Arch::gfx908>>({1, 2, 2, 100, 40, 10, -1, false, true, 0, 2}, 15);
    // Dropout: the kernel's mask (one Philox call per element here), LSE of the undropped sum.
    ok &= run<C<fp16, 128, gqa, causal, Arch::gfx942>>({2, 4, 2, 70, 95, -1, 0, false, true, 1, 3, 0.25f}, 16);
    ok &= run<C<bf16, 64, gqa, nomask, Arch::gfx90a>>({3, 4, 2, 40, 70, -1, -1, true, true, 2, 2, 0.1f}, 17);
    // Paged KV caches (shuffled pages, the unused part of each page NaN): chunked-prefill-like
    // causal rows against longer caches, pages narrower and wider than a key tile.
    ok &= run<C<fp16, 64, gqa, causal, Arch::gfx942>>({3, 4, 2, 50, 170, -1, 0, true, true, 1, 3, 0.f, 16}, 18);
    ok &= run<C<bf16, 128, mha, nomask, Arch::gfx90a>>({2, 2, 2, 40, 100, -1, -1, true, true, 0, 2, 0.f, 64}, 19);
    // Softcapping (caps near the scores' size, where tanh bends them) and ALiBi (case 21: a row of
    // slopes per sequence) with causal, windowed and packed rows, GQA heads sharing a tile.
    ok &= run<C<bf16, 256, gqa, causal, Arch::gfx942>>({1, 4, 2, 70, 90, -1, 0, false, true, 1, 2, 0.f, 0, 0.3f}, 20);
    ok &= run<C<fp16, 128, gqa, causal, Arch::gfx90a>>({3, 8, 2, 60, 140, 30, 0, true, true, 2, 3, 0.f, 0, 0.f, 2}, 21);
    ok &= run<C<fp16, 64, mha, nomask, Arch::gfx908>>({2, 2, 2, 50, 77, -1, -1, true, true, 0, 2, 0.f, 32, 0.5f, 1}, 22);
    // Element rows: head_dims 59 and 111 on the d64 and d128 kernels, rows and heads an odd
    // number of elements apart (token-major, packed, paged).
    ok &= run<C<fp16, 64, gqa, causal, Arch::gfx942>>({2, 4, 2, 77, 130, -1, 0, true, true, 1, 3, 0.f, 0, 0.f, 0, 59}, 23);
    ok &= run<C<bf16, 128, mha, nomask, Arch::gfx90a>>({3, 2, 2, 50, 90, -1, -1, true, true, 2, 2, 0.f, 0, 0.f, 0, 111}, 24);
    ok &= run<C<bf16, 64, gqa, causal, Arch::gfx908>>({2, 4, 2, 40, 120, -1, 0, true, true, 1, 2, 0.f, 16, 0.f, 0, 59}, 25);
    // Dropout beside softcapping and a row of ALiBi slopes per sequence.
    ok &= run<C<bf16, 128, gqa, causal, Arch::gfx90a>>({2, 4, 2, 50, 80, -1, 0, false, true, 1, 2, 0.2f, 0, 0.4f, 2}, 26);
    std::printf(ok ? "all cases match the reference\n" : "some cases FAILED\n");
    return ok ? 0 : 1;
}
