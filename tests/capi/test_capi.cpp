// The C ABI of libfmha.so (src/capi/fmha_capi.h): what it says about bad calls, without a GPU.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>

#include "capi/fmha_capi.h"

extern "C" int fmha_capi_c_caller_version(void);

namespace {

fmha_problem valid_problem() {
    fmha_problem p{};
    p.dtype = FMHA_FP16;
    p.batch = 2;
    p.heads_q = 8;
    p.heads_kv = 2;
    p.seqlen_q = 1;
    p.seqlen_kv = 64;
    p.head_dim = 128;
    return p;
}

fmha_tensors aligned_tensors() {
    alignas(16) static char buffer[64];  // never dereferenced: every check here fails first
    fmha_tensors t{};
    t.q = t.k = t.v = buffer;
    t.o = buffer;
    t.q_strides = t.o_strides = {8 * 128, 128, 8 * 128};
    t.k_strides = t.v_strides = {2 * 64 * 128, 64 * 128, 128};
    return t;
}

// The first kernel of the table whose name contains `part`.
int32_t kernel_with(const char* part) {
    for (int32_t i = 0; i < fmha_kernel_count(); ++i)
        if (std::strstr(fmha_kernel_name(i), part)) return i;
    return -1;
}

std::string error() { return fmha_last_error(); }

TEST(CApi, VersionPlatformAndCatalogue) {
    EXPECT_EQ(fmha_abi_version(), FMHA_ABI_VERSION);
    EXPECT_EQ(fmha_capi_c_caller_version(), FMHA_ABI_VERSION);
    const std::string platform = fmha_build_platform();
    EXPECT_TRUE(platform == "nvidia" || platform == "amd") << platform;
    ASSERT_GT(fmha_kernel_count(), 0);
    for (int32_t i = 0; i < fmha_kernel_count(); ++i)
        EXPECT_EQ(std::string(fmha_kernel_name(i)).rfind("fmha_fwd_", 0), 0u) << i;
    EXPECT_EQ(fmha_kernel_name(-1), nullptr);
    EXPECT_EQ(fmha_kernel_name(fmha_kernel_count()), nullptr);
}

TEST(CApi, PlanRejectsNullAndInvalidProblems) {
    fmha_plan plan{};
    EXPECT_EQ(fmha_plan_forward(nullptr, 0, &plan, nullptr, 0), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "problem is NULL");
    fmha_problem p = valid_problem();
    EXPECT_EQ(fmha_plan_forward(&p, 0, nullptr, nullptr, 0), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "plan is NULL");

    p.dtype = 7;
    EXPECT_EQ(fmha_plan_forward(&p, 0, &plan, nullptr, 0), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("problem.dtype must be FMHA_FP16 (0) or FMHA_BF16 (1), got 7"), std::string::npos) << error();

    p = valid_problem();
    p.heads_kv = 3;
    EXPECT_EQ(fmha_plan_forward(&p, 0, &plan, nullptr, 0), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("must be a multiple of KV heads (3)"), std::string::npos) << error();

    p = valid_problem();
    p.batch = 0;
    EXPECT_EQ(fmha_plan_forward(&p, 0, &plan, nullptr, 0), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("must be positive (got 0)"), std::string::npos) << error();

    p = valid_problem();
    p.masked = 1, p.window_left = -2, p.window_right = 0;
    EXPECT_EQ(fmha_plan_forward(&p, 0, &plan, nullptr, 0), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("window sides must be >= 0, or -1 for unbounded (got left -2"), std::string::npos) << error();

    p = valid_problem();
    EXPECT_EQ(fmha_plan_forward(&p, -1, &plan, nullptr, 0), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("device must be non-negative"), std::string::npos) << error();
}

TEST(CApi, PlanWithoutGpuSaysSo) {
    fmha_problem p = valid_problem();
    fmha_plan plan{};
    char reason[256] = "";
    const fmha_status status = fmha_plan_forward(&p, 0, &plan, reason, sizeof reason);
    if (status == FMHA_OK) GTEST_SKIP() << "a GPU is present (planned " << fmha_kernel_name(plan.kernel) << ")";
    EXPECT_EQ(status, FMHA_NO_DEVICE) << error();
    EXPECT_NE(error().find("no GPU"), std::string::npos) << error();
    const char* arch = nullptr;
    EXPECT_EQ(fmha_device_arch(0, &arch), FMHA_NO_DEVICE);
    EXPECT_EQ(arch, nullptr);
}

TEST(CApi, ForwardRejectsBadPlansAndTensors) {
    const fmha_problem p = valid_problem();
    const fmha_tensors t = aligned_tensors();
    fmha_plan plan{};
    EXPECT_EQ(fmha_forward(nullptr, &p, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "plan is NULL");
    EXPECT_EQ(fmha_forward(&plan, &p, nullptr, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "tensors is NULL");
    plan.kernel = -1;
    EXPECT_EQ(fmha_forward(&plan, &p, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("plan.kernel -1 is not in [0, "), std::string::npos) << error();

    // A causal kernel for a problem without a mask.
    plan.kernel = kernel_with("_causal_");
    ASSERT_GE(plan.kernel, 0) << "the catalogue has no causal kernel";
    EXPECT_EQ(fmha_forward(&plan, &p, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("does not fit the problem"), std::string::npos) << error();

    plan.kernel = kernel_with("_fp16_d128_gqa_nomask_");
    if (plan.kernel < 0) GTEST_SKIP() << "no fp16 d128 gqa kernel in this catalogue";
    fmha_tensors bad = t;
    bad.k = nullptr;
    EXPECT_EQ(fmha_forward(&plan, &p, &bad, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "tensors.k is NULL");
    bad = t;
    bad.v = static_cast<const char*>(t.v) + 2;
    EXPECT_EQ(fmha_forward(&plan, &p, &bad, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "tensors.v is not 16-byte aligned");
    bad = t;
    bad.o_strides.row = 132;
    bad.q_strides.head = 4;  // the first misfit is the one named
    EXPECT_EQ(fmha_forward(&plan, &p, &bad, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("tensors.q_strides (1024, 4, 1024) must be non-negative multiples of 8"), std::string::npos)
        << error();

    // Packed tokens need the sequences' places (before any device is asked).
    fmha_problem packed = p;
    packed.packed = 1;
    EXPECT_EQ(fmha_forward(&plan, &packed, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "problem.packed needs tensors.cu_seqlens_q and cu_seqlens_kv and positive total_q and total_kv "
                       "(got 0, 0)");
}

TEST(CApi, ServingOptionsAreValidated) {
    fmha_plan plan{};
    auto planned = [&](const fmha_problem& p) { return fmha_plan_forward(&p, 0, &plan, nullptr, 0); };
    fmha_problem p = valid_problem();
    p.page_size = 24;
    p.max_pages_per_seq = 3;
    EXPECT_EQ(planned(p), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("page size (-page-size) must be a power of two from 16 to 256 (got 24)"), std::string::npos) << error();
    p.page_size = 16;  // 64 keys need 4 pages
    EXPECT_EQ(planned(p), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("max_pages_per_seq (3) must cover seqlen_kv 64 in pages of 16 (4)"), std::string::npos) << error();
    p = valid_problem();
    p.max_pages_per_seq = 4;
    EXPECT_EQ(planned(p), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("max_pages_per_seq is for a paged problem"), std::string::npos) << error();
    p = valid_problem();
    p.softcap = -1.f;
    EXPECT_EQ(planned(p), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("softcap (-softcapping-scale-bmm1) must be a finite number >= 0"), std::string::npos) << error();
    p = valid_problem();
    p.alibi = 3;
    EXPECT_EQ(planned(p), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("alibi must be 0 (off), 1 (slopes [heads_q]) or 2 (slopes [batch, heads_q]), got 3"),
              std::string::npos) << error();
}

TEST(CApi, ForwardNeedsTheOptionsTensors) {
    const int32_t kernel = kernel_with("_fp16_d128_gqa_nomask_decode_");
    if (kernel < 0) GTEST_SKIP() << "no fp16 d128 gqa decode kernel in this catalogue";
    const fmha_plan plan{kernel, 0, 0};
    const fmha_tensors t = aligned_tensors();
    const fmha_problem plain = valid_problem();
    alignas(16) static int32_t table[8];
    alignas(16) static float slopes[8];
    // Each refused before any device is asked: these pass without a GPU.
    fmha_problem paged = valid_problem();
    paged.page_size = 16;
    paged.max_pages_per_seq = 4;
    EXPECT_EQ(fmha_forward(&plan, &paged, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "problem.page_size 16 (paged KV) needs tensors.block_table");
    fmha_tensors with_table = t;
    with_table.block_table = table;
    EXPECT_EQ(fmha_forward(&plan, &plain, &with_table, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "tensors.block_table is given but problem.page_size is 0");
    fmha_problem alibi = valid_problem();
    alibi.alibi = 1;
    EXPECT_EQ(fmha_forward(&plan, &alibi, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "problem.alibi needs tensors.alibi_slopes (fp32 [heads_q] or [batch, heads_q])");
    fmha_tensors with_slopes = t;
    with_slopes.alibi_slopes = slopes;
    EXPECT_EQ(fmha_forward(&plan, &plain, &with_slopes, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "tensors.alibi_slopes is given but problem.alibi is 0");
    // Packed queries against a paged cache: the keys' lengths are needed, cu_seqlens_kv is not.
    paged.packed = 1;
    with_table.cu_seqlens_q = table;
    with_table.total_q = 2;
    EXPECT_EQ(fmha_forward(&plan, &paged, &with_table, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("needs tensors.cu_seqlens_q, a positive total_q (got 2) and the keys' lengths"), std::string::npos)
        << error();
}

TEST(CApi, BackwardKernelsAreListedApart) {
    // This platform's backward kernels, never forward ones.
    for (int32_t i = 0; i < fmha_bwd_kernel_count(); ++i)
        EXPECT_EQ(std::string(fmha_bwd_kernel_name(i)).rfind("fmha_bwd_", 0), 0u) << i;
    EXPECT_EQ(fmha_bwd_kernel_name(-1), nullptr);
    EXPECT_EQ(fmha_bwd_kernel_name(fmha_bwd_kernel_count()), nullptr);
    if (std::string(fmha_build_platform()) == "nvidia") EXPECT_GT(fmha_bwd_kernel_count(), 0);
}

TEST(CApi, BackwardRejectsBadPlansAndTensors) {
    fmha_problem p = valid_problem();
    p.seqlen_q = 64;
    alignas(16) static char buffer[64];
    alignas(16) static float lse[4];
    fmha_bwd_tensors t{};
    t.q = t.k = t.v = t.o = t.d_o = buffer;
    t.dq = t.dk = t.dv = buffer;
    t.q_strides = t.o_strides = t.d_o_strides = t.dq_strides = {64 * 8 * 128, 128, 8 * 128};
    t.k_strides = t.v_strides = t.dk_strides = t.dv_strides = {64 * 2 * 128, 128, 2 * 128};
    t.lse = lse;
    fmha_plan plan{};
    EXPECT_EQ(fmha_backward(nullptr, &p, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "plan is NULL");
    plan.kernel = fmha_bwd_kernel_count();
    EXPECT_EQ(fmha_backward(&plan, &p, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("use fmha_plan_backward"), std::string::npos) << error();
    plan.kernel = -1;
    for (int32_t i = 0; i < fmha_bwd_kernel_count(); ++i)
        if (std::strstr(fmha_bwd_kernel_name(i), "_d128_gqa_nomask_")) {
            plan.kernel = i;
            p.dtype = std::strstr(fmha_bwd_kernel_name(i), "_bf16_") ? FMHA_BF16 : FMHA_FP16;
        }
    if (plan.kernel < 0) GTEST_SKIP() << "no d128 backward kernel in this catalogue";
    fmha_problem causal = p;
    causal.masked = 1, causal.window_left = -1, causal.window_right = 0;
    EXPECT_EQ(fmha_backward(&plan, &causal, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("does not fit the problem"), std::string::npos) << error();
    fmha_problem larger = p;  // (a smaller head_dim runs on it; a larger one does not)
    larger.head_dim = 136;
    EXPECT_EQ(fmha_backward(&plan, &larger, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("does not fit the problem"), std::string::npos) << error();
    fmha_bwd_tensors bad = t;
    bad.d_o = nullptr;
    EXPECT_EQ(fmha_backward(&plan, &p, &bad, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "tensors.d_o is NULL");
    bad = t;
    bad.dk_strides.row = 4;
    EXPECT_EQ(fmha_backward(&plan, &p, &bad, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("tensors.dk_strides"), std::string::npos) << error();
    bad = t;
    bad.lse = nullptr;
    EXPECT_EQ(fmha_backward(&plan, &p, &bad, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("the backward needs the forward's LSE"), std::string::npos) << error();
    fmha_problem packed = p;
    packed.packed = 1;
    EXPECT_EQ(fmha_backward(&plan, &packed, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("problem.packed needs tensors.cu_seqlens_q and cu_seqlens_kv"), std::string::npos) << error();
    alignas(16) static int32_t cu_seqlens[3] = {0, 64, 128};
    bad = t;
    bad.cu_seqlens_q = bad.cu_seqlens_kv = cu_seqlens;
    EXPECT_EQ(fmha_backward(&plan, &p, &bad, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("but problem.packed is 0"), std::string::npos) << error();
    packed.total_q = 2 * 64 + 1;  // more tokens than batch x seqlen_q
    EXPECT_EQ(fmha_backward(&plan, &packed, &bad, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("total_q (129) must be in [0, batch x seqlen_q]"), std::string::npos) << error();
    fmha_problem alibi = p;  // the forward's ALiBi: its slopes, exactly where the problem has it
    alibi.alibi = 1;
    EXPECT_EQ(fmha_backward(&plan, &alibi, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "problem.alibi needs tensors.alibi_slopes (fp32 [heads_q] or [batch, heads_q])");
    bad = t;
    bad.alibi_slopes = lse;
    EXPECT_EQ(fmha_backward(&plan, &p, &bad, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "tensors.alibi_slopes is given but problem.alibi is 0");
}

// A valid append of 2 sequences, 1 new token, 2 KV heads of 128 into a cache of 64 (never launched here).
fmha_kv_append valid_append() {
    alignas(16) static char buffer[64];
    fmha_kv_append a{};
    a.dtype = FMHA_BF16;
    a.batch = 2, a.seqlen_new = 1, a.heads_kv = 2, a.head_dim = 128;
    a.capacity = 64, a.cache_rows = 2;
    a.k_new = a.v_new = buffer;
    a.k_cache = a.v_cache = buffer;
    a.k_new_strides = a.v_new_strides = {2 * 128, 128, 2 * 128};
    a.k_cache_strides = a.v_cache_strides = {64 * 2 * 128, 128, 2 * 128};
    a.cache_seqlens = reinterpret_cast<const int32_t*>(buffer);
    a.error = reinterpret_cast<int32_t*>(buffer);
    return a;
}

// Every misfit is named before any device is asked (device -1 would fail next).
TEST(CApi, AppendChecksItsArguments) {
    EXPECT_EQ(fmha_append_kv(nullptr, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "args is NULL");
    const std::pair<void (*)(fmha_kv_append&), const char*> cases[] = {
        {[](fmha_kv_append& a) { a.dtype = 5; }, "dtype must be FMHA_FP16 (0) or FMHA_BF16 (1), got 5"},
        {[](fmha_kv_append& a) { a.seqlen_new = 0; }, "seqlen_new must be positive (got 0)"},
        {[](fmha_kv_append& a) { a.head_dim = 60; }, "head_dim must be a multiple of 8 (got 60)"},
        {[](fmha_kv_append& a) { a.error = nullptr; }, "error is NULL"},
        {[](fmha_kv_append& a) { a.cache_seqlens = nullptr, a.seqlen_fixed = 64; },
         "seqlen_fixed (64) + seqlen_new (1) must be in [0, capacity 64]"},
        {[](fmha_kv_append& a) { a.page_size = 16; }, "page_size > 0 needs block_table"},
        {[](fmha_kv_append& a) { a.page_size = 16, a.block_table = a.cache_seqlens, a.max_pages_per_seq = 3; },
         "max_pages_per_seq (3) pages of 16 must hold capacity 64"},
        {[](fmha_kv_append& a) { a.block_table = a.cache_seqlens; }, "block_table is given but page_size is 0"},
        {[](fmha_kv_append& a) { a.rotary_dim = 24, a.seqlen_ro = 64, a.rotary_cos = a.rotary_sin = a.k_new; },
         "rotary_dim must be 0 or a multiple of 16 up to head_dim 128 (got 24)"},
        {[](fmha_kv_append& a) { a.rotary_dim = 64, a.seqlen_ro = 63, a.rotary_cos = a.rotary_sin = a.k_new; },
         "seqlen_ro (63) must be at least capacity 64"},
        {[](fmha_kv_append& a) { a.rotary_dim = 64, a.seqlen_ro = 64; }, "rotary_dim > 0 needs rotary_cos and rotary_sin"},
        {[](fmha_kv_append& a) { a.q = a.k_new; }, "q is given but rotary_dim is 0"},
        {[](fmha_kv_append& a) { a.k_cache_strides.row = 4; }, "tensors.k_cache_strides (16384, 128, 4) must be"},
        {[](fmha_kv_append& a) { a.v_new = static_cast<const char*>(a.v_new) + 8; }, "tensors.v_new is not 16-byte aligned"},
        {[](fmha_kv_append& a) {
             a.rotary_dim = 64, a.seqlen_ro = 64, a.rotary_cos = a.rotary_sin = a.k_new, a.q = a.k_new, a.seqlen_q = 1;
             a.heads_q = 8, a.q_strides = {8 * 128, 128, 8 * 128};
         },
         "tensors.q_out is NULL"},
    };
    for (const auto& [change, message] : cases) {
        fmha_kv_append a = valid_append();
        a.device = -1;
        change(a);
        EXPECT_EQ(fmha_append_kv(&a, nullptr), FMHA_INVALID_ARGUMENT) << message;
        EXPECT_NE(error().find(message), std::string::npos) << error();
    }
    fmha_kv_append a = valid_append();
    a.device = -1;  // valid arguments: only the device is wrong
    EXPECT_EQ(fmha_append_kv(&a, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "device must be non-negative, got -1");
}

TEST(CApi, DropoutNeedsItsSeedAndOffset) {
    alignas(16) static int64_t seed_offset[2] = {1, 2};
    alignas(16) static uint8_t mask[16];
    // The mask's checks come before any device is asked.
    EXPECT_EQ(fmha_dropout_mask(1.f, seed_offset, 1, 1, 4, 4, mask, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("dropout_p must be in (0, 1)"), std::string::npos) << error();
    EXPECT_EQ(fmha_dropout_mask(0.1f, nullptr, 1, 1, 4, 4, mask, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(fmha_dropout_mask(0.1f, seed_offset, 1, 0, 4, 4, mask, nullptr), FMHA_INVALID_ARGUMENT);
    fmha_problem p = valid_problem();
    p.dropout_p = 1.f;
    fmha_plan plan{};
    EXPECT_EQ(fmha_plan_forward(&p, 0, &plan, nullptr, 0), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("dropout must be in [0, 1)"), std::string::npos) << error();
    const int32_t kernel = kernel_with("_fp16_d128_gqa_nomask_mmaprefill_");
    if (kernel < 0) GTEST_SKIP() << "no fp16 d128 gqa tensor-core prefill kernel in this catalogue";
    plan = fmha_plan{kernel, 0, 0};
    fmha_tensors t = aligned_tensors();
    p.dropout_p = 0.1f;
    EXPECT_EQ(fmha_forward(&plan, &p, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_NE(error().find("needs tensors.dropout_seed_offset"), std::string::npos) << error();
    t.dropout_seed_offset = seed_offset;
    const fmha_problem plain = valid_problem();
    EXPECT_EQ(fmha_forward(&plan, &plain, &t, nullptr, 0, nullptr), FMHA_INVALID_ARGUMENT);
    EXPECT_EQ(error(), "tensors.dropout_seed_offset is given but problem.dropout_p is 0");
}

TEST(CApi, LastErrorIsPerThread) {
    fmha_problem p = valid_problem();
    p.batch = -1;
    fmha_plan plan{};
    ASSERT_EQ(fmha_plan_forward(&p, 0, &plan, nullptr, 0), FMHA_INVALID_ARGUMENT);
    std::string other_thread = "unset";
    std::thread([&] { other_thread = fmha_last_error(); }).join();
    EXPECT_EQ(other_thread, "");
    EXPECT_NE(error().find("must be positive (got -1)"), std::string::npos) << error();
}

}  // namespace
