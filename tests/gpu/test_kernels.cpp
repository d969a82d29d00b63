// Every kernel of the catalogue against the reference on random problems: odd sequence
// lengths, GQA ratios, causal with and without windows, variable lengths, every layout,
// peaky softmax, softcapping, ALiBi, paged KV caches, and batch x heads beyond 65,535.
// Skips when there is no GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "fmha/heuristics.h"
#include "fmha/host_numeric.h"
#include "gpu_check.h"
#include "reference/host_reference.h"
#include "tool/device_tensors.h"

namespace fmha {
namespace {

#define SKIP_WITHOUT_GPU()                                                              \
    if (!test_device().found) GTEST_SKIP() << "no GPU: " << test_device().error;

Problem make(const KernelKey& key, int b, int h, int h_kv, int s_q, int s_kv) {
    Problem p;
    p.dtype = key.dtype, p.head_dim = key.head_dim;
    if (key.mask == Mask::causal) p.mask = AttentionMask::causal();
    p.batch = b, p.heads_q = h, p.heads_kv = h_kv, p.seqlen_q = s_q, p.seqlen_kv = s_kv;
    return p;
}

// (heads_q, heads_kv) pairs a kernel of this heads kind must handle.
std::vector<std::pair<int, int>> head_shapes(HeadsKind heads) {
    switch (heads) {
        case HeadsKind::mha: return {{4, 4}};
        case HeadsKind::mqa: return {{4, 1}};
        case HeadsKind::gqa: return {{8, 2}, {6, 3}, {4, 4}, {4, 1}};
    }
    return {};
}

std::vector<GpuCase> cases_for(const KernelKey& key) {
    struct Shape { int b, s_q, s_kv; };
    // Odd and tile-straddling lengths; s_q > s_kv (causal: the first rows see no key).
    // {1, 77, 2100}: past the short key ranges of the tensor-core family's tile table.
    std::vector<Shape> shapes = {{1, 1, 1}, {3, 1, 2}, {2, 2, 2}, {2, 7, 13}, {2, 33, 77}, {1, 64, 64}, {1, 129, 200}, {2, 1, 1000}, {1, 17, 300}, {1, 77, 2100}};
    shapes.push_back({2, 50, 7});
    const Layout layouts[] = {Layout::bhsd, Layout::bshd, Layout::qkv_packed};
    std::vector<GpuCase> cases;
    uint64_t seed = 1;
    for (auto [h, h_kv] : head_shapes(key.heads)) {
        for (const Shape& s : shapes) {
            GpuCase c{make(key, s.b, h, h_kv, s.s_q, s.s_kv), {}, seed++};
            c.problem.layout = layouts[seed % 3];
            if (!c.problem.validate().empty()) c.problem.layout = Layout::bhsd;  // packed needs s_q == s_kv, MHA
            cases.push_back(c);
        }
        GpuCase peaky{make(key, 2, h, h_kv, 33, 77), {}, seed++, 8.f};
        cases.push_back(peaky);
        GpuCase varlen{make(key, 5, h, h_kv, 40, 40), {{1, 40, 17, 33, 2}, {1, 40, 17, 33, 2}}, seed++};
        cases.push_back(varlen);
        GpuCase decode_varlen{make(key, 3, h, h_kv, 1, 90), {{1, 1, 1}, {90, 1, 65}}, seed++};
        cases.push_back(decode_varlen);
        // Short key ranges: the decode family's few-keys variant (3 to 16 keys, one step) and
        // its edges, with per-sequence lengths across all three key variants.
        for (int s_kv : {3, 4, 5, 6, 7, 8, 11, 16, 17}) cases.push_back({make(key, 3, h, h_kv, 1 + s_kv % 2, s_kv), {}, seed++});
        GpuCase few_varlen{make(key, 4, h, h_kv, 1, 16), {{1, 1, 1, 1}, {16, 3, 9, 1}}, seed++};
        cases.push_back(few_varlen);
        GpuCase narrow_varlen{make(key, 4, h, h_kv, 1, 7), {{1, 1, 1, 1}, {7, 5, 6, 3}}, seed++};  // 7 slots, fewer keys
        cases.push_back(narrow_varlen);
        // More rows than a pass of 8 over up to 16 keys: the tensor-core variant's staged items
        // (two row tiles a pass at d64 for all three, at d128 for the second: staged_row_tiles()),
        // ragged, the last sequence's first rows seeing no key.
        for (auto [s_q, s_kv] : {std::pair{10, 12}, std::pair{9, 9}, std::pair{16, 16}})
            cases.push_back({make(key, 3, h, h_kv, s_q, s_kv), {{s_q - 1, s_q, 4}, {s_kv, 7, 3}}, seed++});
        if (key.mask == Mask::causal) {
            // Sequences with more queries than keys: bottom-right alignment leaves the first
            // rows with no visible key, which must come out as zeros, not NaN.
            GpuCase empty_rows{make(key, 2, h, h_kv, 70, 70), {{70, 9}, {3, 2}}, seed++};
            cases.push_back(empty_rows);
            for (int window : {1, 5, 64}) {
                GpuCase windowed{make(key, 2, h, h_kv, 129, 200), {}, seed++};
                windowed.problem.mask = AttentionMask::causal(window);
                cases.push_back(windowed);
            }
            GpuCase few_windowed{make(key, 3, h, h_kv, 2, 12), {}, seed++};  // keys below the window in the step
            few_windowed.problem.mask = AttentionMask::causal(3);
            cases.push_back(few_windowed);
            // The decode family's passes of 8 rows over 12 positions (MHA): a pass's keys from its
            // first and last positions, cut at shorter sequences' last query (the second pass
            // of sequence 2 has none), a two-sided window around them.
            GpuCase pass_windowed{make(key, 3, h, h_kv, 12, 300), {{12, 5, 9}, {300, 40, 13}}, seed++};
            pass_windowed.problem.mask = AttentionMask::local(6, 2);
            cases.push_back(pass_windowed);
            // FlashAttention's two-sided windows (-1: unbounded), on both sides of the diagonal:
            // rows whose window lies past the keys' end or before their start see none.
            const AttentionMask local[] = {AttentionMask::local(5, 3), AttentionMask::local(-1, 7),
                                           AttentionMask::local(10, -1), AttentionMask::local(0, 0),
                                           AttentionMask::local(70, 150)};
            const Shape local_shapes[] = {{2, 129, 200}, {1, 300, 100}, {2, 2, 40}, {1, 77, 2100}, {2, 33, 77}};
            for (int i = 0; i < 5; ++i) {
                for (const Shape& s : {local_shapes[i], local_shapes[(i + 1) % 5]}) {
                    GpuCase c{make(key, s.b, h, h_kv, s.s_q, s.s_kv), {}, seed++};
                    c.problem.mask = local[i];
                    cases.push_back(c);
                }
            }
            GpuCase local_varlen{make(key, 4, h, h_kv, 90, 90), {{90, 1, 60, 7}, {30, 1, 90, 80}}, seed++};
            local_varlen.problem.mask = AttentionMask::local(4, 9);
            cases.push_back(local_varlen);
        }
    }
    if (key.family == Family::decode) {
        // More items than a wave of resident warps (3,000 or more at the first head shape): a
        // staged variant's warps walk several, copying the next item while they compute one.
        const auto [h, h_kv] = head_shapes(key.heads).front();
        cases.push_back({make(key, 1000, h, h_kv, 9, 5), {}, seed++});
    }
    return cases;
}

// Softcapping, ALiBi and a paged KV cache, alone and together, on odd shapes: GQA, causal with
// windows, variable lengths, every page size. Paged pages are shuffled (a contiguous
// assumption fails) and the table's slots past a sequence's pages point at a NaN page.
std::vector<GpuCase> option_cases(const KernelKey& key) {
    struct Options { float softcap; bool alibi; int page_size; };
    const Options options[] = {{0.f, false, 16}, {0.f, false, 256}, {5.f, false, 0},  {0.f, true, 0},
                               {2.f, true, 0},   {0.f, true, 64},   {5.f, true, 32},  {30.f, false, 128}};
    struct Shape { int b, s_q, s_kv; };
    std::vector<Shape> shapes = {{1, 1, 1}, {3, 1, 2}, {2, 2, 2}, {2, 7, 13}, {2, 33, 77}, {1, 129, 200}, {2, 1, 1000}, {1, 17, 300},
                                 {3, 1, 4}, {2, 2, 9}, {3, 1, 16}, {2, 1, 17}};  // short key ranges: the few-keys variant
    shapes.push_back({2, 50, 7});
    std::vector<GpuCase> cases;
    uint64_t seed = 101;
    int next = 0;
    auto with = [&](GpuCase c, const Options& o) {
        c.problem.softcap = o.softcap, c.problem.alibi = o.alibi, c.problem.page_size = o.page_size;
        c.problem.layout = seed % 2 ? Layout::bshd : Layout::bhsd;
        c.q_range = o.softcap > 0.f ? 8.f : 1.f;  // scores large enough for the cap to matter
        cases.push_back(c);
    };
    for (auto [h, h_kv] : head_shapes(key.heads)) {
        for (const Shape& sh : shapes) with({make(key, sh.b, h, h_kv, sh.s_q, sh.s_kv), {}, seed++}, options[next++ % 8]);
        // Every option at once, with variable lengths (unused table slots on the NaN page).
        with({make(key, 5, h, h_kv, 40, 40), {{1, 40, 17, 33, 2}, {1, 40, 17, 33, 2}}, seed++}, {5.f, true, 16});
        with({make(key, 3, h, h_kv, 1, 90), {{1, 1, 1}, {90, 1, 65}}, seed++}, {5.f, true, 32});
        with({make(key, 3, h, h_kv, 1, 16), {{1, 1, 1}, {16, 3, 11}}, seed++}, {5.f, true, 16});
        // Pages alone past the few-keys range (the decode family's variant with paging only).
        with({make(key, 3, h, h_kv, 2, 300), {{2, 1, 2}, {300, 17, 129}}, seed++}, {0.f, false, 64});
        if (key.mask == Mask::causal) {
            for (int window : {1, 5, 64}) {
                GpuCase windowed{make(key, 2, h, h_kv, 129, 200), {}, seed++};
                windowed.problem.mask = AttentionMask::causal(window);
                with(windowed, options[next++ % 8]);
            }
            GpuCase few_windowed{make(key, 3, h, h_kv, 2, 12), {}, seed++};
            few_windowed.problem.mask = AttentionMask::causal(3);
            with(few_windowed, {5.f, true, 16});
            // Windows that start inside a 16-key step: the tensor-core options variant starts
            // its steps on multiples of 16, so each lies on one page.
            GpuCase step_windowed{make(key, 2, h, h_kv, 2, 300), {}, seed++};
            step_windowed.problem.mask = AttentionMask::local(37, 2);
            with(step_windowed, {0.f, true, 16});
            with(step_windowed, {0.f, false, 32});
        }
    }
    return cases;
}

// Packed variable-length batches (-layout packed): empty, 1-token and odd sequences beside long
// ones, lengths as the kernel sees them (cu_seqlens), windows, the scoring options, LSE on every
// other case; every head shape of the tuple. 600 short sequences make tiles enough for the
// tensor-core family's claimed tiles (mmaprefill.h: launch_blocks), some seeing no key.
std::vector<GpuCase> packed_cases(const KernelKey& key) {
    struct Shape { std::vector<int> q, kv; };
    Shape many;
    for (int i = 0; i < 600; ++i) many.q.push_back(i * 37 % 71), many.kv.push_back(i % 9 == 4 ? 0 : i * 37 % 71 + i % 5);
    const std::vector<Shape> shapes = {{{1}, {1}},
                                       {{7, 0, 1, 300, 33}, {13, 5, 1, 300, 90}},
                                       {{2, 1, 2}, {2, 9, 40}},  // few rows per KV head: the decode family's
                                       {{1, 1, 1, 1}, {700, 3, 16, 1}},
                                       {{200, 64, 129, 1000}, {200, 64, 130, 1000}},
                                       many};
    std::vector<GpuCase> cases;
    uint64_t seed = 301;
    for (auto [h, h_kv] : head_shapes(key.heads)) {
        for (const Shape& sh : shapes) {
            const int longest_q = *std::max_element(sh.q.begin(), sh.q.end());
            const int longest_kv = *std::max_element(sh.kv.begin(), sh.kv.end());
            GpuCase c{make(key, int(sh.q.size()), h, h_kv, longest_q, longest_kv), {sh.q, sh.kv}, seed++};
            c.problem.layout = Layout::packed;
            c.lse = seed % 2 == 0;
            if (key.mask == Mask::causal && seed % 3 == 0) c.problem.mask = AttentionMask::causal(37);
            if (key.mask == Mask::causal && seed % 5 == 0) c.problem.mask = AttentionMask::local(20, 6);
            if (seed % 4 == 0) c.problem.softcap = 5.f, c.problem.alibi = true, c.q_range = 8.f;
            cases.push_back(c);
        }
    }
    return cases;
}

std::vector<std::string> catalogue_names() {
    std::vector<std::string> names;
    for (const KernelEntry& entry : kernel_table()) names.push_back(entry.name);
    return names;
}

class Catalogue : public ::testing::TestWithParam<std::string> {
  protected:
    const KernelEntry* kernel_ = nullptr;

    void SetUp() override {
        SKIP_WITHOUT_GPU();
        kernel_ = find_kernel_named(GetParam());
        if (test_device().arch != kernel_->key.arch)
            GTEST_SKIP() << GetParam() << " is for " << token(kernel_->key.arch) << ", the device is " << test_device().arch_name;
    }
};

TEST_P(Catalogue, MatchesReferenceOnRandomShapes) {
    for (const GpuCase& c : cases_for(kernel_->key)) {
        ASSERT_TRUE(c.problem.validate().empty()) << c.describe();
        const CaseResult r = run_case(*kernel_, c);
        EXPECT_TRUE(r.passed) << r.message;
    }
}

TEST_P(Catalogue, LogSumExpMatchesReferenceOnRandomShapes) {
    for (GpuCase c : cases_for(kernel_->key)) {
        c.lse = true;
        const CaseResult r = run_case(*kernel_, c);
        EXPECT_TRUE(r.passed) << r.message;
    }
}

TEST_P(Catalogue, ServingOptionsMatchReference) {
    for (GpuCase c : option_cases(kernel_->key)) {
        ASSERT_TRUE(c.problem.validate().empty()) << c.describe();
        if (!kernel_supports(kernel_->key, c.problem)) {  // the tensor-core family declines some (mmaprefill/limits.h)
            // The launcher refuses them, rather than miscomputes (kernel_supports keeps them away).
            TensorSet tensors(c.problem);
            EXPECT_NE(kernel_->launch(tensors.params, nullptr), hipSuccess) << c.describe();
            (void)hipGetLastError();
            continue;
        }
        c.lse = c.seed % 2 == 0;
        const CaseResult r = run_case(*kernel_, c);
        EXPECT_TRUE(r.passed) << r.message;
    }
}

TEST_P(Catalogue, PackedBatchesMatchReference) {
    for (const GpuCase& c : packed_cases(kernel_->key)) {
        ASSERT_TRUE(c.problem.validate().empty()) << c.describe();
        if (!kernel_supports(kernel_->key, c.problem)) continue;  // the scoring options on MFMA
        const CaseResult r = run_case(*kernel_, c);
        EXPECT_TRUE(r.passed) << r.message;
    }
}

TEST_P(Catalogue, BatchTimesHeadsBeyondGridLimit) {
    // 4100 x 16 = 65,600 (b, h) pairs: more than a grid's y or z dimension can hold.
    const KernelKey& key = kernel_->key;
    const int h_kv = key.heads == HeadsKind::mha ? 16 : key.heads == HeadsKind::mqa ? 1 : 4;
    const CaseResult r = run_case(*kernel_, {make(key, 4100, 16, h_kv, 1, 3), {}, 7});
    EXPECT_TRUE(r.passed) << r.message;
}

TEST_P(Catalogue, RejectsParamsOfAnotherTuple) {
    // The launcher refuses, rather than miscomputes, a problem its tuple does not cover.
    const KernelKey& key = kernel_->key;
    TensorSet tensors(make(key, 1, 4, 4, 4, 4));
    tensors.params.heads_kv = key.heads == HeadsKind::mqa ? 2 : key.heads == HeadsKind::mha ? 1 : 3;  // 4 % 3 != 0
    EXPECT_NE(kernel_->launch(tensors.params, nullptr), hipSuccess);
    (void)hipGetLastError();
    tensors.params.heads_kv = key.heads == HeadsKind::mqa ? 1 : 4;
    tensors.params.head_dim = key.head_dim + 8;
    EXPECT_NE(kernel_->launch(tensors.params, nullptr), hipSuccess);
    (void)hipGetLastError();
}

INSTANTIATE_TEST_SUITE_P(AllKernels, Catalogue, ::testing::ValuesIn(catalogue_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

// Every head_dim from 8 to 256 in steps of 8 that the build has no kernel for runs on the next
// larger kernel of a family that serves smaller head_dims (zero-filled columns): prefill and
// decode shapes, both masks, odd lengths, GQA, packed. A head_dim that is not a multiple of 8
// runs element by element on the tensor-core family's next larger kernel where the build has
// one, else is declined with the reason, never miscomputed.
TEST(RoundedHeadDims, EveryMultipleOfEightRunsOnALargerKernel) {
    SKIP_WITHOUT_GPU();
    const bool has_rounding_family = std::any_of(kernel_table().begin(), kernel_table().end(), [](const KernelEntry& e) {
        return e.key.arch == *test_device().arch && kFamilyHeadDimRules[static_cast<int>(e.key.family)].serves_smaller;
    });
    if (!has_rounding_family) GTEST_SKIP() << "no family that serves smaller head_dims in this build (setup.py --only)";
    int rounded = 0;
    uint64_t seed = 500;
    for (int d = 8; d <= 256; d += 8) {
        for (int shape = 0; shape < 3; ++shape) {
            Problem p;
            p.dtype = shape == 1 ? DType::bf16 : DType::fp16, p.head_dim = d;
            p.batch = 2, p.heads_q = 8, p.heads_kv = 2, p.seqlen_q = shape == 1 ? 3 : 77, p.seqlen_kv = 201;
            if (shape != 0) p.mask = AttentionMask::causal();
            GpuCase c{p, {}, seed++};
            c.lse = shape == 0;
            if (shape == 2) {
                c.problem.layout = Layout::packed, c.problem.mask = AttentionMask::local(30, 9);
                c.lens = {{77, 1, 40}, {201, 3, 40}};
                c.problem.batch = 3;
            }
            const Selection chosen = select_kernel(c.problem, *test_device().arch);
            if (!chosen.entry) {
                ADD_FAILURE() << "no kernel for " << c.describe() << ": " << chosen.reason;
                continue;
            }
            if (chosen.entry->key.head_dim == d) continue;
            ++rounded;
            const CaseResult r = run_case(*chosen.entry, c);
            EXPECT_TRUE(r.passed) << chosen.entry->name << " for d" << d << ": " << r.message;
        }
    }
    EXPECT_GT(rounded, 0) << "every head_dim had its own kernel: nothing was rounded";
    Problem odd;
    odd.head_dim = 59, odd.heads_q = 4, odd.heads_kv = 4, odd.seqlen_q = odd.seqlen_kv = 64;
    const Selection odd_choice = select_kernel(odd, *test_device().arch);
    if (!odd_choice.entry) {
        EXPECT_NE(odd_choice.reason.find("not a multiple of 8"), std::string::npos) << odd_choice.reason;
        return;
    }
    EXPECT_EQ(odd_choice.entry->key.family, Family::mmaprefill) << odd_choice.reason;
    EXPECT_GT(odd_choice.entry->key.head_dim, 59);
    const CaseResult r = run_case(*odd_choice.entry, {odd, {}, seed});
    EXPECT_TRUE(r.passed) << odd_choice.entry->name << " for d59: " << r.message;
}

// Long sequences, for the kernels of one shape per mask and family (each case takes the
// reference long).
TEST(LongSequences, SixteenThousandKeys) {
    SKIP_WITHOUT_GPU();
    for (Family family : {Family::prefill, Family::decode, Family::mmaprefill}) {
        for (Mask mask : {Mask::nomask, Mask::causal}) {
            const KernelKey key{DType::fp16, 128, HeadsKind::gqa, mask, family, *test_device().arch};
            const KernelEntry* kernel = find_kernel(key);
            if (!kernel) continue;
            std::vector<std::pair<int, int>> shapes = {{1, 16384}, {3, 16383}};
            if (family != Family::decode) shapes.push_back({16384, 16384});
            for (auto [s_q, s_kv] : shapes) {
                const CaseResult r = run_case(*kernel, {make(key, 1, 2, 2, s_q, s_kv), {}, 11});
                EXPECT_TRUE(r.passed) << r.message;
            }
        }
    }
}

// Long-KV decode with few sequences: the decode family splits the key range across blocks and
// combines the splits. Checks that it really splits (asks for a workspace), and the result.
TEST(SplitKv, LongKeyRangesOfFewSequences) {
    SKIP_WITHOUT_GPU();
    int kernels = 0;
    for (const KernelEntry& kernel : kernel_table()) {
        const KernelKey& key = kernel.key;
        if (key.family != Family::decode || key.arch != *test_device().arch || key.head_dim != 128) continue;
        ++kernels;
        const int h_kv = key.heads == HeadsKind::mha ? 4 : key.heads == HeadsKind::mqa ? 1 : 2;
        std::vector<GpuCase> cases = {{make(key, 2, 4, h_kv, 1, 4096), {}, 21},
                                      {make(key, 1, 4, h_kv, 2, 32768), {}, 22},
                                      {make(key, 3, 4, h_kv, 1, 5000), {{1, 1, 1}, {5000, 77, 1}}, 23}};
        if (key.mask == Mask::causal) {
            GpuCase windowed{make(key, 2, 4, h_kv, 2, 9000), {}, 24};
            windowed.problem.mask = AttentionMask::causal(700);  // most splits see no key of the window
            cases.push_back(windowed);
        }
        // The options variant's splits: paged (small and large pages), softcapped, ALiBi.
        GpuCase paged{make(key, 2, 4, h_kv, 1, 4099), {}, 25, 8.f};
        paged.problem.page_size = 16, paged.problem.softcap = 5.f, paged.problem.alibi = true;
        cases.push_back(paged);
        GpuCase paged_varlen{make(key, 3, 4, h_kv, 2, 32768), {{2, 1, 2}, {32768, 77, 20000}}, 26};
        paged_varlen.problem.page_size = 256, paged_varlen.problem.alibi = true;
        cases.push_back(paged_varlen);
        // A paged cache alone: the variant compiled with paging only (decode.h, WithPages).
        GpuCase paged_alone{make(key, 3, 4, h_kv, 1, 6001), {{1, 1, 1}, {6001, 33, 4000}}, 27};
        paged_alone.problem.page_size = 16;
        cases.push_back(paged_alone);
        for (const GpuCase& c : cases) {
            EXPECT_GT(kernel.workspace(shape_params(c.problem)), 0u) << kernel.name << " did not split " << c.describe();
            const CaseResult r = run_case(kernel, c);
            EXPECT_TRUE(r.passed) << kernel.name << ": " << r.message;
        }
    }
    if (kernels == 0) GTEST_SKIP() << "no d128 decode kernel for " << test_device().arch_name << " in this build";
}

// Items whose 16 key splits reach every multiprocessor: on warp MMAs up to head dim 128 a block
// of 16 warps merges all of an item's splits, so the launch needs no workspace (decode.h,
// takes_wide_blocks), plain and paged; ragged lengths leave some of an item's splits no key.
TEST(SplitKv, ItemsOfSixteenSplitsFillingTheDevice) {
    SKIP_WITHOUT_GPU();
    int kernels = 0;
    for (const KernelEntry& kernel : kernel_table()) {
        const KernelKey& key = kernel.key;
        if (key.family != Family::decode || key.arch != *test_device().arch || key.head_dim > 128 || !has_mma_sync(key.arch))
            continue;
        ++kernels;
        const int h_kv = key.heads == HeadsKind::mha ? 4 : key.heads == HeadsKind::mqa ? 1 : 2;
        const int batch = test_device().multiprocessors / h_kv;
        SeqLens lens;
        for (int b = 0; b < batch; ++b) lens.q.push_back(1), lens.kv.push_back(b % 3 == 0 ? 1000 : b % 3 == 1 ? 517 : 33);
        GpuCase plain{make(key, batch, 4, h_kv, 1, 1000), lens, 31};
        GpuCase paged = plain;
        paged.seed = 32, paged.problem.page_size = 16;
        for (const GpuCase& c : {plain, paged}) {
            EXPECT_EQ(kernel.workspace(shape_params(c.problem)), 0u) << kernel.name << " combined through the workspace " << c.describe();
            const CaseResult r = run_case(kernel, c);
            EXPECT_TRUE(r.passed) << kernel.name << ": " << r.message;
        }
    }
    if (kernels == 0) GTEST_SKIP() << "no decode kernel on warp MMAs up to head dim 128 for " << test_device().arch_name << " in this build";
}

// The device reference is itself checked against the host reference (double precision), its
// log-sum-exps too.
TEST(DeviceReference, MatchesHostReference) {
    SKIP_WITHOUT_GPU();
    for (DType dtype : {DType::fp16, DType::bf16}) {
        for (int variant = 0; variant < 6; ++variant) {
            // Plain, then with softcapping, ALiBi and a paged cache (the host follows the table
            // through logical_k/v, the device reference by itself); no mask, causal with a
            // window, a two-sided window.
            const bool options = variant >= 3;
            const AttentionMask masks[] = {AttentionMask::none(), AttentionMask::causal(20), AttentionMask::local(9, 4)};
            Problem p;
            p.dtype = dtype, p.batch = 2, p.heads_q = 6, p.heads_kv = 2, p.seqlen_q = 5, p.seqlen_kv = 70, p.head_dim = 72;
            p.mask = masks[variant % 3], p.layout = Layout::bshd;
            if (options) p.softcap = 3.f, p.alibi = true, p.page_size = 16;
            TensorSet tensors(p);
            tensors.fill(p, 5, 3.f);
            DeviceBuffer device_out(4 * tensors.sizes.o), device_lse_out(4 * p.batch * p.heads_q * p.seqlen_q);
            check(reference_forward(tensors.params, dtype, device_out.get<float>(), device_lse_out.get<float>()),
                  "reference");
            std::vector<float> device(tensors.sizes.o), device_lse(p.batch * p.heads_q * p.seqlen_q);
            check(hipMemcpy(device.data(), device_out.get(), device.size() * 4, hipMemcpyDeviceToHost), "copy");
            check(hipMemcpy(device_lse.data(), device_lse_out.get(), device_lse.size() * 4, hipMemcpyDeviceToHost), "copy");

            // Inputs to the host, in logical [b, h, s, d] order, as floats.
            auto logical = [&](const void* base, const TensorStrides& s, int heads, int seq) {
                std::vector<float> out;
                for (uint16_t bits : copy_logical(base, s, p.batch, heads, seq, p.head_dim)) out.push_back(to_float(dtype, bits));
                return out;
            };
            const FwdParams& f = tensors.params;
            std::vector<float> host_lse;
            auto widen = [&](const std::vector<uint16_t>& bits) {
                std::vector<float> out;
                for (uint16_t b : bits) out.push_back(to_float(dtype, b));
                return out;
            };
            const auto host = host_reference(p, {}, logical(f.q, f.q_strides, p.heads_q, p.seqlen_q), widen(tensors.logical_k()),
                                             widen(tensors.logical_v()), &host_lse);
            ASSERT_EQ(host.size(), device.size());
            for (size_t i = 0; i < host.size(); ++i) ASSERT_NEAR(device[i], host[i], 2e-5) << "element " << i;
            ASSERT_EQ(host_lse.size(), device_lse.size());
            for (size_t i = 0; i < host_lse.size(); ++i) ASSERT_NEAR(device_lse[i], host_lse[i], 1e-4) << "row " << i;
        }
    }
}

// The comparison catches what it must: a NaN left in the output fails the check.
TEST(Compare, PoisonFailsTheCheck) {
    SKIP_WITHOUT_GPU();
    Problem p;
    p.batch = 1, p.heads_q = 1, p.heads_kv = 1, p.seqlen_q = 3, p.seqlen_kv = 3, p.head_dim = 64;
    TensorSet tensors(p);
    tensors.fill(p, 1);  // O stays poisoned: no kernel ran
    DeviceBuffer reference(4 * tensors.sizes.o);
    check(reference_forward(tensors.params, p.dtype, reference.get<float>()), "reference");
    CompareResult cmp;
    check(compare_with_reference(tensors.params, p.dtype, reference.get<float>(), default_tolerance(p.dtype), &cmp), "compare");
    EXPECT_FALSE(cmp.passed(default_tolerance(p.dtype)));
    EXPECT_EQ(cmp.nan_count, 3 * 64);
}

}  // namespace
}  // namespace fmha
