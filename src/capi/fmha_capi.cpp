// The C ABI over the runtime: kernel table, heuristics and launch; nothing of fmha.exe.
#include "capi/fmha_capi.h"

#include <hip/hip_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fmha/dropout_mask.h"
#include "fmha/heuristics.h"
#include "fmha/kernel_table.h"
#include "fmha/kv_append.h"
#include "fmha/problem.h"
#include "kernels/common/element_rows.h"
#include "kernels/config.h"
#include "platform/device.h"

// python/fmha/_library.py mirrors these layouts with ctypes (its test checks the same sizes).
static_assert(sizeof(fmha_problem) == 76 && sizeof(fmha_plan) == 16, "C ABI layout changed: bump FMHA_ABI_VERSION");
static_assert(sizeof(fmha_tensors) == 200 && offsetof(fmha_tensors, seqlens_q) == 128 &&
                  offsetof(fmha_tensors, cu_seqlens_q) == 152 && offsetof(fmha_tensors, alibi_slopes) == 176 &&
                  offsetof(fmha_tensors, dropout_seed_offset) == 192,
              "C ABI layout changed: bump FMHA_ABI_VERSION");
static_assert(sizeof(fmha_bwd_tensors) == 328 && offsetof(fmha_bwd_tensors, seqlens_q) == 256 &&
                  offsetof(fmha_bwd_tensors, dropout_seed_offset) == 288 && offsetof(fmha_bwd_tensors, total_q) == 312 &&
                  offsetof(fmha_bwd_tensors, alibi_slopes) == 320,
              "C ABI layout changed: bump FMHA_ABI_VERSION");
static_assert(sizeof(fmha_kv_append) == 320 && offsetof(fmha_kv_append, k_new) == 72 &&
                  offsetof(fmha_kv_append, cache_seqlens) == 200 && offsetof(fmha_kv_append, seqlens_out) == 304,
              "C ABI layout changed: bump FMHA_ABI_VERSION");

namespace fmha {
namespace {

thread_local std::string last_error;

fmha_status fail(fmha_status status, std::string message) {
    last_error = std::move(message);
    return status;
}

// Runs body, turning any C++ exception into a status: nothing may unwind through the C ABI.
template <class Body>
fmha_status guarded(Body&& body) {
    try {
        return body();
    } catch (const std::exception& e) {
        return fail(FMHA_RUNTIME_ERROR, std::string("internal error: ") + e.what());
    } catch (...) {
        return fail(FMHA_RUNTIME_ERROR, "internal error");
    }
}

fmha_status to_problem(const fmha_problem* c, Problem* p) {
    if (!c) return fail(FMHA_INVALID_ARGUMENT, "problem is NULL");
    if (c->dtype != FMHA_FP16 && c->dtype != FMHA_BF16)
        return fail(FMHA_INVALID_ARGUMENT, "problem.dtype must be FMHA_FP16 (0) or FMHA_BF16 (1), got " + std::to_string(c->dtype));
    p->dtype = c->dtype == FMHA_BF16 ? DType::bf16 : DType::fp16;
    p->batch = c->batch;
    p->heads_q = c->heads_q;
    p->heads_kv = c->heads_kv;
    p->seqlen_q = c->seqlen_q;
    p->seqlen_kv = c->seqlen_kv;
    p->head_dim = c->head_dim;
    p->mask = c->masked ? AttentionMask::local(c->window_left, c->window_right) : AttentionMask::none();
    p->scale = c->scale;
    if (c->packed) p->layout = Layout::packed;
    p->softcap = c->softcap;  // Problem::validate() checks the options like fmha.exe's flags
    p->alibi = c->alibi != 0;
    p->page_size = c->page_size;
    p->dropout = c->dropout_p;
    if (c->packed) p->total_q = c->total_q;
    p->deterministic = c->deterministic != 0;
    std::vector<std::string> invalid = p->validate();
    if (c->alibi < 0 || c->alibi > 2)
        invalid.push_back("alibi must be 0 (off), 1 (slopes [heads_q]) or 2 (slopes [batch, heads_q]), got " +
                          std::to_string(c->alibi));
    if (c->page_size < 0) invalid.push_back("page_size must be >= 0 (0: not paged)");
    // The block table may be wider than the longest sequence needs, never narrower.
    const int pages_needed = paged_kv_shape(*p).max_pages_per_seq;
    if (p->paged() && c->max_pages_per_seq < pages_needed)
        invalid.push_back("max_pages_per_seq (" + std::to_string(c->max_pages_per_seq) + ") must cover seqlen_kv " +
                          std::to_string(c->seqlen_kv) + " in pages of " + std::to_string(c->page_size) + " (" +
                          std::to_string(pages_needed) + ")");
    if (!p->paged() && c->max_pages_per_seq != 0) invalid.push_back("max_pages_per_seq is for a paged problem (page_size > 0)");
    std::string errors;
    for (const std::string& error : invalid) errors += (errors.empty() ? "" : "; ") + error;
    if (!errors.empty()) return fail(FMHA_INVALID_ARGUMENT, "invalid problem: " + errors);
    return FMHA_OK;
}

// The catalogue arch of each device, asked of the runtime once: a launch pays no device query.
struct DeviceArch {
    std::string name;          // as the runtime says it ("sm_90")
    std::optional<Arch> arch;  // the catalogue's, when this build knows it
};

// *out points into the cache, whose entries never move or change once made.
fmha_status device_arch(int device, const DeviceArch** out) {
    static std::mutex mutex;
    static std::map<int, DeviceArch> cache;
    if (device < 0) return fail(FMHA_INVALID_ARGUMENT, "device must be non-negative, got " + std::to_string(device));
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(device); it != cache.end()) {
        *out = &it->second;
        return FMHA_OK;
    }
    std::string error;
    DeviceArch found;
    found.name = device_arch_name(device, &error);
    if (found.name.empty()) {
        const DeviceInfo info = query_device();  // names the cause when there is no GPU at all
        return fail(FMHA_NO_DEVICE, info.found ? error : "no GPU: " + info.error);
    }
    found.arch = arch_for_device(found.name);
    *out = &(cache[device] = found);
    return FMHA_OK;
}

fmha_status catalogue_arch(int device, Arch* arch) {
    const DeviceArch* found = nullptr;
    if (const fmha_status status = device_arch(device, &found); status != FMHA_OK) return status;
    if (!found->arch)
        return fail(FMHA_NO_DEVICE, "device " + std::to_string(device) + " is " + found->name +
                                        ", not an arch of the catalogue (" + token(build_platform()) + " build)");
    *arch = *found->arch;
    return FMHA_OK;
}

// Makes `device` current for the scope (launchers and workspace sizes use the current device).
class DeviceScope {
public:
    explicit DeviceScope(int device) {
        if (hipGetDevice(&previous_) == hipSuccess && previous_ != device && hipSetDevice(device) == hipSuccess)
            restore_ = true;
    }
    ~DeviceScope() {
        if (restore_) (void)hipSetDevice(previous_);
    }
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;

private:
    int previous_ = 0;
    bool restore_ = false;
};

// A tensor's pointer and strides: 16-byte vectors of rows, or (elements: a head_dim whose rows
// are not vectors anyway, which only element-row kernels take) 2-byte elements.
fmha_status check_tensor(const char* name, const void* data, const fmha_strides& s, bool elements = false) {
    if (!data) return fail(FMHA_INVALID_ARGUMENT, std::string("tensors.") + name + " is NULL");
    if (reinterpret_cast<uintptr_t>(data) % (elements ? 2 : 16) != 0)
        return fail(FMHA_INVALID_ARGUMENT, std::string("tensors.") + name + (elements ? " is not 2-byte aligned" : " is not 16-byte aligned"));
    for (int64_t stride : {s.batch, s.head, s.row}) {
        if (stride < 0 || (!elements && stride % 8 != 0))
            return fail(FMHA_INVALID_ARGUMENT, std::string("tensors.") + name + "_strides (" + std::to_string(s.batch) + ", " +
                                                   std::to_string(s.head) + ", " + std::to_string(s.row) +
                                                   (elements ? ") must be non-negative"
                                                             : ") must be non-negative multiples of 8 elements (16 bytes)"));
    }
    return FMHA_OK;
}

TensorStrides to_strides(const fmha_strides& s) { return {s.batch, s.head, s.row}; }

// What planning starts from: the problem, and the catalogue arch of the device.
fmha_status plan_inputs(const fmha_problem* problem, int device, const fmha_plan* plan, Problem* p, Arch* arch) {
    if (!plan) return fail(FMHA_INVALID_ARGUMENT, "plan is NULL");
    if (const fmha_status status = to_problem(problem, p); status != FMHA_OK) return status;
    return catalogue_arch(device, arch);
}

// What a launch starts from: the plan's entry of the table and the problem.
template <class Entry>
fmha_status launch_inputs(const fmha_plan* plan, const void* tensors, const std::vector<Entry>& table, const char* planner,
                          const fmha_problem* problem, const Entry** entry, Problem* p) {
    if (!plan) return fail(FMHA_INVALID_ARGUMENT, "plan is NULL");
    if (!tensors) return fail(FMHA_INVALID_ARGUMENT, "tensors is NULL");
    if (plan->kernel < 0 || size_t(plan->kernel) >= table.size())
        return fail(FMHA_INVALID_ARGUMENT, "plan.kernel " + std::to_string(plan->kernel) + " is not in [0, " +
                                               std::to_string(table.size()) + "): use " + planner);
    *entry = &table[plan->kernel];
    return to_problem(problem, p);
}

// Fills a plan with the chosen kernel (the workspace asked on `device`) and copies the reason.
template <class Entry, class Params>
fmha_status write_plan(const Entry* entry, const Entry* table, const Params& params, int device, const std::string& why,
                       fmha_plan* plan, char* reason, size_t reason_size) {
    const DeviceScope scope(device);
    plan->kernel = static_cast<int32_t>(entry - table);
    plan->device = device;
    plan->workspace_bytes = entry->workspace(params);
    if (reason && reason_size > 0) {
        std::strncpy(reason, why.c_str(), reason_size - 1);
        reason[reason_size - 1] = '\0';
    }
    return FMHA_OK;
}

// What the forward and the backward both take from the caller's tensors (fmha_tensors,
// fmha_bwd_tensors): Q, K, V, O, their strides, the lengths and the LSE.
template <class Params, class Tensors>
void take_inputs(Params& params, const Tensors& t) {
    params.q = t.q;
    params.k = t.k;
    params.v = t.v;
    params.o = t.o;
    params.q_strides = to_strides(t.q_strides);
    params.k_strides = to_strides(t.k_strides);
    params.v_strides = to_strides(t.v_strides);
    params.o_strides = to_strides(t.o_strides);
    params.seqlens_q = t.seqlens_q;
    params.seqlens_kv = t.seqlens_kv;
    params.lse = t.lse;
    params.dropout.seed_offset = t.dropout_seed_offset;
}

// ALiBi's slopes are given exactly where the problem asks for ALiBi; the kernels' row stride of
// them (FwdParams::alibi_batch_stride).
fmha_status check_alibi(const Problem& p, const float* slopes) {
    if (p.alibi != (slopes != nullptr))
        return fail(FMHA_INVALID_ARGUMENT, p.alibi ? "problem.alibi needs tensors.alibi_slopes (fp32 [heads_q] or [batch, heads_q])"
                                                   : "tensors.alibi_slopes is given but problem.alibi is 0");
    if (reinterpret_cast<uintptr_t>(slopes) % 4 != 0) return fail(FMHA_INVALID_ARGUMENT, "tensors.alibi_slopes must be 4-byte aligned");
    return FMHA_OK;
}
int alibi_batch_stride(const fmha_problem& problem) { return problem.alibi == 2 ? problem.heads_q : 0; }

// Dropout's seed and offset are given exactly where the problem asks for dropout.
fmha_status check_dropout(const Problem& p, const int64_t* seed_offset) {
    if (p.dropout != 0.f && !seed_offset)
        return fail(FMHA_INVALID_ARGUMENT,
                    "problem.dropout_p > 0 needs tensors.dropout_seed_offset (int64 [seed, offset] in device memory)");
    if (p.dropout == 0.f && seed_offset)
        return fail(FMHA_INVALID_ARGUMENT, "tensors.dropout_seed_offset is given but problem.dropout_p is 0");
    if (reinterpret_cast<uintptr_t>(seed_offset) % 8 != 0)
        return fail(FMHA_INVALID_ARGUMENT, "tensors.dropout_seed_offset must be 8-byte aligned");
    return FMHA_OK;
}

// The plan's device must be of the kernel's arch.
fmha_status check_device(int device, Arch kernel_arch, const char* kernel) {
    Arch arch;
    if (const fmha_status status = catalogue_arch(device, &arch); status != FMHA_OK) return status;
    if (arch != kernel_arch)
        return fail(FMHA_INVALID_ARGUMENT, "plan's kernel " + std::string(kernel) + " is not for device " +
                                               std::to_string(device) + " (" + token(arch) + ")");
    return FMHA_OK;
}

// Checks the workspace the kernel needs for params and launches it on the device.
template <class Entry, class Params>
fmha_status launch_entry(const Entry& entry, const Params& params, int device, void* stream) {
    const DeviceScope scope(device);
    const size_t needed = entry.workspace(params);
    if (needed > 0 && (!params.workspace || params.workspace_bytes < needed))
        return fail(FMHA_INVALID_ARGUMENT, "workspace: " + std::string(entry.name) + " needs " + std::to_string(needed) +
                                               " bytes for this problem, got " + std::to_string(params.workspace_bytes) +
                                               (params.workspace ? "" : " (NULL)"));
    if (const hipError_t err = entry.launch(params, static_cast<hipStream_t>(stream)); err != hipSuccess)
        return fail(FMHA_RUNTIME_ERROR, "launching " + std::string(entry.name) + ": " + hipGetErrorString(err));
    return FMHA_OK;
}

// The sizes, pointers and strides of an append (fmha_append_kv), before any device is asked.
fmha_status check_append(const fmha_kv_append* a) {
    if (!a) return fail(FMHA_INVALID_ARGUMENT, "args is NULL");
    std::vector<std::string> invalid;
    if (a->dtype != FMHA_FP16 && a->dtype != FMHA_BF16)
        invalid.push_back("dtype must be FMHA_FP16 (0) or FMHA_BF16 (1), got " + std::to_string(a->dtype));
    const std::pair<const char*, int32_t> positive[] = {{"batch", a->batch},       {"seqlen_new", a->seqlen_new},
                                                        {"heads_kv", a->heads_kv}, {"head_dim", a->head_dim},
                                                        {"capacity", a->capacity}, {"cache_rows", a->cache_rows}};
    for (const auto& [name, value] : positive)
        if (value <= 0) invalid.push_back(std::string(name) + " must be positive (got " + std::to_string(value) + ")");
    if (a->head_dim % 8) invalid.push_back("head_dim must be a multiple of 8 (got " + std::to_string(a->head_dim) + ")");
    if (a->page_size < 0) invalid.push_back("page_size must be >= 0 (0: not paged)");
    if (a->page_size > 0) {
        if (!a->block_table) invalid.push_back("page_size > 0 needs block_table");
        if (a->cache_batch_idx) invalid.push_back("cache_batch_idx cannot be combined with block_table");
        if (a->max_pages_per_seq <= 0 || int64_t(a->max_pages_per_seq) * a->page_size < a->capacity)
            invalid.push_back("max_pages_per_seq (" + std::to_string(a->max_pages_per_seq) + ") pages of " +
                              std::to_string(a->page_size) + " must hold capacity " + std::to_string(a->capacity));
    } else if (a->block_table) {
        invalid.push_back("block_table is given but page_size is 0");
    }
    if (!a->cache_seqlens && (a->seqlen_fixed < 0 || int64_t(a->seqlen_fixed) + a->seqlen_new > a->capacity))
        invalid.push_back("seqlen_fixed (" + std::to_string(a->seqlen_fixed) + ") + seqlen_new (" +
                          std::to_string(a->seqlen_new) + ") must be in [0, capacity " + std::to_string(a->capacity) + "]");
    if (a->rotary_dim != 0) {
        if (a->rotary_dim < 0 || a->rotary_dim % 16 || a->rotary_dim > a->head_dim)
            invalid.push_back("rotary_dim must be 0 or a multiple of 16 up to head_dim " + std::to_string(a->head_dim) +
                              " (got " + std::to_string(a->rotary_dim) + ")");
        if (a->seqlen_ro < a->capacity)
            invalid.push_back("seqlen_ro (" + std::to_string(a->seqlen_ro) + ") must be at least capacity " +
                              std::to_string(a->capacity) + ": every position of the cache has a row of cos and sin");
        if (!a->rotary_cos || !a->rotary_sin) invalid.push_back("rotary_dim > 0 needs rotary_cos and rotary_sin");
        if ((reinterpret_cast<uintptr_t>(a->rotary_cos) | reinterpret_cast<uintptr_t>(a->rotary_sin)) % 16)
            invalid.push_back("rotary_cos and rotary_sin must be 16-byte aligned");
    }
    if (a->q) {
        if (a->rotary_dim == 0) invalid.push_back("q is given but rotary_dim is 0: only rotated queries are written");
        if (a->seqlen_q <= 0 || a->heads_q <= 0)
            invalid.push_back("seqlen_q and heads_q must be positive with q (got " + std::to_string(a->seqlen_q) + ", " +
                              std::to_string(a->heads_q) + ")");
    }
    if (!a->error) invalid.push_back("error is NULL: the kernel reports refused tokens there");
    for (const void* p : {static_cast<const void*>(a->error), static_cast<const void*>(a->seqlens_out),
                          static_cast<const void*>(a->cache_seqlens), static_cast<const void*>(a->cache_batch_idx),
                          static_cast<const void*>(a->block_table)})
        if (reinterpret_cast<uintptr_t>(p) % 4) invalid.push_back("the int32 pointers must be 4-byte aligned");
    if (int64_t(a->batch) * (int64_t(a->seqlen_new) + a->seqlen_q) > 0x7fffffff)
        invalid.push_back("batch x (seqlen_new + seqlen_q) must be below 2^31 (one block each)");
    std::string errors;
    for (const std::string& error : invalid)
        if (errors.find(error) == std::string::npos) errors += (errors.empty() ? "" : "; ") + error;
    if (!errors.empty()) return fail(FMHA_INVALID_ARGUMENT, "invalid append: " + errors);
    fmha_status checked = check_tensor("k_new", a->k_new, a->k_new_strides);  // the first misfit names itself
    if (checked == FMHA_OK) checked = check_tensor("v_new", a->v_new, a->v_new_strides);
    if (checked == FMHA_OK) checked = check_tensor("k_cache", a->k_cache, a->k_cache_strides);
    if (checked == FMHA_OK) checked = check_tensor("v_cache", a->v_cache, a->v_cache_strides);
    if (checked == FMHA_OK && a->q) checked = check_tensor("q", a->q, a->q_strides);
    if (checked == FMHA_OK && a->q) checked = check_tensor("q_out", a->q_out, a->q_out_strides);
    return checked;
}

KvAppendParams append_params(const fmha_kv_append& a) {
    KvAppendParams p{};
    p.k_new = a.k_new;
    p.v_new = a.v_new;
    p.k_new_strides = to_strides(a.k_new_strides);
    p.v_new_strides = to_strides(a.v_new_strides);
    p.k_cache = a.k_cache;
    p.v_cache = a.v_cache;
    p.k_cache_strides = to_strides(a.k_cache_strides);
    p.v_cache_strides = to_strides(a.v_cache_strides);
    p.batch = a.batch;
    p.seqlen_new = a.seqlen_new;
    p.heads_kv = a.heads_kv;
    p.head_dim = a.head_dim;
    p.capacity = a.capacity;
    p.cache_rows = a.cache_rows;
    p.cache_batch_idx = a.cache_batch_idx;
    p.block_table = a.block_table;
    p.page_size = a.page_size;
    p.max_pages_per_seq = a.max_pages_per_seq;
    p.cache_seqlens = a.cache_seqlens;
    p.seqlen_fixed = a.seqlen_fixed;
    p.rotary_dim = a.rotary_dim;
    p.interleaved = a.rotary_interleaved != 0;
    p.seqlen_ro = a.seqlen_ro;
    p.rotary_cos = a.rotary_cos;
    p.rotary_sin = a.rotary_sin;
    p.q = a.q;
    p.q_out = a.q_out;
    p.q_strides = to_strides(a.q_strides);
    p.q_out_strides = to_strides(a.q_out_strides);
    p.seqlen_q = a.q ? a.seqlen_q : 0;
    p.heads_q = a.heads_q;
    p.q_per_row = a.q_per_row != 0;
    p.seqlens_out = a.seqlens_out;
    p.error = a.error;
    return p;
}

}  // namespace
}  // namespace fmha

using namespace fmha;

extern "C" {

int32_t fmha_abi_version(void) { return FMHA_ABI_VERSION; }

const char* fmha_last_error(void) { return last_error.c_str(); }

const char* fmha_build_platform(void) { return token(build_platform()); }

int32_t fmha_kernel_count(void) { return static_cast<int32_t>(kernel_table().size()); }

const char* fmha_kernel_name(int32_t kernel) {
    const auto& table = kernel_table();
    return kernel >= 0 && size_t(kernel) < table.size() ? table[kernel].name : nullptr;
}

fmha_status fmha_device_arch(int32_t device, const char** arch) {
    return guarded([&] {
        if (!arch) return fail(FMHA_INVALID_ARGUMENT, "arch is NULL");
        Arch found;
        if (const fmha_status status = catalogue_arch(device, &found); status != FMHA_OK) return status;
        *arch = token(found);
        return FMHA_OK;
    });
}

fmha_status fmha_plan_forward(const fmha_problem* problem, int32_t device, fmha_plan* plan, char* reason,
                              size_t reason_size) {
    return guarded([&] {
        Problem p;
        Arch arch;
        if (const fmha_status status = plan_inputs(problem, device, plan, &p, &arch); status != FMHA_OK) return status;
        const Selection selection = select_kernel(p, arch);
        if (!selection.entry) return fail(FMHA_NO_KERNEL, selection.reason + "; " + regenerate_advice(p, arch));
        return write_plan(selection.entry, kernel_table().data(), shape_params(p), device, selection.reason, plan, reason,
                          reason_size);
    });
}

fmha_status fmha_forward(const fmha_plan* plan, const fmha_problem* problem, const fmha_tensors* tensors,
                         void* workspace, uint64_t workspace_bytes, void* stream) {
    return guarded([&] {
        const KernelEntry* found = nullptr;
        Problem p;
        if (const fmha_status status =
                launch_inputs(plan, tensors, kernel_table(), "fmha_plan_forward", problem, &found, &p);
            status != FMHA_OK)
            return status;
        const KernelEntry& entry = *found;
        std::string why_not;
        if (!kernel_supports(entry.key, p, &why_not))
            return fail(FMHA_INVALID_ARGUMENT, "plan's kernel " + std::string(entry.name) + " does not fit the problem: " + why_not);
        const fmha_tensors& t = *tensors;
        const bool elements = element_rows(p.head_dim);
        fmha_status checked = check_tensor("q", t.q, t.q_strides, elements);  // the first misfit names itself
        if (checked == FMHA_OK) checked = check_tensor("k", t.k, t.k_strides, elements);
        if (checked == FMHA_OK) checked = check_tensor("v", t.v, t.v_strides, elements);
        if (checked == FMHA_OK) checked = check_tensor("o", t.o, t.o_strides, elements);
        if (checked != FMHA_OK) return checked;
        // Paged K and V are not packed: their lengths come from seqlens_kv or cu_seqlens_kv.
        if (p.layout == Layout::packed && !p.paged() &&
            (!t.cu_seqlens_q || !t.cu_seqlens_kv || t.total_q <= 0 || t.total_kv <= 0))
            return fail(FMHA_INVALID_ARGUMENT, "problem.packed needs tensors.cu_seqlens_q and cu_seqlens_kv and "
                                               "positive total_q and total_kv (got " + std::to_string(t.total_q) + ", " +
                                               std::to_string(t.total_kv) + ")");
        if (p.layout == Layout::packed && p.paged() && (!t.cu_seqlens_q || t.total_q <= 0 || (!t.seqlens_kv && !t.cu_seqlens_kv)))
            return fail(FMHA_INVALID_ARGUMENT, "problem.packed with a paged KV cache needs tensors.cu_seqlens_q, a positive "
                                               "total_q (got " + std::to_string(t.total_q) + ") and the keys' lengths "
                                               "(seqlens_kv or cu_seqlens_kv)");
        if (p.paged() != (t.block_table != nullptr))
            return fail(FMHA_INVALID_ARGUMENT, p.paged() ? "problem.page_size " + std::to_string(p.page_size) +
                                                               " (paged KV) needs tensors.block_table"
                                                         : std::string("tensors.block_table is given but problem.page_size is 0"));
        if (const fmha_status status = check_alibi(p, t.alibi_slopes); status != FMHA_OK) return status;
        if (reinterpret_cast<uintptr_t>(t.block_table) % 4 != 0)
            return fail(FMHA_INVALID_ARGUMENT, "tensors.block_table must be 4-byte aligned");
        if (const fmha_status status = check_dropout(p, t.dropout_seed_offset); status != FMHA_OK) return status;
        if (const fmha_status status = check_device(plan->device, entry.key.arch, entry.name); status != FMHA_OK)
            return status;

        FwdParams params = shape_params(p);
        take_inputs(params, t);
        params.alibi_slopes = t.alibi_slopes;
        params.alibi_batch_stride = alibi_batch_stride(*problem);
        params.block_table = t.block_table;
        if (p.paged()) params.max_pages_per_seq = problem->max_pages_per_seq;  // the caller's table width
        if (p.layout == Layout::packed) {
            params.cu_seqlens_q = t.cu_seqlens_q;
            params.cu_seqlens_kv = t.cu_seqlens_kv;
            params.total_q = t.total_q;
            params.total_kv = t.total_kv;
            for (TensorStrides* s : {&params.q_strides, &params.k_strides, &params.v_strides, &params.o_strides})
                if (!p.paged() || s == &params.q_strides || s == &params.o_strides)
                    s->batch = s->row;  // FwdParams: a packed tensor's sequences start cu_seqlens "batches" in; pages keep theirs
        }
        params.workspace = workspace;
        params.workspace_bytes = workspace_bytes;

        return launch_entry(entry, params, plan->device, stream);
    });
}

int32_t fmha_bwd_kernel_count(void) { return static_cast<int32_t>(bwd_kernel_table().size()); }

const char* fmha_bwd_kernel_name(int32_t kernel) {
    const auto& table = bwd_kernel_table();
    return kernel >= 0 && size_t(kernel) < table.size() ? table[kernel].name : nullptr;
}

fmha_status fmha_plan_backward(const fmha_problem* problem, int32_t device, fmha_plan* plan, char* reason,
                               size_t reason_size) {
    return guarded([&] {
        Problem p;
        Arch arch;
        if (const fmha_status status = plan_inputs(problem, device, plan, &p, &arch); status != FMHA_OK) return status;
        const BwdSelection selection = select_bwd_kernel(p, arch);
        if (!selection.entry) return fail(FMHA_NO_KERNEL, selection.reason);
        return write_plan(selection.entry, bwd_kernel_table().data(), backward_shape_params(p), device, selection.reason,
                          plan, reason, reason_size);
    });
}

fmha_status fmha_backward(const fmha_plan* plan, const fmha_problem* problem, const fmha_bwd_tensors* tensors,
                          void* workspace, uint64_t workspace_bytes, void* stream) {
    return guarded([&] {
        const BwdKernelEntry* found = nullptr;
        Problem p;
        if (const fmha_status status =
                launch_inputs(plan, tensors, bwd_kernel_table(), "fmha_plan_backward", problem, &found, &p);
            status != FMHA_OK)
            return status;
        const BwdKernelEntry& entry = *found;
        // A kernel select_bwd_kernel could give on the plan's arch (checked before any device is asked).
        const KernelKey wanted{p.dtype, entry.key.head_dim, HeadsKind::gqa, p.mask.kernel_mask(), entry.key.family, entry.key.arch};
        if (entry.key != wanted || !head_dim_fits(entry.key.family, entry.key.head_dim, p.head_dim))
            return fail(FMHA_INVALID_ARGUMENT, "plan's kernel " + std::string(entry.name) + " does not fit the problem: use fmha_plan_backward");
        const fmha_bwd_tensors& t = *tensors;
        const std::pair<const char*, std::pair<const void*, fmha_strides>> checked[] = {
            {"q", {t.q, t.q_strides}},    {"k", {t.k, t.k_strides}},       {"v", {t.v, t.v_strides}},
            {"o", {t.o, t.o_strides}},    {"d_o", {t.d_o, t.d_o_strides}}, {"dq", {t.dq, t.dq_strides}},
            {"dk", {t.dk, t.dk_strides}}, {"dv", {t.dv, t.dv_strides}}};
        for (const auto& [name, tensor] : checked)
            if (const fmha_status status = check_tensor(name, tensor.first, tensor.second); status != FMHA_OK) return status;
        if (!t.lse) return fail(FMHA_INVALID_ARGUMENT, "tensors.lse is NULL: the backward needs the forward's LSE");
        const bool packed = p.layout == Layout::packed;
        if (packed && (!t.cu_seqlens_q || !t.cu_seqlens_kv || t.total_q <= 0 || t.total_kv <= 0))
            return fail(FMHA_INVALID_ARGUMENT, "problem.packed needs tensors.cu_seqlens_q and cu_seqlens_kv and positive "
                                               "total_q and total_kv (got " + std::to_string(t.total_q) + ", " +
                                               std::to_string(t.total_kv) + ")");
        if (!packed && (t.cu_seqlens_q || t.cu_seqlens_kv))
            return fail(FMHA_INVALID_ARGUMENT, "tensors.cu_seqlens_q or cu_seqlens_kv is given but problem.packed is 0");
        if (const fmha_status status = check_dropout(p, t.dropout_seed_offset); status != FMHA_OK) return status;
        if (const fmha_status status = check_alibi(p, t.alibi_slopes); status != FMHA_OK) return status;
        if (const fmha_status status = check_device(plan->device, entry.key.arch, entry.name); status != FMHA_OK)
            return status;

        BwdParams params = backward_shape_params(p);
        take_inputs(params, t);
        params.alibi_slopes = t.alibi_slopes;
        params.alibi_batch_stride = alibi_batch_stride(*problem);
        params.d_o = t.d_o;
        params.dq = t.dq;
        params.dk = t.dk;
        params.dv = t.dv;
        params.d_o_strides = to_strides(t.d_o_strides);
        params.dq_strides = to_strides(t.dq_strides);
        params.dk_strides = to_strides(t.dk_strides);
        params.dv_strides = to_strides(t.dv_strides);
        params.d_lse = t.d_lse;
        if (packed) {
            params.cu_seqlens_q = t.cu_seqlens_q;
            params.cu_seqlens_kv = t.cu_seqlens_kv;
            params.total_q = t.total_q;
            params.total_kv = t.total_kv;
            for (TensorStrides* s : {&params.q_strides, &params.k_strides, &params.v_strides, &params.o_strides,
                                     &params.d_o_strides, &params.dq_strides, &params.dk_strides, &params.dv_strides})
                s->batch = s->row;  // as fmha_forward's: sequences start cu_seqlens "batches" in
        }
        params.workspace = workspace;
        params.workspace_bytes = workspace_bytes;

        return launch_entry(entry, params, plan->device, stream);
    });
}

fmha_status fmha_append_kv(const fmha_kv_append* args, void* stream) {
    return guarded([&] {
        if (const fmha_status status = check_append(args); status != FMHA_OK) return status;
        Arch arch;  // the device must be one this build's kernels are for
        if (const fmha_status status = catalogue_arch(args->device, &arch); status != FMHA_OK) return status;
        const DeviceScope scope(args->device);
        const DType dtype = args->dtype == FMHA_BF16 ? DType::bf16 : DType::fp16;
        if (const hipError_t err = launch_kv_append(append_params(*args), dtype, static_cast<hipStream_t>(stream));
            err != hipSuccess)
            return fail(FMHA_RUNTIME_ERROR, std::string("launching the KV-cache append: ") + hipGetErrorString(err));
        return FMHA_OK;
    });
}

fmha_status fmha_dropout_mask(float dropout_p, const int64_t* seed_offset, int32_t batch, int32_t heads_q,
                              int32_t seqlen_q, int32_t seqlen_kv, uint8_t* mask, void* stream) {
    return guarded([&] {
        if (!(dropout_p > 0.f && dropout_p < 1.f))
            return fail(FMHA_INVALID_ARGUMENT, "dropout_p must be in (0, 1), got " + std::to_string(dropout_p));
        if (!seed_offset || reinterpret_cast<uintptr_t>(seed_offset) % 8 != 0 || !mask)
            return fail(FMHA_INVALID_ARGUMENT, "seed_offset (8-byte aligned) and mask must be device pointers");
        if (batch <= 0 || heads_q <= 0 || seqlen_q <= 0 || seqlen_kv <= 0)
            return fail(FMHA_INVALID_ARGUMENT, "batch, heads_q, seqlen_q and seqlen_kv must be positive");
        const DropoutParams params{dropout_p, seed_offset};
        if (const hipError_t err =
                launch_dropout_mask(params, batch, heads_q, seqlen_q, seqlen_kv, mask, static_cast<hipStream_t>(stream));
            err != hipSuccess)
            return fail(FMHA_RUNTIME_ERROR, std::string("launching the dropout mask: ") + hipGetErrorString(err));
        return FMHA_OK;
    });
}

}  // extern "C"
