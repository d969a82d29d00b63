#include "gpu_check.h"

#include <cmath>
#include <sstream>

#include "tool/device_tensors.h"

namespace fmha {

std::string GpuCase::describe() const {
    std::ostringstream s;
    s << problem.describe();
    if (!lens.kv.empty()) s << " variable lengths";
    if (q_range != 1.f) s << " q_range=" << q_range;
    if (lse) s << " with lse";
    s << " seed=" << seed;
    return s.str();
}

CaseResult run_case(const KernelEntry& kernel, const GpuCase& c) {
    Problem p = c.problem;
    if (p.layout == Layout::packed) {  // the tokens the lengths add up to
        p.total_q = cumulative(c.lens.q).back();
        p.total_kv = cumulative(c.lens.kv).back();
    }
    CaseResult result;
    try {
        TensorSet tensors(p);
        tensors.fill(p, c.seed, c.q_range);
        const DeviceLengths lengths(c.lens);
        tensors.set_lengths(lengths);
        tensors.prepare_for(kernel);
        if (c.lse) tensors.request_lse();
        // Twice, O poisoned before each: a launch must not depend on what an earlier one left
        // behind (in the workspace, say).
        for (int launch = 0; launch < 2; ++launch) {
            tensors.poison_output();
            check(kernel.launch(tensors.params, nullptr), "launch");
            check(hipDeviceSynchronize(), "kernel");
        }
        const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;  // the reference's, logical [b, h, s_q]
        DeviceBuffer reference(4 * rows * p.head_dim);
        DeviceBuffer reference_lse(c.lse ? 4 * rows : 0);
        check(reference_forward(tensors.params, p.dtype, reference.get<float>(), reference_lse.get<float>()),
              "reference");
        const Tolerance tol = default_tolerance(p.dtype);
        CompareResult cmp;
        check(compare_with_reference(tensors.params, p.dtype, reference.get<float>(), tol, &cmp), "compare");
        result.passed = cmp.passed(tol);
        result.message = c.describe() + ": " + cmp.describe(tensors.params);
        if (c.lse) {
            check(compare_lse_with_reference(tensors.params, reference_lse.get<float>(), lse_tolerance(), &cmp), "compare");
            result.passed = result.passed && cmp.passed(lse_tolerance());
            result.message += "; lse: " + cmp.describe(tensors.params);
            // Rows past a sequence's length keep the poison (a packed batch's LSE has none).
            const std::vector<float> lse = tensors.copy_lse();
            int64_t written = 0;
            for (int64_t row = 0; row < rows && p.layout != Layout::packed; ++row) {
                const int64_t b = row / p.seqlen_q / p.heads_q;
                if (!c.lens.q.empty() && row % p.seqlen_q >= c.lens.q[b] && !std::isnan(lse[row])) ++written;
            }
            result.passed = result.passed && written == 0;
            if (written) result.message += "; " + std::to_string(written) + " lse rows past their sequence written";
        }
    } catch (const EnvironmentError& e) {
        result.message = c.describe() + ": " + e.what();
    }
    return result;
}

const DeviceInfo& test_device() {
    static const DeviceInfo device = query_device();
    return device;
}

}  // namespace fmha
