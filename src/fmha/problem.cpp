#include "fmha/problem.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "kernels/common/mask.h"

namespace fmha {

const char* layout_token(Layout layout) {
    switch (layout) {
        case Layout::bhsd: return "bhsd";
        case Layout::bshd: return "bshd";
        case Layout::qkv_packed: return "qkv-packed";
        case Layout::packed: return "packed";
    }
    return "?";
}

bool parse_layout(const std::string& text, Layout* layout) {
    for (Layout l : {Layout::bhsd, Layout::bshd, Layout::qkv_packed, Layout::packed}) {
        if (text == layout_token(l)) {
            *layout = l;
            return true;
        }
    }
    return false;
}

HeadsKind Problem::heads_kind() const {
    if (heads_kv == heads_q) return HeadsKind::mha;
    return heads_kv == 1 ? HeadsKind::mqa : HeadsKind::gqa;
}

float Problem::softmax_scale() const {
    return scale != 0.f ? scale : 1.f / std::sqrt(static_cast<float>(head_dim));
}

std::vector<std::string> Problem::validate() const {
    std::vector<std::string> errors;
    auto positive = [&](const char* what, int value) {
        if (value <= 0) errors.push_back(std::string(what) + " must be positive (got " + std::to_string(value) + ")");
    };
    positive("batch (-b)", batch);
    positive("heads (-h)", heads_q);
    // KV heads and seqlen_q default to heads and seqlen_kv: an equal bad value was most likely not given.
    if (heads_kv != heads_q) positive("KV heads (-gqa)", heads_kv);
    positive("seqlen_kv (-s)", seqlen_kv);
    if (seqlen_q != seqlen_kv) positive("seqlen_q (-s-q)", seqlen_q);
    positive("head_dim (-d)", head_dim);
    if (!errors.empty()) return errors;

    if (heads_q % heads_kv != 0)
        errors.push_back("heads (" + std::to_string(heads_q) + ") must be a multiple of KV heads (" +
                         std::to_string(heads_kv) + ")");
    if (mask.left < -1 || mask.right < -1)
        errors.push_back("window sides must be >= 0, or -1 for unbounded (got left " + std::to_string(mask.left) +
                         ", right " + std::to_string(mask.right) + ")");
    if (!std::isfinite(scale)) errors.push_back("softmax scale (-scale-bmm1) must be finite");
    if (!(dropout >= 0.f && dropout < 1.f)) errors.push_back("dropout must be in [0, 1)");
    if (!std::isfinite(softcap) || softcap < 0.f)
        errors.push_back("softcap (-softcapping-scale-bmm1) must be a finite number >= 0 (0: off)");
    if (paged() && (page_size < 16 || page_size > 256 || (page_size & (page_size - 1)) != 0))
        errors.push_back("page size (-page-size) must be a power of two from 16 to 256 (got " + std::to_string(page_size) + ")");
    if (paged() && layout == Layout::qkv_packed)
        errors.push_back("a paged KV cache keeps K and V in pages: it cannot take the packed QKV layout");
    if (layout == Layout::qkv_packed && (seqlen_q != seqlen_kv || heads_q != heads_kv))
        errors.push_back("the packed QKV layout needs seqlen_q == seqlen_kv and heads == KV heads");
    if (layout == Layout::packed && static_cast<double>(batch) * std::max(seqlen_q, seqlen_kv) > INT32_MAX)
        errors.push_back("the packed layout's tokens (batch x seqlen) must fit int32 cu_seqlens");
    if (layout == Layout::packed && (total_q < 0 || total_q > int64_t(batch) * seqlen_q))
        errors.push_back("a packed batch's total_q (" + std::to_string(total_q) + ") must be in [0, batch x seqlen_q] (0: unknown)");

    // Every element offset must fit in 63 bits (kernels index with int64).
    const double largest = static_cast<double>(batch) * std::max(seqlen_q, seqlen_kv) *
                           std::max(heads_q, heads_kv) * head_dim * 3.0;
    if (largest >= 9.0e18) errors.push_back("tensor sizes overflow 64-bit element offsets");
    return errors;
}

std::string Problem::describe() const {
    std::ostringstream s;
    s << "b=" << batch << " h=" << heads_q << " h_kv=" << heads_kv << " (" << token(heads_kind())
      << ") s_q=" << seqlen_q << " s_kv=" << seqlen_kv << " d=" << head_dim << " " << token(dtype) << " "
      << mask.describe();
    s << " scale=" << softmax_scale() << " layout=" << layout_token(layout);
    if (softcap != 0.f) s << " softcap=" << softcap;
    if (alibi) s << " alibi";
    if (dropout != 0.f) s << " dropout=" << dropout;
    if (deterministic) s << " deterministic";
    if (paged()) s << " paged-kv (pages of " << page_size << " keys)";
    return s.str();
}

std::vector<float> alibi_slopes(int heads) {
    int n = 1;  // the largest power of two <= heads
    while (2 * n <= heads) n *= 2;
    std::vector<float> slopes;
    for (int h = 1; h <= n; ++h) slopes.push_back(static_cast<float>(std::exp2(-8.0 * h / n)));
    for (int h = 1; static_cast<int>(slopes.size()) < heads; h += 2)
        slopes.push_back(static_cast<float>(std::exp2(-8.0 * h / (2 * n))));
    return slopes;
}

PagedKvShape paged_kv_shape(const Problem& p) {
    if (!p.paged()) return {0, 0};
    const int per_sequence = (p.seqlen_kv + p.page_size - 1) / p.page_size;
    return {per_sequence, int64_t(p.batch) * per_sequence + 1};
}

BufferSizes buffer_sizes(const Problem& p) {
    const bool packed = p.layout == Layout::packed;
    const int64_t q = (packed ? p.total_q : int64_t(p.batch) * p.seqlen_q) * p.heads_q * p.head_dim;
    const int64_t kv = p.paged()  ? paged_kv_shape(p).pages * p.page_size * p.heads_kv * p.head_dim
                       : packed ? p.total_kv * p.heads_kv * p.head_dim
                                : int64_t(p.batch) * p.heads_kv * p.seqlen_kv * p.head_dim;
    if (p.layout == Layout::qkv_packed) return {3 * q, 0, 0, q};
    return {q, kv, kv, q};
}

LayoutStrides layout_strides(const Problem& p) {
    const int64_t d = p.head_dim;
    LayoutStrides s;
    switch (p.layout) {
        case Layout::bhsd:
            s.q = {p.heads_q * p.seqlen_q * d, p.seqlen_q * d, d};
            s.k = s.v = {p.heads_kv * p.seqlen_kv * d, p.seqlen_kv * d, d};
            s.o = s.q;
            break;
        case Layout::bshd:
            s.q = {p.seqlen_q * p.heads_q * d, d, p.heads_q * d};
            s.k = s.v = {p.seqlen_kv * p.heads_kv * d, d, p.heads_kv * d};
            s.o = s.q;
            break;
        case Layout::qkv_packed:
            s.q = s.k = s.v = {p.seqlen_q * 3 * p.heads_q * d, d, 3 * p.heads_q * d};
            s.k_offset = p.heads_q * d;
            s.v_offset = 2 * p.heads_q * d;
            s.o = {p.seqlen_q * p.heads_q * d, d, p.heads_q * d};
            break;
        case Layout::packed:  // sequences start cu_seqlens rows in: the batch stride is the row stride
            s.q = s.o = {p.heads_q * d, d, p.heads_q * d};
            s.k = s.v = {p.heads_kv * d, d, p.heads_kv * d};
            break;
    }
    if (p.paged()) s.k = s.v = {p.page_size * p.heads_kv * d, d, p.heads_kv * d};  // [pages, page_size, h_kv, d]
    return s;
}

namespace {

// What FwdParams and BwdParams both take of a problem.
template <class Params>
Params sized_params(const Problem& p) {
    Params params{};
    params.batch = p.batch;
    params.heads_q = p.heads_q;
    params.heads_kv = p.heads_kv;
    params.seqlen_q = p.seqlen_q;
    params.seqlen_kv = p.seqlen_kv;
    params.head_dim = p.head_dim;
    params.scale = p.softmax_scale();
    params.window = p.mask.keys(p.seqlen_q, p.seqlen_kv);
    params.softcap = p.softcap;
    return params;
}

}  // namespace

BwdParams backward_shape_params(const Problem& p) {
    BwdParams params = sized_params<BwdParams>(p);
    params.dropout.p = p.dropout;
    params.deterministic = p.deterministic;
    if (p.layout == Layout::packed) {  // the token counts where known, else their bound (the workspace's size)
        params.total_q = int(p.total_q > 0 ? p.total_q : int64_t(p.batch) * p.seqlen_q);
        params.total_kv = int(p.total_kv > 0 ? p.total_kv : int64_t(p.batch) * p.seqlen_kv);
    }
    return params;
}

FwdParams shape_params(const Problem& p) {
    const LayoutStrides s = layout_strides(p);
    FwdParams params = sized_params<FwdParams>(p);
    params.q_strides = s.q;
    params.k_strides = s.k;
    params.v_strides = s.v;
    params.o_strides = s.o;
    params.dropout.p = p.dropout;
    params.page_size = p.page_size;
    params.total_q = int(p.total_q);
    params.total_kv = int(p.total_kv);
    params.max_pages_per_seq = paged_kv_shape(p).max_pages_per_seq;
    params.pointer_options = p.alibi || p.layout == Layout::packed;
    return params;
}

namespace {

template <bool kMasked>
KeyRange keys_seen(int first_row, int last_row, int len_q, int len_kv, KeyWindow window) {
    int lo, hi;
    KeyMask<kMasked>::of(len_q, len_kv, window).key_range(first_row, last_row, lo, hi);
    return {lo, hi - 1};
}

}  // namespace

KeyRange visible_keys(const Problem& p, int first_row, int last_row, int len_q, int len_kv) {
    const KeyWindow window = p.mask.keys(p.seqlen_q, p.seqlen_kv);
    return p.mask.bounded() ? keys_seen<true>(first_row, last_row, len_q, len_kv, window)
                            : keys_seen<false>(first_row, last_row, len_q, len_kv, window);
}

namespace {

// Calls visit(len_q, len_kv, sequences) once per distinct sequence shape.
template <class Visit>
void for_each_sequence(const Problem& p, const SeqLens& lens, Visit visit) {
    if (lens.kv.empty()) {
        visit(p.seqlen_q, p.seqlen_kv, p.batch);
        return;
    }
    for (size_t b = 0; b < lens.kv.size(); ++b) visit(lens.q[b], lens.kv[b], 1);
}

}  // namespace

double flop_count(const Problem& p, const SeqLens& lens) {
    double pairs = 0;  // (query row, visible key) pairs over all sequences, per head
    for_each_sequence(p, lens, [&](int len_q, int len_kv, int64_t sequences) {
        double per_sequence = 0;
        for (int i = 0; i < len_q; ++i) {
            const KeyRange r = visible_keys(p, i, i, len_q, len_kv);
            per_sequence += static_cast<double>(std::max<int64_t>(0, r.last - r.first + 1));
        }
        pairs += per_sequence * sequences;
    });
    return pairs * p.heads_q * 4.0 * p.head_dim;
}

double byte_count(const Problem& p, const SeqLens& lens) {
    double q_rows = 0, kv_rows = 0;
    for_each_sequence(p, lens, [&](int len_q, int len_kv, int64_t sequences) {
        const KeyRange keys = visible_keys(p, 0, len_q - 1, len_q, len_kv);
        q_rows += static_cast<double>(len_q) * sequences;
        kv_rows += static_cast<double>(std::max<int64_t>(0, keys.last - keys.first + 1)) * sequences;
    });
    const double row_bytes = static_cast<double>(p.head_dim) * bytes_of(p.dtype);
    return row_bytes * (2.0 * q_rows * p.heads_q + 2.0 * kv_rows * p.heads_kv);
}

}  // namespace fmha
