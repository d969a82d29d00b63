#include "tool/device_tensors.h"

#include "reference/device_reference.h"

namespace fmha {

void check(hipError_t err, const std::string& what) {
    if (err != hipSuccess) throw EnvironmentError(what + ": " + hipGetErrorString(err));
}

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) check(hipMalloc(&ptr_, bytes), "allocating " + std::to_string(bytes) + " bytes");
}

DeviceBuffer::~DeviceBuffer() {
    if (ptr_) (void)hipFree(ptr_);
}

TensorSet::TensorSet(const Problem& p)
    : sizes(buffer_sizes(p)), qkv(sizes.q * 2), k(sizes.k * 2), v(sizes.v * 2), o(sizes.o * 2) {
    const LayoutStrides s = layout_strides(p);
    const bool packed = p.layout == Layout::qkv_packed;
    params = shape_params(p);
    params.q = qkv.get();
    params.k = packed ? qkv.get<uint16_t>() + s.k_offset : k.get();
    params.v = packed ? qkv.get<uint16_t>() + s.v_offset : v.get();
    params.o = o.get();
}

void TensorSet::fill(const Problem& p, uint64_t seed, float q_range) {
    if (p.layout == Layout::qkv_packed) {
        check(fill_random(qkv.get(), sizes.q, p.dtype, seed, 0, 1.f), "filling QKV");
    } else {
        check(fill_random(qkv.get(), sizes.q, p.dtype, seed, 0, q_range), "filling Q");
        check(fill_random(k.get(), sizes.k, p.dtype, seed, 1, 1.f), "filling K");
        check(fill_random(v.get(), sizes.v, p.dtype, seed, 2, 1.f), "filling V");
    }
    poison_output();
}

void TensorSet::poison_output() {
    check(hipMemset(o.get(), 0xff, o.bytes()), "poisoning O");  // 0xffff is NaN in fp16 and bf16
    if (lse) check(hipMemset(lse->get(), 0xff, lse->bytes()), "poisoning the log-sum-exps");  // NaN in fp32
}

void TensorSet::request_lse() {
    lse = std::make_unique<DeviceBuffer>(sizeof(float) * params.batch * params.heads_q * params.seqlen_q);
    params.lse = lse->get<float>();
    poison_output();
}

std::vector<float> TensorSet::copy_lse() const {
    std::vector<float> host(lse->bytes() / sizeof(float));
    check(hipMemcpy(host.data(), lse->get(), lse->bytes(), hipMemcpyDeviceToHost), "copying the log-sum-exps");
    return host;
}

DeviceLengths::DeviceLengths(const SeqLens& lens)
    : batch_(static_cast<int>(lens.kv.size())), buffer_(2 * sizeof(int) * lens.kv.size()) {
    if (lens.kv.empty()) return;
    std::vector<int> both(lens.q);
    both.insert(both.end(), lens.kv.begin(), lens.kv.end());
    check(hipMemcpy(buffer_.get(), both.data(), buffer_.bytes(), hipMemcpyHostToDevice), "copying lengths");
}

void TensorSet::prepare_for(const KernelEntry& kernel) {
    const size_t bytes = kernel.workspace(params);
    workspace = bytes ? std::make_unique<DeviceBuffer>(bytes) : nullptr;
    params.workspace = bytes ? workspace->get() : nullptr;
    params.workspace_bytes = bytes;
}

void TensorSet::set_lengths(const DeviceLengths& lengths) {
    params.seqlens_q = lengths.q();
    params.seqlens_kv = lengths.kv();
}

std::vector<uint16_t> copy_logical(const void* base, const TensorStrides& s, int batch, int heads, int seq,
                                   int head_dim) {
    // The span from the first element to the end of the last row.
    const int64_t extent = (batch - 1) * s.batch + (heads - 1) * s.head + (seq - 1) * s.row + head_dim;
    std::vector<uint16_t> span(extent), logical;
    check(hipMemcpy(span.data(), base, span.size() * 2, hipMemcpyDeviceToHost), "copying to host");
    logical.reserve(int64_t(batch) * heads * seq * head_dim);
    for (int64_t b = 0; b < batch; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < seq; ++i) {
                const uint16_t* row = span.data() + b * s.batch + h * s.head + i * s.row;
                logical.insert(logical.end(), row, row + head_dim);
            }
    return logical;
}

}  // namespace fmha
