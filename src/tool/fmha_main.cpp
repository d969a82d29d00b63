// fmha.exe: runs one attention problem with a catalogue kernel, forward or backward, checks it
// against the reference and times it (see `fmha.exe -help`).
#include <hip/hip_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <sys/stat.h>
#include <vector>

#include "fmha/dropout_mask.h"
#include "fmha/heuristics.h"
#include "fmha/host_numeric.h"
#include "platform/device.h"
#include "reference/device_reference.h"
#include "tool/cli.h"
#include "tool/device_tensors.h"
#include "tool/npy.h"

namespace fmha {
namespace {

enum ExitCode { kSuccess = 0, kChecksFailed = 1, kBadInput = 2, kEnvironment = 3 };

std::string gib(double bytes) {
    char text[32];
    snprintf(text, sizeof(text), "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    return text;
}

void print_device(const DeviceInfo& device) {
    if (!device.found) {
        printf("Device........: none (%s)\n", device.error.c_str());
        return;
    }
    printf("Device........: %s (%s%s), %d multiprocessors, %s (%s free), L2 %.0f MiB, peak %.0f GB/s\n",
           device.name.c_str(), device.arch_name.c_str(),
           device.arch ? (std::string(", catalogue arch ") + token(*device.arch)).c_str() : ", not a catalogue arch",
           device.multiprocessors, gib(device.total_bytes).c_str(), gib(device.free_bytes).c_str(),
           device.l2_bytes / 1048576.0, device.peak_gbps);
}

int list_catalogue(const DeviceInfo& device) {
    print_device(device);
    printf("Catalogue.....: %zu kernels in this %s build, %zu of them backward (selection %s)\n",
           kernel_table().size() + bwd_kernel_table().size(), token(build_platform()), bwd_kernel_table().size(),
           catalogue_selection());
    std::vector<std::string> names;
    const auto add = [&](const KernelKey& key, const char* name) {
        names.push_back(name + std::string(device.arch && key.arch == *device.arch ? "  (runs here)" : ""));
    };
    for (const KernelEntry& e : kernel_table()) add(e.key, e.name);
    for (const BwdKernelEntry& e : bwd_kernel_table()) add(e.key, e.name);  // fmha.exe runs the forward ones
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) printf("%s\n", name.c_str());
    return kSuccess;
}

// The kernel forced with -kernel NAME, checked against the problem (arch aside); nullptr
// with the reason when it is unknown or cannot run the problem.
const KernelEntry* forced_kernel(const Options& o, std::string* reason) {
    const KernelEntry* entry = find_kernel_named(o.kernel);
    std::string why_not;
    if (!entry) {
        const bool backward = std::any_of(bwd_kernel_table().begin(), bwd_kernel_table().end(),
                                          [&](const BwdKernelEntry& e) { return o.kernel == e.name; });
        *reason = "-kernel " + o.kernel + (backward ? " is a backward kernel: -kernel names forward kernels (-bwd picks its own)"
                                                    : " is not in this build's catalogue (see -list)");
        return nullptr;
    }
    if (!kernel_supports(entry->key, o.problem, &why_not)) {
        *reason = "-kernel " + o.kernel + " cannot run this problem: " + why_not;
        return nullptr;
    }
    *reason = "forced with -kernel";
    return entry;
}

int report_bad_input(const std::string& reason) {
    fprintf(stderr, "fmha.exe: %s\n", reason.c_str());
    return kBadInput;
}

int report_no_kernel(const Problem& p, const std::string& reason, std::optional<Arch> arch = std::nullopt) {
    report_bad_input(reason);
    fprintf(stderr, "  nearest kernels in this build:");
    for (const std::string& name : nearest_kernels(p)) fprintf(stderr, " %s", name.c_str());
    fprintf(stderr, "\n  %s\n", regenerate_advice(p, arch).c_str());
    return kBadInput;
}

// Per-sequence lengths with -min-s; the packed layout always has them (all full length without it).
SeqLens draw_lengths(const Options& o) {
    SeqLens lens;
    const Problem& p = o.problem;
    const int shortest = o.min_seqlen ? o.min_seqlen : p.layout == Layout::packed ? p.seqlen_kv : 0;
    if (shortest == 0) return lens;
    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<int> length(shortest, p.seqlen_kv);
    for (int b = 0; b < p.batch; ++b) {
        const int kv = length(rng);
        lens.kv.push_back(kv);
        lens.q.push_back(p.seqlen_q == p.seqlen_kv ? kv : std::min(p.seqlen_q, kv));
    }
    return lens;
}

// The reference's outputs on the device, in logical [batch, heads_q, seqlen_q] rows of head_dim:
// O and, where the run asks for them, the log-sum-exps.
struct Reference {
    Reference(int64_t rows, int head_dim, bool lse)
        : o(4 * rows * head_dim), lse(lse ? std::make_unique<DeviceBuffer>(4 * rows) : nullptr) {}
    DeviceBuffer o;
    std::unique_ptr<DeviceBuffer> lse;
};

void write_floats(const std::string& path, const std::vector<int64_t>& shape, const void* device, size_t count) {
    std::vector<float> host(count);
    check(hipMemcpy(host.data(), device, count * 4, hipMemcpyDeviceToHost), "copying " + path);
    std::string error;
    if (!write_npy(path, "<f4", shape, host.data(), count * 4, &error)) throw EnvironmentError(error);
}

void save_tensors(const Options& o, const TensorSet& set, const Reference* reference,
                  const SeqLens& lens, const std::string& kernel) {
    const Problem& p = set.problem;
    mkdir(o.save_dir.c_str(), 0755);
    std::string error;
    auto save_shaped = [&](const char* name, std::vector<uint16_t> bits, const std::vector<int64_t>& shape) {
        bool ok;
        if (p.dtype == DType::fp16) {
            ok = write_npy(o.save_dir + "/" + name + ".npy", "<f2", shape, bits.data(), bits.size() * 2, &error);
        } else {  // NumPy has no bf16: widen exactly to fp32
            std::vector<uint32_t> wide(bits.begin(), bits.end());
            for (uint32_t& w : wide) w <<= 16;
            ok = write_npy(o.save_dir + "/" + name + ".npy", "<f4", shape, wide.data(), wide.size() * 4, &error);
        }
        if (!ok) throw EnvironmentError(error);
    };
    auto save = [&](const char* name, std::vector<uint16_t> bits, int heads, int seq) {
        save_shaped(name, std::move(bits), {p.batch, heads, seq, p.head_dim});
    };
    const FwdParams& f = set.params;
    const bool packed = p.layout == Layout::packed;
    // Packed: the tensors as the kernel read them, [tokens, heads, head_dim], and cu_seqlens.
    auto save_packed = [&](const char* name, const void* base, int64_t tokens, int heads) {
        std::vector<uint16_t> bits(tokens * heads * p.head_dim);
        check(hipMemcpy(bits.data(), base, bits.size() * 2, hipMemcpyDeviceToHost), "copying packed tokens");
        save_shaped(name, std::move(bits), {tokens, heads, p.head_dim});
    };
    auto save_ints = [&](const char* name, const std::vector<int>& values) {
        if (!write_npy(o.save_dir + "/" + name + ".npy", "<i4", {int64_t(values.size())}, values.data(), values.size() * 4, &error))
            throw EnvironmentError(error);
    };
    if (packed) {
        save_packed("q", f.q, p.total_q, p.heads_q);
        if (!p.paged()) {
            save_packed("k", f.k, p.total_kv, p.heads_kv);
            save_packed("v", f.v, p.total_kv, p.heads_kv);
        }
        save_ints("cu_seqlens_q", cumulative(lens.q));
        save_ints("cu_seqlens_k", cumulative(lens.kv));
    } else {
        save("q", copy_logical(f.q, f.q_strides, p.batch, p.heads_q, p.seqlen_q, p.head_dim), p.heads_q, p.seqlen_q);
    }
    if (!packed || p.paged()) {
        save("k", set.logical_k(), p.heads_kv, p.seqlen_kv);
        save("v", set.logical_v(), p.heads_kv, p.seqlen_kv);
    }
    if (p.paged()) {  // the pools as the kernel read them, and the table to follow
        const int64_t pages = paged_kv_shape(p).pages;
        const std::vector<int64_t> pool_shape = {pages, p.page_size, p.heads_kv, p.head_dim};
        auto pool = [&](const void* base) {
            std::vector<uint16_t> bits(set.sizes.k);
            check(hipMemcpy(bits.data(), base, bits.size() * 2, hipMemcpyDeviceToHost), "copying pages");
            return bits;
        };
        save_shaped("k_pages", pool(f.k), pool_shape);
        save_shaped("v_pages", pool(f.v), pool_shape);
        if (!write_npy(o.save_dir + "/block_table.npy", "<i4", {p.batch, f.max_pages_per_seq}, set.host_block_table.data(),
                       set.host_block_table.size() * 4, &error))
            throw EnvironmentError(error);
    }
    if (p.alibi) {
        const std::vector<float> slopes = alibi_slopes(p.heads_q);
        if (!write_npy(o.save_dir + "/alibi_slopes.npy", "<f4", {p.heads_q}, slopes.data(), slopes.size() * 4, &error))
            throw EnvironmentError(error);
    }
    if (packed)
        save_packed("o", f.o, p.total_q, p.heads_q);
    else
        save("o", copy_logical(f.o, f.o_strides, p.batch, p.heads_q, p.seqlen_q, p.head_dim), p.heads_q, p.seqlen_q);
    const std::vector<int64_t> rows = {p.batch, p.heads_q, p.seqlen_q};
    const size_t row_count = size_t(p.batch) * p.heads_q * p.seqlen_q;
    if (set.lse) {
        if (packed)
            write_floats(o.save_dir + "/lse.npy", {p.heads_q, p.total_q}, set.lse->get(), size_t(p.heads_q) * p.total_q);
        else
            write_floats(o.save_dir + "/lse.npy", rows, set.lse->get(), row_count);
    }
    if (reference) {
        write_floats(o.save_dir + "/reference.npy", {p.batch, p.heads_q, p.seqlen_q, p.head_dim}, reference->o.get(),
                     row_count * p.head_dim);
        if (reference->lse) write_floats(o.save_dir + "/reference_lse.npy", rows, reference->lse->get(), row_count);
    }
    auto list = [](const std::vector<int>& v) {
        std::string text = "[";
        for (size_t i = 0; i < v.size(); ++i) text += (i ? ", " : "") + std::to_string(v[i]);
        return text + "]";
    };
    std::ofstream meta(o.save_dir + "/meta.json");
    meta << "{\n  \"kernel\": \"" << kernel << "\",\n  \"dtype\": \"" << token(p.dtype) << "\",\n"
         << "  \"stored_as\": \"" << (p.dtype == DType::fp16 ? "float16" : "float32 (exact widening of bf16)") << "\",\n"
         << "  \"logical_layout\": \"" << (packed ? "q, k, v, o: [tokens, heads, head_dim], sequence b at rows cu_seqlens[b] .. cu_seqlens[b + 1] - 1; lse [heads, tokens]; reference: [batch, heads, seq, head_dim]" : "[batch, heads, seq, head_dim]") << "\",\n  \"run_layout\": \"" << layout_token(p.layout) << "\",\n"
         << "  \"batch\": " << p.batch << ", \"heads_q\": " << p.heads_q << ", \"heads_kv\": " << p.heads_kv << ",\n"
         << "  \"seqlen_q\": " << p.seqlen_q << ", \"seqlen_kv\": " << p.seqlen_kv << ", \"head_dim\": " << p.head_dim << ",\n"
         << "  \"scale\": " << p.softmax_scale() << ",\n  \"window_left\": " << p.mask.left
         << ", \"window_right\": " << p.mask.right << ",\n"
         << "  \"softcap\": " << p.softcap << ", \"alibi\": " << (p.alibi ? "true" : "false")
         << ", \"page_size\": " << p.page_size << ",\n"
         << "  \"score_rule\": \"s = scale * q.k; if softcap: s = softcap * tanh(s / softcap); if alibi: s -= alibi_slopes[h] * |i + len_kv - len_q - j|\",\n"
         << "  \"paged\": " << (p.paged() ? "\"k_pages, v_pages [pages, page_size, heads_kv, head_dim]; key j of sequence b is row j % page_size of page block_table[b, j // page_size]; k and v are gathered through it\"" : "null") << ",\n"
         << "  \"seqlens_q\": " << (lens.q.empty() ? "null" : list(lens.q)) << ",\n"
         << "  \"seqlens_kv\": " << (lens.kv.empty() ? "null" : list(lens.kv)) << ",\n"
         << "  \"lse\": " << (set.lse ? "\"natural log, [batch, heads_q, seqlen_q]; rows past a sequence's length are not written (NaN)\"" : "null") << ",\n"
         << "  \"mask_rule\": \"query i sees key j iff i + len_kv - len_q - window_left <= j <= i + len_kv - len_q + window_right (-1: that side unbounded)\"\n}\n";
    if (!meta) throw EnvironmentError("cannot write " + o.save_dir + "/meta.json");
}

// Milliseconds the device spends on what `work` enqueues (events around it).
template <class Work>
float device_ms(const std::string& what, Work&& work) {
    hipEvent_t start, stop;
    check(hipEventCreate(&start), "creating an event");
    check(hipEventCreate(&stop), "creating an event");
    check(hipEventRecord(start), "recording an event");
    work();
    check(hipEventRecord(stop), "recording an event");
    check(hipEventSynchronize(stop), what);
    float ms = 0;
    check(hipEventElapsedTime(&ms, start, stop), "reading events");
    (void)hipEventDestroy(start);
    (void)hipEventDestroy(stop);
    return ms;
}

// Prints a Checks line; true when the comparison passed.
bool print_check(const char* label, const CompareResult& result, const Tolerance& tol, const FwdParams& params) {
    const bool ok = result.passed(tol);
    printf("%s: %s (%s; tolerance |err| <= %.0e + %.0e*|ref|, rel L2 <= %.0e)\n", label, ok ? "SUCCESS" : "FAILED",
           result.describe(params).c_str(), tol.atol, tol.rtol, tol.rel_l2);
    return ok;
}

// With dropout, the mask the kernels draw (their Philox stream, written out) for the reference:
// its bytes (none without), and the mask written into a buffer of that size.
size_t dropout_mask_bytes(const Problem& p) {
    return p.dropout != 0.f ? size_t(p.batch) * p.heads_q * p.seqlen_q * p.seqlen_kv : 0;
}
void write_dropout_mask(const Problem& p, const DropoutParams& dropout, const DeviceBuffer& kept) {
    if (p.dropout != 0.f)
        check(launch_dropout_mask(dropout, p.batch, p.heads_q, p.seqlen_q, p.seqlen_kv, kept.get<uint8_t>(), nullptr),
              "writing the dropout mask");
}

// Runs the reference (timed once), compares O and any log-sum-exps, prints a Checks line for
// each; true when all passed.
bool check_against_reference(const Problem& p, const FwdParams& params, Reference& reference, float* reference_ms) {
    float* lse = reference.lse ? reference.lse->get<float>() : nullptr;
    const DeviceBuffer kept(dropout_mask_bytes(p));
    write_dropout_mask(p, params.dropout, kept);
    *reference_ms = device_ms("running the reference", [&] {
        check(reference_forward(params, p.dtype, reference.o.get<float>(), lse, nullptr, kept.get<uint8_t>()),
              "launching the reference");
    });
    const Tolerance tol = default_tolerance(p.dtype);
    CompareResult result;
    check(compare_with_reference(params, p.dtype, reference.o.get<float>(), tol, &result), "comparing");
    bool ok = print_check("Checks........", result, tol, params);
    if (lse) {
        check(compare_lse_with_reference(params, lse, lse_tolerance(), &result), "comparing the log-sum-exps");
        ok = print_check("Checks LSE....", result, lse_tolerance(), params) && ok;
    }
    return ok;
}

// Average milliseconds of one launch over o.runs after o.warm_up_runs, rotating input sets.
double time_runs(const Options& o, const KernelEntry& kernel, const std::vector<std::unique_ptr<TensorSet>>& sets,
                 const std::string& name) {
    auto launch = [&](int i) { check(kernel.launch(sets[i % sets.size()]->params, nullptr), "launching " + name); };
    for (int i = 0; i < o.warm_up_runs; ++i) launch(i);
    return device_ms("running " + name, [&] {
               for (int i = 0; i < o.runs; ++i) launch(i);
           }) / o.runs;
}

// A gradient in the reference's comparison: a FwdParams whose O is the gradient, [batch, heads,
// seq, head_dim] with those strides, rows past `lengths` not compared.
FwdParams gradient_view(const BwdParams& b, void* grad, const TensorStrides& strides, int heads, int seq, const int* lengths,
                        const int* cu_seqlens, int total) {
    FwdParams view{};
    view.o = grad, view.o_strides = strides;
    view.batch = b.batch, view.heads_q = heads, view.seqlen_q = seq, view.head_dim = b.head_dim, view.seqlens_q = lengths;
    view.cu_seqlens_q = cu_seqlens, view.total_q = total;
    return view;
}

// The backward's error rule here: twice the forward's. Its inputs are the forward's rounded O
// (in rowsum(dO * O)) and probabilities rounded for the tensor cores (docs/validation.md). O is
// bounded by V's largest value, a gradient is not: its absolute part scales with the gradient's
// largest magnitude past 1, as rounding errors of its sums do (a larger scale, longer sums).
Tolerance backward_tolerance(DType dtype, float gradient_max_abs) {
    const Tolerance forward = default_tolerance(dtype);
    return {2 * forward.atol * std::max(1.f, gradient_max_abs), 2 * forward.rtol, 2 * forward.rel_l2};
}

// -deterministic: a second launch (its gradients poisoned first) gives the first one's bits.
bool check_rerun_is_identical(const BwdKernelEntry& kernel, GradientSet& grads) {
    const auto copy = [](const DeviceBuffer& grad) {
        std::vector<uint8_t> bytes(grad.bytes());
        check(hipMemcpy(bytes.data(), grad.get(), bytes.size(), hipMemcpyDeviceToHost), "copying a gradient");
        return bytes;
    };
    const std::vector<uint8_t> first[] = {copy(grads.dq), copy(grads.dk), copy(grads.dv)};
    grads.poison();
    check(kernel.launch(grads.params, nullptr), std::string("launching ") + kernel.name);
    check(hipDeviceSynchronize(), std::string("running ") + kernel.name);
    const char* differing = first[0] != copy(grads.dq)   ? "dQ"
                            : first[1] != copy(grads.dk) ? "dK"
                            : first[2] != copy(grads.dv) ? "dV"
                                                         : nullptr;
    if (differing) printf("Checks rerun..: FAILED (%s differs from the first launch's)\n", differing);
    else printf("Checks rerun..: SUCCESS (dQ, dK, dV bitwise equal to the first launch's)\n");
    return !differing;
}

// -bwd: one launch of the forward kernel for O and the LSE, then the backward kernel on a random
// dO, checked against the reference backward (and, -deterministic, against a rerun) and timed.
int run_backward(const Options& o, const Problem& p, const DeviceInfo& device, const KernelEntry& forward, const SeqLens& lens) {
    const BwdSelection selection = select_bwd_kernel(p, *device.arch);
    if (!selection.entry) return report_bad_input("-bwd: " + selection.reason);
    const BwdKernelEntry& kernel = *selection.entry;
    const BufferSizes sizes = buffer_sizes(p);
    const double q_bytes = 2.0 * sizes.q, kv_bytes = 2.0 * sizes.k;
    // The fp32 references are [batch, heads, seqlen, head_dim], packed batches too.
    const double q_reference = 4.0 * p.batch * p.heads_q * p.seqlen_q * p.head_dim,
                 kv_reference = 4.0 * p.batch * p.heads_kv * p.seqlen_kv * p.head_dim;
    const double needed = 2.0 * (sizes.q + sizes.k + sizes.v + sizes.o) + 2 * q_bytes + 2 * kv_bytes +  // inputs, dO, grads
                          q_reference + 2 * kv_reference + double(kernel.workspace(backward_shape_params(p))) +
                          double(dropout_mask_bytes(p));
    if (needed > 0.95 * device.free_bytes) {
        fprintf(stderr, "fmha.exe: not enough device memory: the backward needs %s, the device has %s free\n", gib(needed).c_str(),
                gib(device.free_bytes).c_str());
        return kEnvironment;
    }
    if (o.verbose >= 1) {
        print_device(device);
        printf("Problem.......: %s (backward)\n", p.describe().c_str());
        printf("Forward.......: %s\n", forward.name);
        printf("Kernel........: %s\n", selection.reason.c_str());
    }
    const DeviceLengths lengths(lens);
    TensorSet set(p);
    set.fill(p, o.seed);
    set.set_lengths(lengths);
    set.prepare_for(forward);
    set.request_lse();
    check(forward.launch(set.params, nullptr), std::string("launching ") + forward.name);
    GradientSet grads(set, o.seed);
    grads.prepare_for(kernel);
    check(kernel.launch(grads.params, nullptr), std::string("launching ") + kernel.name);
    check(hipDeviceSynchronize(), std::string("running ") + kernel.name);

    int exit_code = kSuccess;
    if (!o.skip_checks) {
        const BwdParams& b = grads.params;
        DeviceBuffer dq(q_reference), dk(kv_reference), dv(kv_reference);
        const DeviceBuffer kept(dropout_mask_bytes(p));
        write_dropout_mask(p, b.dropout, kept);
        check(reference_backward(b, p.dtype, dq.get<float>(), dk.get<float>(), dv.get<float>(), nullptr, kept.get<uint8_t>()),
              "running the reference backward");
        const struct {
            const char* label;
            FwdParams view;
            const DeviceBuffer& reference;
        } grads_checked[] = {
            {"Checks dQ.....", gradient_view(b, b.dq, b.dq_strides, p.heads_q, p.seqlen_q, b.seqlens_q, b.cu_seqlens_q, b.total_q), dq},
            {"Checks dK.....", gradient_view(b, b.dk, b.dk_strides, p.heads_kv, p.seqlen_kv, b.seqlens_kv, b.cu_seqlens_kv, b.total_kv), dk},
            {"Checks dV.....", gradient_view(b, b.dv, b.dv_strides, p.heads_kv, p.seqlen_kv, b.seqlens_kv, b.cu_seqlens_kv, b.total_kv), dv},
        };
        for (const auto& g : grads_checked) {
            // Twice: the first comparison measures the reference's largest magnitude for the second's rule.
            CompareResult result;
            check(compare_with_reference(g.view, p.dtype, g.reference.get<float>(), backward_tolerance(p.dtype, 0), &result),
                  "comparing a gradient");
            const Tolerance tol = backward_tolerance(p.dtype, result.ref_max_abs);
            check(compare_with_reference(g.view, p.dtype, g.reference.get<float>(), tol, &result), "comparing a gradient");
            if (!print_check(g.label, result, tol, g.view)) exit_code = kChecksFailed;
        }
        if (p.deterministic && !check_rerun_is_identical(kernel, grads)) exit_code = kChecksFailed;
    }

    for (int i = 0; i < o.warm_up_runs; ++i) check(kernel.launch(grads.params, nullptr), std::string("launching ") + kernel.name);
    const double ms = device_ms(std::string("running ") + kernel.name, [&] {
                          for (int i = 0; i < o.runs; ++i) check(kernel.launch(grads.params, nullptr), std::string("launching ") + kernel.name);
                      }) / o.runs;
    const double flops = 2.5 * flop_count(p, lens);  // FlashAttention's count: the backward is 2.5 forwards
    printf("Elapsed ......: %.3f us (backward), %.3f Tflop/s\n", ms * 1e3, flops / ms / 1e9);
    printf("Average.......: %.6f ms over %d runs (%d warm-up), %.1f iterations/s\n", ms, o.runs, o.warm_up_runs, 1e3 / ms);
    return exit_code;
}

int run(const Options& o) {
    Problem p = o.problem;
    if (const auto errors = p.validate(); !errors.empty()) {
        for (const std::string& e : errors) fprintf(stderr, "fmha.exe: %s\n", e.c_str());
        return kBadInput;
    }
    // Everything that needs no GPU is settled first: the kernel exists for some arch.
    std::string reason;
    const KernelEntry* kernel = nullptr;
    if (!o.kernel.empty() && !(kernel = forced_kernel(o, &reason))) return report_bad_input(reason);
    if (o.kernel.empty() && !catalogue_covers(p))
        return report_no_kernel(p, "no kernel in this build's catalogue for " + p.describe());
    if (o.backward) {  // and some arch's backward kernel serves it
        std::string why;
        bool served = false;
        for (size_t arch = 0; arch < std::size(kArchFacts) && !served; ++arch) {
            if (platform_of(static_cast<Arch>(arch)) != build_platform()) continue;  // the reason names this build's archs
            const BwdSelection selection = select_bwd_kernel(p, static_cast<Arch>(arch));
            served = selection.entry != nullptr;
            if (why.empty()) why = selection.reason;
        }
        if (!served) return report_bad_input("-bwd: " + why);
    }

    const DeviceInfo device = query_device();
    if (!device.found) {
        // The platform was chosen at build time, perhaps not for the GPU the user meant: say how to pick the other.
        const bool amd = build_platform() == Platform::amd;
        fprintf(stderr, "fmha.exe: no GPU found: %s (this is the %s build; `make PLATFORM=%s` builds for %s GPUs)\n",
                device.error.c_str(), amd ? "AMD" : "NVIDIA", amd ? "nvidia" : "amd", amd ? "NVIDIA" : "AMD");
        return kEnvironment;
    }
    if (!device.arch) {
        fprintf(stderr, "fmha.exe: the device's arch %s is not a catalogue arch\n", device.arch_name.c_str());
        return kEnvironment;
    }
    if (kernel && kernel->key.arch != *device.arch)
        return report_bad_input("-kernel " + o.kernel + " is for " + token(kernel->key.arch) + ", the device is " +
                                device.arch_name + " (" + token(*device.arch) + ")");
    if (!kernel) {
        const Selection selection = select_kernel(p, *device.arch);
        if (!selection.entry) return report_no_kernel(p, selection.reason, device.arch);
        kernel = selection.entry;
        reason = selection.reason;
    }
    const std::string name = kernel->name;
    const SeqLens lens = draw_lengths(o);
    if (p.layout == Layout::packed) {
        p.total_q = cumulative(lens.q).back();
        p.total_kv = cumulative(lens.kv).back();
    }
    if (o.backward) return run_backward(o, p, device, *kernel, lens);

    const BufferSizes sizes = buffer_sizes(p);
    const double set_bytes = 2.0 * (sizes.q + sizes.k + sizes.v + sizes.o);
    // Rotate over input sets when one fits in L2 several times, so timing reads memory, not cache.
    const int sets = set_bytes < 4.0 * device.l2_bytes ? int(std::min(16.0, std::ceil(4.0 * device.l2_bytes / set_bytes))) : 1;
    const double rows = double(p.batch) * p.heads_q * p.seqlen_q, lse_bytes = o.lse ? 4.0 * rows : 0;
    const double reference_bytes = o.skip_checks ? 0 : 4.0 * rows * p.head_dim + lse_bytes;
    const double workspace_bytes = double(kernel->workspace(shape_params(p)));  // for the estimate
    const double needed = sets * (set_bytes + workspace_bytes + lse_bytes) + reference_bytes + 8.0 * p.batch;
    if (needed > 0.95 * device.free_bytes) {
        fprintf(stderr, "fmha.exe: not enough device memory: the problem needs %s (%d input set(s)%s), the device has %s free\n",
                gib(needed).c_str(), sets, o.skip_checks ? "" : " and the fp32 reference", gib(device.free_bytes).c_str());
        return kEnvironment;
    }

    if (o.verbose >= 1) {
        print_device(device);
        printf("Problem.......: %s%s\n", p.describe().c_str(),
               lens.kv.empty() ? "" : (" seqlens_kv drawn from [" + std::to_string(o.min_seqlen) + ", s]").c_str());
        printf("Kernel........: %s (%s)\n", name.c_str(), reason.c_str());
    }

    const DeviceLengths lengths(lens);
    std::vector<std::unique_ptr<TensorSet>> tensors;
    for (int i = 0; i < sets; ++i) {
        tensors.push_back(std::make_unique<TensorSet>(p));
        tensors.back()->fill(p, o.seed + i);
        tensors.back()->set_lengths(lengths);
        tensors.back()->prepare_for(*kernel);
        if (o.lse) tensors.back()->request_lse();
    }
    const FwdParams& checked = tensors[0]->params;
    if (o.verbose >= 1) {  // from the params of the launch: the ALiBi slopes can change the plan
        if (kernel->describe) printf("Launch........: %s\n", kernel->describe(checked).c_str());
        if (checked.workspace_bytes > 0)
            printf("Workspace.....: %.1f MiB of partial results of the key splits\n", checked.workspace_bytes / 1048576.0);
    }
    check(kernel->launch(checked, nullptr), "launching " + name);
    check(hipDeviceSynchronize(), "running " + name);

    int exit_code = kSuccess;
    float reference_ms = 0;
    std::unique_ptr<Reference> reference;
    if (!o.skip_checks) {
        reference = std::make_unique<Reference>(int64_t(rows), p.head_dim, o.lse);
        if (!check_against_reference(p, checked, *reference, &reference_ms)) exit_code = kChecksFailed;
    }
    if (!o.save_dir.empty()) {
        save_tensors(o, *tensors[0], reference.get(), lens, name);
        if (o.verbose >= 1)
            printf("Saved.........: q, k, v, o%s%s .npy and meta.json in %s\n", o.lse ? ", lse" : "",
                   reference ? (o.lse ? ", reference, reference_lse" : ", reference") : "", o.save_dir.c_str());
    }

    const double ms = time_runs(o, *kernel, tensors, name);
    const double flops = flop_count(p, lens), bytes = byte_count(p, lens);
    char speedup[32] = "n/a";
    if (!o.skip_checks) snprintf(speedup, sizeof(speedup), "%.2fx", reference_ms / ms);
    printf("Elapsed ......: %.3f us (%s), %.3f Tflop/s, %.1f GB/s\n", ms * 1e3, speedup, flops / ms / 1e9, bytes / ms / 1e6);
    printf("Average.......: %.6f ms over %d runs (%d warm-up, %d input set(s)), %.1f iterations/s\n", ms, o.runs,
           o.warm_up_runs, sets, 1e3 / ms);
    if (o.verbose >= 2)
        printf("Counted.......: %.4g FLOP (unmasked only), %.4g bytes (K/V once per KV head); (Yx) is the speed-up over the reference kernel\n",
               flops, bytes);
    if (o.verbose >= 1) {
        std::vector<uint16_t> first(std::min(4, p.head_dim));
        check(hipMemcpy(first.data(), checked.o, first.size() * 2, hipMemcpyDeviceToHost), "copying samples");
        printf("Samples.......: o[0,0,0,0:%zu] =", first.size());
        for (uint16_t bits : first) printf(" %.5f", to_float(p.dtype, bits));
        if (reference) {
            std::vector<float> ref(first.size());
            check(hipMemcpy(ref.data(), reference->o.get(), ref.size() * 4, hipMemcpyDeviceToHost), "copying samples");
            printf("  reference =");
            for (float r : ref) printf(" %.5f", r);
        }
        printf("\n");
    }
    return exit_code;
}

}  // namespace
}  // namespace fmha

int main(int argc, char** argv) {
    using namespace fmha;
    const ParsedCli cli = parse_cli(std::vector<std::string>(argv + 1, argv + argc));
    if (!cli.errors.empty()) {
        for (size_t i = 0; i < cli.errors.size(); ++i)  // one line per error
            fprintf(stderr, "fmha.exe: %s%s\n", cli.errors[i].c_str(), i + 1 == cli.errors.size() ? " (see fmha.exe -help)" : "");
        return kBadInput;
    }
    if (cli.options.help) {
        printf("%s", usage().c_str());
        return kSuccess;
    }
    try {
        if (cli.options.list) return list_catalogue(query_device());
        return run(cli.options);
    } catch (const EnvironmentError& e) {
        fprintf(stderr, "fmha.exe: %s\n", e.what());
        return kEnvironment;
    }
}
