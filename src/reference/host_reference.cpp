#include "reference/host_reference.h"

#include <algorithm>
#include <cmath>

namespace fmha {

std::vector<float> host_reference(const Problem& p, const SeqLens& lens, const std::vector<float>& q,
                                  const std::vector<float>& k, const std::vector<float>& v,
                                  std::vector<float>* lse) {
    const int64_t d = p.head_dim;
    const double scale = p.softmax_scale();
    const std::vector<float> slopes = p.alibi ? alibi_slopes(p.heads_q) : std::vector<float>(p.heads_q, 0.f);
    std::vector<float> out(q.size(), 0.f);
    if (lse) lse->assign(q.size() / std::max<int64_t>(d, 1), -INFINITY);
    std::vector<double> scores(p.seqlen_kv), acc(d);
    for (int64_t b = 0; b < p.batch; ++b) {
        const int64_t len_q = lens.q.empty() ? p.seqlen_q : lens.q[b];
        const int64_t len_kv = lens.kv.empty() ? p.seqlen_kv : lens.kv[b];
        for (int64_t h = 0; h < p.heads_q; ++h) {
            const int64_t hk = h / (p.heads_q / p.heads_kv);
            const float* k_head = &k[((b * p.heads_kv + hk) * p.seqlen_kv) * d];
            const float* v_head = &v[((b * p.heads_kv + hk) * p.seqlen_kv) * d];
            for (int64_t i = 0; i < len_q; ++i) {
                const float* q_row = &q[((b * p.heads_q + h) * p.seqlen_q + i) * d];
                // The window around the bottom-right diagonal (-1: unbounded), worked out here rather
                // than taken from the kernels' rule (kernels/common/mask.h), so that the check is independent.
                const int64_t diagonal = i + len_kv - len_q;
                const int64_t first = p.mask.left < 0 ? 0 : std::max<int64_t>(0, diagonal - p.mask.left);
                const int64_t last = p.mask.right < 0 ? len_kv - 1 : std::min<int64_t>(len_kv - 1, diagonal + p.mask.right);
                if (last < first) continue;
                double row_max = -INFINITY;
                for (int64_t j = first; j <= last; ++j) {
                    double dot = 0;
                    for (int64_t c = 0; c < d; ++c) dot += double(q_row[c]) * k_head[j * d + c];
                    double score = dot * scale;
                    if (p.softcap != 0.f) score = p.softcap * std::tanh(score / p.softcap);
                    score -= slopes[h] * std::abs(double(i + len_kv - len_q - j));  // ALiBi's distance from the diagonal
                    scores[j] = score;
                    row_max = std::max(row_max, scores[j]);
                }
                double sum = 0;
                std::fill(acc.begin(), acc.end(), 0.0);
                for (int64_t j = first; j <= last; ++j) {
                    const double weight = std::exp(scores[j] - row_max);
                    sum += weight;
                    for (int64_t c = 0; c < d; ++c) acc[c] += weight * v_head[j * d + c];
                }
                const int64_t row = (b * p.heads_q + h) * p.seqlen_q + i;
                for (int64_t c = 0; c < d; ++c) out[row * d + c] = static_cast<float>(acc[c] / sum);
                if (lse) (*lse)[row] = static_cast<float>(row_max + std::log(sum));
            }
        }
    }
    return out;
}

}  // namespace fmha
