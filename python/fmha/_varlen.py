"""Packed variable-length batches (flash_attn_varlen_func) under autograd and torch.compile:
the operator fmha::attention_varlen reads the packed tokens in place in both directions, the
forward by a prefill kernel and the backward by a backward kernel, with the LSE [heads,
total_q] saved between them. Where no kernel serves a direction, that direction gathers the
tokens into a padded batch (padded()), runs there and scatters its results back (unpadded()).
Dropout is the kernels' (fmha._dropout): its mask depends on (sequence, head, position), so the
padded fallbacks apply the same one.
"""
from typing import Optional, Tuple

import torch

from . import _backward, _catalogue, _dropout, _eager, _math, backends


def padded(x, cu_seqlens, max_seqlen):
    """Packed tokens x [total, ...] as a padded batch [batch, max_seqlen, ...]; rows past a
    sequence's end repeat a valid token and are never read (the lengths say so)."""
    offsets = torch.arange(max_seqlen, device=x.device)
    tokens = (cu_seqlens[:-1].long().unsqueeze(1) + offsets).clamp_(0, x.shape[0] - 1)
    return x[tokens]


def unpadded(x, cu_seqlens, total):
    """The tokens of a padded batch x [batch, max_seqlen, ...] in packed order, [total, ...]."""
    tokens = torch.arange(total, device=x.device)
    sequence = torch.searchsorted(cu_seqlens[1:].long(), tokens, right=True).clamp_(max=cu_seqlens.shape[0] - 2)
    position = (tokens - cu_seqlens.long()[sequence]).clamp_(0, x.shape[1] - 1)
    return x[sequence, position]


def _lengths(cu_seqlens):
    return (cu_seqlens[1:] - cu_seqlens[:-1]).int()


def _attention_varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                      cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, softmax_scale: float,
                      window_left: int, window_right: int, dropout_p: float, strict: Optional[bool],
                      dropout_seed_offset: Optional[torch.Tensor] = None, deterministic: bool = False,
                      softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
    batch = cu_seqlens_q.shape[0] - 1
    launch, why_not = _catalogue.prepare(q, k, v, None, softmax_scale, window_left, window_right, dropout_p,
                                         packed=(batch, max_seqlen_q, max_seqlen_k), softcap=softcap,
                                         alibi_slopes=alibi_slopes)
    if launch is not None:
        return _catalogue.forward_packed(launch, q, k, v, cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(), None,
                                         True, alibi_slopes=alibi_slopes, dropout_seed_offset=dropout_seed_offset)
    backends.fall_back(why_not, strict, "gathering the packed tokens into a padded batch")
    out, lse = backends.run(padded(q, cu_seqlens_q, max_seqlen_q), padded(k, cu_seqlens_k, max_seqlen_k),
                            padded(v, cu_seqlens_k, max_seqlen_k), _lengths(cu_seqlens_q), _lengths(cu_seqlens_k),
                            softmax_scale, window_left, window_right, dropout_p, True, strict, softcap, alibi_slopes,
                            dropout_seed_offset=dropout_seed_offset)
    total = q.shape[0]
    return unpadded(out, cu_seqlens_q, total), unpadded(lse.transpose(1, 2), cu_seqlens_q, total).t().contiguous()


attention_varlen_op = torch.library.custom_op("fmha::attention_varlen", mutates_args=())(_attention_varlen)


@attention_varlen_op.register_fake
def _attention_varlen_fake(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale, window_left,
                           window_right, dropout_p, strict, dropout_seed_offset=None, deterministic=False, softcap=0.0,
                           alibi_slopes=None):
    return q.new_empty(q.shape), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


def _attention_varlen_backward(grad_out: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor,
                               k: torch.Tensor, v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
                               cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor, max_seqlen_q: int,
                               max_seqlen_k: int, softmax_scale: float, window_left: int, window_right: int,
                               dropout_p: float = 0.0, dropout_seed_offset: Optional[torch.Tensor] = None,
                               deterministic: bool = False, softcap: float = 0.0,
                               alibi_slopes: Optional[torch.Tensor] = None
                               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    packed = (cu_seqlens_q.contiguous(), cu_seqlens_k.contiguous(), max_seqlen_q, max_seqlen_k)
    grads = _backward.run(grad_out, grad_lse, q, k, v, out, lse, None, None, softmax_scale, window_left, window_right,
                          dropout_p, dropout_seed_offset, packed=packed, deterministic=deterministic, softcap=softcap,
                          alibi_slopes=alibi_slopes)
    if grads is None:  # PyTorch's recompute on the padded batch
        keep = None
        if dropout_p > 0 and dropout_seed_offset is not None:
            keep = _dropout.mask(dropout_p, dropout_seed_offset, cu_seqlens_q.shape[0] - 1, q.shape[1], max_seqlen_q,
                                 max_seqlen_k)
        grad_lse_padded = None if grad_lse is None else padded(grad_lse.t(), cu_seqlens_q, max_seqlen_q).transpose(1, 2)
        grads = _math.attention_backward(
            padded(grad_out, cu_seqlens_q, max_seqlen_q), grad_lse_padded, padded(q, cu_seqlens_q, max_seqlen_q),
            padded(k, cu_seqlens_k, max_seqlen_k), padded(v, cu_seqlens_k, max_seqlen_k), _lengths(cu_seqlens_q),
            _lengths(cu_seqlens_k), softmax_scale, window_left, window_right, softcap, alibi_slopes, dropout_p, keep)
        grads = [unpadded(g, cu, t.shape[0]) for g, cu, t in zip(grads, (cu_seqlens_q, cu_seqlens_k, cu_seqlens_k),
                                                                  (q, k, v))]
    return tuple(g.contiguous() for g in grads)


attention_varlen_backward_op = torch.library.custom_op("fmha::attention_varlen_backward",
                                                       mutates_args=())(_attention_varlen_backward)


@attention_varlen_backward_op.register_fake
def _attention_varlen_backward_fake(grad_out, grad_lse, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                    max_seqlen_k, softmax_scale, window_left, window_right, dropout_p=0.0,
                                    dropout_seed_offset=None, deterministic=False, softcap=0.0, alibi_slopes=None):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, left, right, dropout_p, _, seed_offset,
     deterministic, softcap, alibi_slopes) = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, seed_offset, alibi_slopes)
    ctx.options = (max_seqlen_q, max_seqlen_k, scale, left, right, dropout_p, deterministic, softcap)


def _gradients(ctx, grad_out, grad_lse, backward_kernels):
    """The inputs' gradients; backward_kernels: the operator or, for eager calls, its implementation."""
    q, k, v, cu_seqlens_q, cu_seqlens_k, out, lse, seed_offset, alibi_slopes = ctx.saved_tensors
    max_seqlen_q, max_seqlen_k, scale, left, right, dropout_p, deterministic, softcap = ctx.options
    if grad_out is None:  # (only the LSE was used)
        grad_out = torch.zeros_like(out)
    grads = backward_kernels(grad_out, grad_lse, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                             max_seqlen_k, scale, left, right, dropout_p, seed_offset, deterministic, softcap,
                             alibi_slopes)
    return tuple(grads) + (None,) * 13


attention_varlen_op.register_autograd(lambda ctx, *grads: _gradients(ctx, *grads, attention_varlen_backward_op),
                                      setup_context=_setup_context)
_eager_attention_varlen = _eager.autograd_function(
    _attention_varlen, _setup_context, lambda ctx, *grads: _gradients(ctx, *grads, _attention_varlen_backward))


def serves(paged, dropout_p, q):
    """Whether a flash_attn_varlen_func call takes the operator: not a paged cache (no backward
    takes one), and dropout only where it is the kernels'."""
    return not paged and (dropout_p == 0 or _dropout.usable(q))


def attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, left, right, dropout_p, strict,
              deterministic=False, softcap=0.0, alibi_slopes=None):
    """(out [total_q, h, d], LSE [h, total_q]) of checked arguments through the operator;
    deterministic: the backward's; softcap, alibi_slopes: FlashAttention's."""
    seed_offset = _dropout.seed_offset(q.device) if dropout_p > 0 else None
    op = attention_varlen_op if torch.compiler.is_compiling() else _eager_attention_varlen
    return op(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, left, right, dropout_p, strict,
              seed_offset, deterministic, softcap, alibi_slopes)
