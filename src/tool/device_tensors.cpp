#include "tool/device_tensors.h"

#include <algorithm>
#include <numeric>
#include <random>

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
    : problem(p), sizes(buffer_sizes(p)), qkv(sizes.q * 2), k(sizes.k * 2), v(sizes.v * 2), o(sizes.o * 2),
      alibi_slopes(p.alibi ? sizeof(float) * p.heads_q : 0),
      block_table(sizeof(int) * int64_t(p.batch) * paged_kv_shape(p).max_pages_per_seq),
      dropout_seed_offset(p.dropout != 0.f ? 2 * sizeof(int64_t) : 0) {
    const LayoutStrides s = layout_strides(p);
    const bool packed = p.layout == Layout::qkv_packed;
    params = shape_params(p);
    params.q = qkv.get();
    params.k = packed ? qkv.get<uint16_t>() + s.k_offset : k.get();
    params.v = packed ? qkv.get<uint16_t>() + s.v_offset : v.get();
    params.o = o.get();
    if (p.alibi) {
        const std::vector<float> slopes = fmha::alibi_slopes(p.heads_q);
        check(hipMemcpy(alibi_slopes.get(), slopes.data(), alibi_slopes.bytes(), hipMemcpyHostToDevice), "copying the ALiBi slopes");
        params.alibi_slopes = alibi_slopes.get<float>();
    }
    if (p.paged()) params.block_table = block_table.get<int>();
    if (p.dropout != 0.f) params.dropout.seed_offset = dropout_seed_offset.get<int64_t>();
}

void TensorSet::fill(const Problem& p, uint64_t seed, float q_range) {
    if (p.layout == Layout::qkv_packed) {
        check(fill_random(qkv.get(), sizes.q, p.dtype, seed, 0, 1.f), "filling QKV");
    } else {
        check(fill_random(qkv.get(), sizes.q, p.dtype, seed, 0, q_range), "filling Q");
        check(fill_random(k.get(), sizes.k, p.dtype, seed, 1, 1.f), "filling K");
        check(fill_random(v.get(), sizes.v, p.dtype, seed, 2, 1.f), "filling V");
    }
    if (p.paged()) {
        // Every slot of the table a distinct page, in random order; the spare page NaN.
        const PagedKvShape shape = paged_kv_shape(p);
        std::vector<int> pages(shape.pages);
        std::iota(pages.begin(), pages.end(), 0);
        std::shuffle(pages.begin(), pages.end(), std::mt19937_64(seed));
        spare_page = pages.back();
        host_block_table.assign(pages.begin(), pages.end() - 1);
        const size_t page_bytes = 2 * size_t(p.page_size) * p.heads_kv * p.head_dim;
        check(hipMemset(k.get<char>() + spare_page * page_bytes, 0xff, page_bytes), "poisoning the spare K page");
        check(hipMemset(v.get<char>() + spare_page * page_bytes, 0xff, page_bytes), "poisoning the spare V page");
        upload_block_table();
    }
    if (p.dropout != 0.f) {  // the input set's seed keys its dropout mask too (offset 0)
        const int64_t seed_offset[2] = {int64_t(seed), 0};
        check(hipMemcpy(dropout_seed_offset.get(), seed_offset, sizeof(seed_offset), hipMemcpyHostToDevice),
              "copying the dropout seed");
    }
    poison_output();
}

void TensorSet::upload_block_table() {
    check(hipMemcpy(block_table.get(), host_block_table.data(), block_table.bytes(), hipMemcpyHostToDevice),
          "copying the block table");
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

std::vector<int> cumulative(const std::vector<int>& lengths) {
    std::vector<int> sums(lengths.size() + 1, 0);
    std::partial_sum(lengths.begin(), lengths.end(), sums.begin() + 1);
    return sums;
}

DeviceLengths::DeviceLengths(const SeqLens& lens)
    : batch_(static_cast<int>(lens.kv.size())), host_(lens),
      buffer_(lens.kv.empty() ? 0 : sizeof(int) * (4 * lens.kv.size() + 2)) {
    if (lens.kv.empty()) return;
    std::vector<int> all(lens.q);
    all.insert(all.end(), lens.kv.begin(), lens.kv.end());
    for (const std::vector<int>* l : {&lens.q, &lens.kv}) {
        const std::vector<int> sums = cumulative(*l);
        all.insert(all.end(), sums.begin(), sums.end());
    }
    check(hipMemcpy(buffer_.get(), all.data(), buffer_.bytes(), hipMemcpyHostToDevice), "copying lengths");
}

void TensorSet::prepare_for(const KernelEntry& kernel) {
    const size_t bytes = kernel.workspace(params);
    workspace = bytes ? std::make_unique<DeviceBuffer>(bytes) : nullptr;
    params.workspace = bytes ? workspace->get() : nullptr;
    params.workspace_bytes = bytes;
    // Garbage, not zeros: a launch may not rely on what the workspace holds.
    if (bytes) check(hipMemset(params.workspace, 0xa5, bytes), "filling the workspace");
}

namespace {
size_t q_elements(const Problem& p) { return size_t(p.batch) * p.heads_q * p.seqlen_q * p.head_dim; }
size_t kv_elements(const Problem& p) { return size_t(p.batch) * p.heads_kv * p.seqlen_kv * p.head_dim; }
TensorStrides contiguous(int heads, int seq, int head_dim) { return {int64_t(heads) * seq * head_dim, int64_t(seq) * head_dim, head_dim}; }
}  // namespace

GradientSet::GradientSet(const TensorSet& forward, uint64_t seed)
    : d_o(2 * q_elements(forward.problem)), dq(2 * q_elements(forward.problem)), dk(2 * kv_elements(forward.problem)),
      dv(2 * kv_elements(forward.problem)) {
    const Problem& p = forward.problem;
    const FwdParams& f = forward.params;
    if (!forward.lse) throw std::logic_error("GradientSet: the forward's TensorSet must request its LSE");
    params = backward_shape_params(p);
    params.q = f.q, params.k = f.k, params.v = f.v, params.o = f.o;
    params.q_strides = f.q_strides, params.k_strides = f.k_strides, params.v_strides = f.v_strides, params.o_strides = f.o_strides;
    params.lse = forward.lse->get<float>();
    params.dropout = f.dropout;  // the forward's p, seed and offset: the backward regenerates its mask
    params.alibi_slopes = f.alibi_slopes, params.alibi_batch_stride = f.alibi_batch_stride;  // (its softcap: the problem's)
    params.seqlens_q = f.seqlens_q, params.seqlens_kv = f.seqlens_kv;
    params.cu_seqlens_q = f.cu_seqlens_q, params.cu_seqlens_kv = f.cu_seqlens_kv;
    params.total_q = f.cu_seqlens_q ? f.total_q : 0, params.total_kv = f.cu_seqlens_kv ? f.total_kv : 0;
    params.d_o = d_o.get(), params.dq = dq.get(), params.dk = dk.get(), params.dv = dv.get();
    // Packed: token-major rows, as the forward's packed tensors (FwdParams: batch stride = row stride).
    const auto gradient_strides = [&](int heads, int seq) {
        return f.cu_seqlens_q ? TensorStrides{int64_t(heads) * p.head_dim, p.head_dim, int64_t(heads) * p.head_dim}
                              : contiguous(heads, seq, p.head_dim);
    };
    params.d_o_strides = params.dq_strides = gradient_strides(p.heads_q, p.seqlen_q);
    params.dk_strides = params.dv_strides = gradient_strides(p.heads_kv, p.seqlen_kv);
    check(fill_random(d_o.get(), int64_t(q_elements(p)), p.dtype, seed, 3, 1.f), "filling dO");
    poison();
}

void GradientSet::poison() {
    for (const DeviceBuffer* grad : {&dq, &dk, &dv}) check(hipMemset(grad->get(), 0xff, grad->bytes()), "poisoning a gradient");
}

void GradientSet::prepare_for(const BwdKernelEntry& kernel) {
    const size_t bytes = kernel.workspace(params);
    workspace = bytes ? std::make_unique<DeviceBuffer>(bytes) : nullptr;
    params.workspace = bytes ? workspace->get() : nullptr;
    params.workspace_bytes = bytes;
    if (bytes) check(hipMemset(params.workspace, 0xa5, bytes), "filling the workspace");  // as TensorSet's
}

void TensorSet::set_lengths(const DeviceLengths& lengths) {
    const bool packed = problem.layout == Layout::packed;
    params.seqlens_q = packed ? nullptr : lengths.q();
    params.seqlens_kv = packed && !problem.paged() ? nullptr : lengths.kv();
    params.cu_seqlens_q = packed ? lengths.cu_q() : nullptr;
    params.cu_seqlens_kv = packed && !problem.paged() ? lengths.cu_kv() : nullptr;
    if (!problem.paged() || host_block_table.empty()) return;
    const int width = params.max_pages_per_seq, page_size = problem.page_size;
    const TensorStrides& s = params.k_strides;  // K and V alike: [pages, page_size, heads_kv, head_dim]
    for (int b = 0; b < problem.batch; ++b) {
        const int length = lengths.host().kv.empty() ? problem.seqlen_kv : lengths.host().kv[b];
        const int used = (length + page_size - 1) / page_size;
        std::fill(host_block_table.begin() + int64_t(b) * width + used, host_block_table.begin() + int64_t(b + 1) * width,
                  spare_page);
        // The last page's rows past the sequence NaN too: a cache's unused rows hold anything.
        if (const int rows = length % page_size) {
            const int64_t page = host_block_table[int64_t(b) * width + length / page_size];
            const size_t offset = 2 * size_t(page * s.batch + rows * s.row), bytes = 2 * size_t((page_size - rows) * s.row);
            check(hipMemset(k.get<char>() + offset, 0xff, bytes), "poisoning a page's unused K rows");
            check(hipMemset(v.get<char>() + offset, 0xff, bytes), "poisoning a page's unused V rows");
        }
    }
    upload_block_table();
}

std::vector<uint16_t> TensorSet::logical_kv(const void* base, const TensorStrides& s) const {
    const Problem& p = problem;
    if (!p.paged()) return copy_logical(base, s, p.batch, p.heads_kv, p.seqlen_kv, p.head_dim);
    std::vector<uint16_t> pool(sizes.k), logical;
    check(hipMemcpy(pool.data(), base, pool.size() * 2, hipMemcpyDeviceToHost), "copying pages to host");
    logical.reserve(int64_t(p.batch) * p.heads_kv * p.seqlen_kv * p.head_dim);
    for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t h = 0; h < p.heads_kv; ++h)
            for (int64_t j = 0; j < p.seqlen_kv; ++j) {
                const int64_t page = host_block_table[b * params.max_pages_per_seq + j / p.page_size];
                const uint16_t* row = pool.data() + page * s.batch + h * s.head + (j % p.page_size) * s.row;
                logical.insert(logical.end(), row, row + p.head_dim);
            }
    return logical;
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
