"""Attention in PyTorch operations: the fallback forward (SDPA) and the backward of every call.

Tensors are FlashAttention's [batch, seqlen, heads, head_dim]; seqlens_q / seqlens_kv (int32
[batch] or None) give per-sequence lengths inside padded buffers; (left, right) is the window
of fmha._checks.window (causal: right = 0), bottom-right aligned per sequence.
"""
import torch
import torch.nn.functional as F


def _positions(q, k, seqlens_q, seqlens_kv):
    """(row indices [1, seqlen_q, 1], key indices [1, 1, seqlen_kv], len_q, len_kv), the lengths
    [batch, 1, 1] or ints: query i of a sequence is aligned with key i + len_kv - len_q."""
    seqlen_q, seqlen_kv = q.shape[1], k.shape[1]
    rows = torch.arange(seqlen_q, device=q.device).view(1, -1, 1)
    keys = torch.arange(seqlen_kv, device=q.device).view(1, 1, -1)
    len_q = seqlens_q.view(-1, 1, 1).long() if seqlens_q is not None else seqlen_q
    len_kv = seqlens_kv.view(-1, 1, 1).long() if seqlens_kv is not None else seqlen_kv
    return rows, keys, len_q, len_kv


def visible_keys(q, k, seqlens_q, seqlens_kv, left, right):
    """Bool [batch or 1, 1, seqlen_q, seqlen_kv]: which keys each query row sees; None when all."""
    if left < 0 and right < 0 and seqlens_q is None and seqlens_kv is None:
        return None
    rows, keys, len_q, len_kv = _positions(q, k, seqlens_q, seqlens_kv)
    diagonal = rows + len_kv - len_q
    visible = (keys < len_kv) & (rows < len_q)
    if right >= 0:
        visible = visible & (keys <= diagonal + right)
    if left >= 0:
        visible = visible & (keys >= diagonal - left)
    return visible.unsqueeze(1)


def alibi_bias(q, k, seqlens_q, seqlens_kv, alibi_slopes):
    """FlashAttention's ALiBi: -slope[b, h] * |i + len_kv - len_q - j|, fp32 [batch or 1, heads, s_q, s_kv];
    alibi_slopes fp32 [heads] or [batch, heads]."""
    rows, keys, len_q, len_kv = _positions(q, k, seqlens_q, seqlens_kv)
    distance = (rows + len_kv - len_q - keys).abs().float().unsqueeze(1)
    slopes = alibi_slopes.float().view(-1, q.shape[2], 1, 1)
    return -slopes * distance


def _heads_first(q, k, v):
    """[b, h, s, d] views, with K and V repeated to q's heads (GQA/MQA)."""
    group = q.shape[2] // k.shape[2]
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if group > 1:
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return q, k, v


def _scores(q, k, scale, softcap, bias):
    """fp32 scores [b, h, s_q, s_kv] by FlashAttention's rule (scale, then softcap * tanh(s / softcap),
    then the ALiBi bias), and d(scores)/d(scale * q.k) where softcapped (else None)."""
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    slope = None
    if softcap:
        capped = torch.tanh(scores / softcap)
        scores, slope = capped * softcap, 1 - capped * capped
    if bias is not None:
        scores = scores + bias
    return scores, slope


def _probabilities(scores, visible):
    """fp32 softmax probabilities [b, h, s_q, s_kv] and natural-log LSE [b, h, s_q]; a row that
    sees no key has probabilities 0 and LSE -inf."""
    if visible is not None:
        scores = scores.masked_fill(~visible, float("-inf"))
    lse = torch.logsumexp(scores, dim=-1)
    finite = torch.isfinite(lse).unsqueeze(-1)
    probabilities = torch.where(finite, torch.exp(scores - lse.unsqueeze(-1)), torch.zeros_like(scores))
    return probabilities, lse


class _NoKeys(torch.autograd.Function):
    """Zeros like q, with zero gradients for q, k and v."""
    @staticmethod
    def forward(ctx, q, k, v):
        ctx.save_for_backward(q, k, v)
        return torch.zeros_like(q)

    @staticmethod
    def backward(ctx, grad_out):
        return tuple(torch.zeros_like(t) for t in ctx.saved_tensors)


def no_keys(q, k, v, lse_shape, return_lse):
    """What a public function returns for a call without a query or without a key (FlashAttention
    takes these): out, and with return_lse (out, LSE). Every row sees no key, so out is 0 and the
    LSE -inf; the gradients are 0."""
    out = _NoKeys.apply(q, k, v)
    return (out, torch.full(lse_shape, float("-inf"), dtype=torch.float32, device=q.device)) if return_lse else out


def attention(q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, return_lse, softcap=0.0,
              alibi_slopes=None, keep=None):
    """(out [b, s_q, h, d] contiguous, LSE [b, h, s_q] or None), differentiable. Without LSE,
    softcap, ALiBi or a keep mask, PyTorch's scaled_dot_product_attention; with any, the same math
    in fp32 (SDPA returns no LSE and has no softcap). keep: the kernels' dropout mask, bool
    [b, h, s_q, s_kv] (fmha._dropout.mask), applied instead of PyTorch's dropout."""
    # PyTorch's fused SDPA kernels gave wrong results for a query 8 bytes off 16-byte alignment
    # (H100, PyTorch 2.11): such inputs go to it as aligned copies.
    q, k, v = (t if t.data_ptr() % 16 == 0 else t.clone() for t in (q, k, v))
    visible = visible_keys(q, k, seqlens_q, seqlens_kv, left, right)
    if return_lse or softcap or alibi_slopes is not None or keep is not None:
        qh, kh, vh = _heads_first(q, k, v)
        bias = alibi_bias(q, k, seqlens_q, seqlens_kv, alibi_slopes) if alibi_slopes is not None else None
        probabilities, lse = _probabilities(_scores(qh, kh, scale, softcap, bias)[0], visible)
        if keep is not None:
            probabilities = probabilities * keep / (1 - dropout_p)
        elif dropout_p > 0:
            probabilities = F.dropout(probabilities, dropout_p)
        out = torch.matmul(probabilities, vh.float()).to(q.dtype)
        return out.transpose(1, 2).contiguous(), lse if return_lse else None
    qh, kh, vh = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=visible, dropout_p=dropout_p, scale=scale,
                                         enable_gqa=q.shape[2] != k.shape[2])
    if visible is not None:  # SDPA gives NaN where a row sees no key; FlashAttention gives 0
        out = out.masked_fill(~visible.any(dim=-1, keepdim=True), 0)
    return out.transpose(1, 2).contiguous(), None


def attention_backward(grad_out, grad_lse, q, k, v, seqlens_q, seqlens_kv, scale, left, right, softcap=0.0,
                       alibi_slopes=None, dropout_p=0.0, keep=None):
    """(dq, dk, dv) of out (and LSE, when grad_lse is given) by recomputing the probabilities in
    fp32: dV = P^T dO; dS = P (dO V^T - rowsum(P * dO V^T) + dLSE), times 1 - tanh^2 where
    softcapped (the ALiBi bias is a constant); dQ = scale dS K; dK = scale dS^T Q; K and V
    gradients summed over each KV head's group. With a dropout mask keep (bool [b, h, s_q,
    s_kv]), Z = keep / (1 - dropout_p): dV = (P Z)^T dO and dO V^T becomes Z dO V^T."""
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_kv, heads_kv = k.shape[1], k.shape[2]
    visible = visible_keys(q, k, seqlens_q, seqlens_kv, left, right)
    qh, kh, vh = _heads_first(q, k, v)
    bias = alibi_bias(q, k, seqlens_q, seqlens_kv, alibi_slopes) if alibi_slopes is not None else None
    scores, capped_slope = _scores(qh, kh, scale, softcap, bias)
    probabilities, _ = _probabilities(scores, visible)
    grad_out = grad_out.transpose(1, 2).float()
    dropped = keep / (1 - dropout_p) if keep is not None else None
    grad_v = torch.matmul((probabilities if dropped is None else probabilities * dropped).transpose(-1, -2), grad_out)
    grad_p = torch.matmul(grad_out, vh.float().transpose(-1, -2))
    if dropped is not None:
        grad_p = grad_p * dropped
    grad_s = grad_p - (probabilities * grad_p).sum(dim=-1, keepdim=True)
    if grad_lse is not None and grad_lse.numel() > 0:
        grad_s = grad_s + grad_lse.float().unsqueeze(-1)
    grad_s = probabilities * grad_s
    if capped_slope is not None:
        grad_s = grad_s * capped_slope
    grad_q = torch.matmul(grad_s, kh.float()) * scale
    grad_k = torch.matmul(grad_s.transpose(-1, -2), qh.float()) * scale
    group = heads // heads_kv
    if group > 1:
        grad_k = grad_k.view(batch, heads_kv, group, seqlen_kv, head_dim).sum(dim=2)
        grad_v = grad_v.view(batch, heads_kv, group, seqlen_kv, head_dim).sum(dim=2)
    return (grad_q.transpose(1, 2).to(q.dtype), grad_k.transpose(1, 2).to(k.dtype),
            grad_v.transpose(1, 2).to(v.dtype))
