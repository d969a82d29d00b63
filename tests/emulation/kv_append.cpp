// The KV-cache append (kernels/kv_append.h) run on the host: each block's lanes in turn (the kernel
// has no barrier or exchange), against a reference in double precision from the same 16-bit
// inputs, rounded once: contiguous, cache_batch_idx and shuffled pages (a page size of 48 too),
// interleaved and GPT-NeoX rotary of part or all of head_dim, queries per row or at one position,
// fp16 and bf16, lengths per sequence or one for all; a sequence that would pass the capacity and
// a table entry outside the pool are not written and set the error bits. Everything else of the
// cache stays as it was, bit for bit.
// Built and run like mfma_prefill.cpp (fmha_test.py does; Clang 15 or later):
//   clang++-17 -std=c++20 -O1 -Wno-psabi -pthread -I tests/emulation -I src -I generated \
//       tests/emulation/kv_append.cpp -o /tmp/kv_append && /tmp/kv_append
#include "hip/hip_runtime.h"

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

inline dim3 blockDim;
inline int atomicOr(int* address, int value) { return std::exchange(*address, *address | value); }
inline int64_t min(int64_t a, int64_t b) { return std::min(a, b); }
inline int64_t max(int64_t a, int64_t b) { return std::max(a, b); }

#include "kernels/kv_append.h"

using namespace fmha;

namespace {

struct Case {
    std::string name;
    DType dtype;
    int batch, seqlen_new, heads_kv, head_dim, capacity;
    int page_size;  // 0: contiguous
    bool batch_idx;
    int rotary_dim;
    bool interleaved, per_row;
    bool fixed;                // one length for all (seqlen_fixed)
    std::vector<int> starts;   // per sequence
    int bad_page = -1;         // >= 0: this table entry (of sequence 0) names no page
};

float widen(DType dtype, uint16_t bits) {
    return dtype == DType::fp16 ? float(__builtin_bit_cast(_Float16, bits)) : __builtin_bit_cast(float, uint32_t(bits) << 16);
}
uint16_t narrow(DType dtype, double x) {
    return dtype == DType::fp16 ? DTypeTraits<DType::fp16>::pack(float(x)) : DTypeTraits<DType::bf16>::pack(float(x));
}

// Row `row` rotated at position pos in double precision, rounded once.
std::vector<uint16_t> rotated(const Case& c, const uint16_t* row, const std::vector<uint16_t>& cos,
                              const std::vector<uint16_t>& sin, int pos) {
    std::vector<uint16_t> out(row, row + c.head_dim);
    const int half = c.rotary_dim / 2;
    for (int i = 0; i < half; ++i) {
        const int a = c.interleaved ? 2 * i : i, b = c.interleaved ? 2 * i + 1 : i + half;
        const double co = widen(c.dtype, cos[size_t(pos) * half + i]), si = widen(c.dtype, sin[size_t(pos) * half + i]);
        const double x = widen(c.dtype, row[a]), y = widen(c.dtype, row[b]);
        out[a] = narrow(c.dtype, x * co - y * si);
        out[b] = narrow(c.dtype, x * si + y * co);
    }
    return out;
}

// Equal, or (where rotated) one step of the 16-bit format apart: fp32 and fp64 may round apart.
bool near(uint16_t a, uint16_t b) { return a == b || (a ^ b) == 1 || uint16_t(a + 1) == b || uint16_t(b + 1) == a; }

bool run(const Case& c, std::mt19937& rng) {
    std::uniform_real_distribution<float> uniform(-2.f, 2.f);
    auto random = [&](size_t n) {
        std::vector<uint16_t> v(n);
        for (auto& x : v) x = narrow(c.dtype, uniform(rng));
        return v;
    };
    const int heads_q = 4 * c.heads_kv, seqlen_q = c.seqlen_new, d = c.head_dim;
    const int rows = c.batch_idx ? c.batch + 2 : c.batch;
    const int pages_per_seq = c.page_size ? (c.capacity + c.page_size - 1) / c.page_size : 0;
    const int pool = c.page_size ? c.batch * pages_per_seq + 3 : rows;  // spare pages no entry names
    const int slots = c.page_size ? c.page_size : c.capacity;
    std::vector<uint16_t> k_cache = random(size_t(pool) * slots * c.heads_kv * d), v_cache = random(k_cache.size());
    const std::vector<uint16_t> k_before = k_cache, v_before = v_cache;
    std::vector<uint16_t> k_new = random(size_t(c.batch) * c.seqlen_new * c.heads_kv * d), v_new = random(k_new.size());
    std::vector<uint16_t> q = random(size_t(c.batch) * seqlen_q * heads_q * d), q_out(q.size(), 0xffff);
    const int seqlen_ro = c.capacity + 5;
    std::vector<uint16_t> cos(size_t(seqlen_ro) * std::max(c.rotary_dim / 2, 1)), sin(cos.size());
    for (size_t i = 0; i < cos.size(); ++i) {
        const double angle = std::uniform_real_distribution<double>(0, 6.283)(rng);
        cos[i] = narrow(c.dtype, std::cos(angle)), sin[i] = narrow(c.dtype, std::sin(angle));
    }
    std::vector<int> table, index;
    if (c.page_size) {  // each sequence's pages, shuffled in the pool
        std::vector<int> order(pool);
        for (int i = 0; i < pool; ++i) order[i] = i;
        std::shuffle(order.begin(), order.end(), rng);
        table.assign(order.begin(), order.begin() + c.batch * pages_per_seq);
        if (c.bad_page >= 0) table[c.bad_page] = pool;
    }
    for (int b = 0; b < c.batch; ++b) index.push_back((2 * b + 1) % rows);
    std::vector<int> starts = c.starts, seqlens_out(c.batch, -7);
    int error = 0;

    KvAppendParams p{};
    p.k_new = k_new.data(), p.v_new = v_new.data();
    p.k_new_strides = p.v_new_strides = {int64_t(c.seqlen_new) * c.heads_kv * d, d, int64_t(c.heads_kv) * d};
    p.k_cache = k_cache.data(), p.v_cache = v_cache.data();
    p.k_cache_strides = p.v_cache_strides = {int64_t(slots) * c.heads_kv * d, d, int64_t(c.heads_kv) * d};
    p.batch = c.batch, p.seqlen_new = c.seqlen_new, p.heads_kv = c.heads_kv, p.head_dim = d;
    p.capacity = c.capacity, p.cache_rows = pool;
    p.cache_batch_idx = c.batch_idx ? index.data() : nullptr;
    p.block_table = c.page_size ? table.data() : nullptr;
    p.page_size = c.page_size, p.max_pages_per_seq = pages_per_seq;
    p.cache_seqlens = c.fixed ? nullptr : starts.data();
    p.seqlen_fixed = c.fixed ? starts[0] : 0;
    p.rotary_dim = c.rotary_dim, p.interleaved = c.interleaved, p.seqlen_ro = seqlen_ro;
    p.rotary_cos = cos.data(), p.rotary_sin = sin.data();
    if (c.rotary_dim) {
        p.q = q.data(), p.q_out = q_out.data();
        p.q_strides = p.q_out_strides = {int64_t(seqlen_q) * heads_q * d, d, int64_t(heads_q) * d};
        p.seqlen_q = seqlen_q, p.heads_q = heads_q, p.q_per_row = c.per_row;
    }
    p.seqlens_out = seqlens_out.data();
    p.error = &error;

    blockDim.x = kAppendThreads;
    for (int64_t block = 0; block < kv_append_blocks(p); ++block)
        for (unsigned lane = 0; lane < kAppendThreads; ++lane) {
            blockIdx.x = unsigned(block), threadIdx.x = lane;
            if (c.dtype == DType::fp16) kv_append_kernel<DType::fp16>(p);
            else kv_append_kernel<DType::bf16>(p);
        }

    // The expected cache: the reference's writes into the copy from before.
    std::vector<uint16_t> k_expected = k_before, v_expected = v_before;
    int expected_error = 0;
    for (int b = 0; b < c.batch; ++b) {
        const int start = c.fixed ? starts[0] : starts[b];
        const bool fits = start >= 0 && start + c.seqlen_new <= c.capacity;
        if (!fits) expected_error |= kAppendOverflow;
        if (seqlens_out[b] != std::clamp(start + c.seqlen_new, 0, c.capacity)) {
            std::printf("%s: seqlens_out[%d] = %d\n", c.name.c_str(), b, seqlens_out[b]);
            return false;
        }
        for (int j = 0; fits && j < c.seqlen_new; ++j) {
            const int pos = start + j;
            int row = c.batch_idx ? index[b] : b, slot = pos;
            if (c.page_size) row = table[size_t(b) * pages_per_seq + pos / c.page_size], slot = pos % c.page_size;
            if (row < 0 || row >= pool) {
                expected_error |= kAppendBadIndex;
                continue;
            }
            for (int h = 0; h < c.heads_kv; ++h) {
                const size_t src = ((size_t(b) * c.seqlen_new + j) * c.heads_kv + h) * d;
                const size_t dst = ((size_t(row) * slots + slot) * c.heads_kv + h) * d;
                const std::vector<uint16_t> k_row = rotated(c, &k_new[src], cos, sin, pos);
                std::copy(k_row.begin(), k_row.end(), k_expected.begin() + dst);
                std::copy(&v_new[src], &v_new[src] + d, v_expected.begin() + dst);
            }
        }
    }
    bool ok = error == expected_error && v_cache == v_expected;
    for (size_t i = 0; ok && i < k_cache.size(); ++i) ok = near(k_cache[i], k_expected[i]);
    for (int b = 0; ok && c.rotary_dim && b < c.batch; ++b)
        for (int i = 0; ok && i < seqlen_q; ++i) {
            const int pos = std::clamp((c.fixed ? starts[0] : starts[b]) + (c.per_row ? i : 0), 0, seqlen_ro - 1);
            for (int h = 0; ok && h < heads_q; ++h) {
                const size_t at = ((size_t(b) * seqlen_q + i) * heads_q + h) * d;
                const std::vector<uint16_t> expected = rotated(c, &q[at], cos, sin, pos);
                for (int e = 0; ok && e < d; ++e) ok = near(q_out[at + e], expected[e]);
            }
        }
    std::printf("%-44s %s (error bits %d, expected %d)\n", c.name.c_str(), ok ? "match" : "MISMATCH", error, expected_error);
    return ok;
}

}  // namespace

int main() {
    const Case cases[] = {
        {"contiguous fp16 interleaved rot64 per row", DType::fp16, 3, 3, 2, 128, 40, 0, false, 64, true, true, false, {0, 17, 37}},
        {"cache_batch_idx bf16 neox rot128 one pos", DType::bf16, 2, 2, 2, 128, 33, 0, true, 128, false, false, false, {5, 31}},
        {"pages of 16 bf16 neox rot32 16 new", DType::bf16, 2, 16, 1, 64, 64, 16, false, 32, false, true, false, {3, 48}},
        {"pages of 48 fp16 interleaved rot16", DType::fp16, 2, 5, 2, 64, 96, 48, false, 16, true, true, false, {45, 90}},
        {"one length for all, no rotary, d256", DType::fp16, 2, 4, 2, 256, 20, 0, false, 0, false, false, true, {11}},
        {"overflow refused, others written", DType::bf16, 3, 2, 2, 64, 24, 0, false, 64, false, true, false, {23, 4, -1}},
        {"table entry outside the pool", DType::fp16, 2, 3, 2, 64, 48, 16, false, 64, true, true, false, {14, 2}, 1},
    };
    std::mt19937 rng(20261125);
    bool all = true;
    for (const Case& c : cases) all = run(c, rng) && all;
    std::printf(all ? "all cases match the reference\n" : "some cases do not match\n");
    return all ? 0 : 1;
}
