#include "gpu_check.h"

#include <sstream>

#include "tool/device_tensors.h"

namespace fmha {

std::string GpuCase::describe() const {
    std::ostringstream s;
    s << problem.describe();
    if (!lens.kv.empty()) s << " variable lengths";
    if (q_range != 1.f) s << " q_range=" << q_range;
    s << " seed=" << seed;
    return s.str();
}

CaseResult run_case(const KernelEntry& kernel, const GpuCase& c) {
    const Problem& p = c.problem;
    CaseResult result;
    try {
        TensorSet tensors(p);
        tensors.fill(p, c.seed, c.q_range);
        const DeviceLengths lengths(c.lens);
        tensors.set_lengths(lengths);
        tensors.prepare_for(kernel);
        // Twice, O poisoned before each: a launch must not depend on what an earlier one left
        // behind (in the workspace, say).
        for (int launch = 0; launch < 2; ++launch) {
            tensors.poison_output();
            check(kernel.launch(tensors.params, nullptr), "launch");
            check(hipDeviceSynchronize(), "kernel");
        }
        DeviceBuffer reference(4 * tensors.sizes.o);
        check(reference_forward(tensors.params, p.dtype, p.causal, reference.get<float>()), "reference");
        const Tolerance tol = default_tolerance(p.dtype);
        CompareResult cmp;
        check(compare_with_reference(tensors.params, p.dtype, reference.get<float>(), tol, &cmp), "compare");
        result.passed = cmp.passed(tol);
        result.message = c.describe() + ": " + cmp.describe(tensors.params);
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
