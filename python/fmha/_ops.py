"""fmha::attention, the PyTorch custom operator every public function goes through when
autograd or torch.compile is involved: its fake implementation gives torch.compile the output
shapes, and its backward is the operator fmha::attention_backward: a backward kernel from the
saved output and LSE where one serves the call (fmha._backward), else attention recomputed in
PyTorch (fmha._math.attention_backward).

Forward-only eager calls skip the dispatcher and call the backends directly: the same work,
without the operator's per-call cost (a decode step is a few microseconds of kernel); eager
calls with autograd run the same implementations under an autograd.Function (fmha._eager).

Dropout on CUDA tensors outside torch.compile runs the kernels' (fmha._dropout): the call draws
its seed and offset, the forward applies the mask and the backward regenerates it; a fallback
in PyTorch applies the same mask. Elsewhere PyTorch's dropout serves, with its own autograd.
"""
from typing import Optional, Tuple

import torch

from . import _backward as _backward_kernels, _dropout, _eager, _math, backends


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seqlens_q: Optional[torch.Tensor],
               seqlens_kv: Optional[torch.Tensor], softmax_scale: float, window_left: int, window_right: int,
               dropout_p: float, return_lse: bool, strict: Optional[bool], softcap: float,
               alibi_slopes: Optional[torch.Tensor], dropout_seed_offset: Optional[torch.Tensor] = None,
               deterministic: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    out, lse = backends.run(q, k, v, seqlens_q, seqlens_kv, softmax_scale, window_left, window_right, dropout_p,
                            return_lse, strict, softcap, alibi_slopes, dropout_seed_offset)
    return out, lse if lse is not None else q.new_empty((0,), dtype=torch.float32)


attention_op = torch.library.custom_op("fmha::attention", mutates_args=())(_attention)


@attention_op.register_fake
def _attention_fake(q, k, v, seqlens_q, seqlens_kv, softmax_scale, window_left, window_right, dropout_p, return_lse,
                    strict, softcap, alibi_slopes, dropout_seed_offset=None, deterministic=False):
    batch, seqlen_q, heads, head_dim = q.shape
    lse_shape = (batch, heads, seqlen_q) if return_lse else (0,)
    return q.new_empty((batch, seqlen_q, heads, head_dim)), q.new_empty(lse_shape, dtype=torch.float32)


def _attention_backward(grad_out: torch.Tensor, grad_lse: Optional[torch.Tensor], q: torch.Tensor, k: torch.Tensor,
                        v: torch.Tensor, out: torch.Tensor, lse: torch.Tensor, seqlens_q: Optional[torch.Tensor],
                        seqlens_kv: Optional[torch.Tensor], softmax_scale: float, window_left: int,
                        window_right: int, dropout_p: float = 0.0, dropout_seed_offset: Optional[torch.Tensor] = None,
                        deterministic: bool = False, softcap: float = 0.0, alibi_slopes: Optional[torch.Tensor] = None
                        ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    grads = _backward_kernels.run(grad_out, grad_lse, q, k, v, out, lse, seqlens_q, seqlens_kv, softmax_scale, window_left,
                                  window_right, dropout_p, dropout_seed_offset, deterministic=deterministic,
                                  softcap=softcap, alibi_slopes=alibi_slopes)
    if grads is None:
        grads = _math.attention_backward(grad_out, grad_lse, q, k, v, seqlens_q, seqlens_kv, softmax_scale,
                                         window_left, window_right, softcap, alibi_slopes, dropout_p,
                                         _keep_mask(dropout_p, dropout_seed_offset, q, k))
    return tuple(g.contiguous() for g in grads)  # the layout the fake implementation states


attention_backward_op = torch.library.custom_op("fmha::attention_backward", mutates_args=())(_attention_backward)


@attention_backward_op.register_fake
def _attention_backward_fake(grad_out, grad_lse, q, k, v, out, lse, seqlens_q, seqlens_kv, softmax_scale, window_left,
                             window_right, dropout_p=0.0, dropout_seed_offset=None, deterministic=False, softcap=0.0,
                             alibi_slopes=None):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _keep_mask(dropout_p, seed_offset, q, k):
    """The kernels' dropout mask for a PyTorch recompute, or None without dropout."""
    if dropout_p == 0 or seed_offset is None:
        return None
    return _dropout.mask(dropout_p, seed_offset, q.shape[0], q.shape[2], q.shape[1], k.shape[1])


def _setup_context(ctx, inputs, output):
    (q, k, v, seqlens_q, seqlens_kv, softmax_scale, window_left, window_right, dropout_p, _, _, softcap, alibi,
     seed_offset, deterministic) = inputs
    if dropout_p > 0 and seed_offset is None:  # fmha.attention routes such calls to PyTorch's own autograd instead
        raise RuntimeError("fmha::attention has no backward for dropout_p > 0 without a dropout seed and offset")
    out, lse = output
    ctx.save_for_backward(q, k, v, seqlens_q, seqlens_kv, out, lse, alibi, seed_offset)
    ctx.options = (softmax_scale, window_left, window_right, dropout_p, softcap, deterministic)


def _gradients(ctx, grad_out, grad_lse, backward_kernels):
    """The inputs' gradients; backward_kernels: the operator attention_backward_op, or its
    implementation where no operator is needed (eager calls)."""
    q, k, v, seqlens_q, seqlens_kv, out, lse, alibi_slopes, seed_offset = ctx.saved_tensors
    if grad_out is None:  # (only the LSE was used)
        grad_out = torch.zeros_like(out)
    scale, left, right, dropout_p, softcap, deterministic = ctx.options
    if grad_lse is not None and grad_lse.numel() == 0:
        grad_lse = None
    grads = backward_kernels(grad_out, grad_lse, q, k, v, out, lse, seqlens_q, seqlens_kv, scale, left, right, dropout_p,
                             seed_offset, deterministic, softcap, alibi_slopes)
    return tuple(grads) + (None,) * 12


attention_op.register_autograd(lambda ctx, *grads: _gradients(ctx, *grads, attention_backward_op),
                               setup_context=_setup_context)
_eager_attention = _eager.autograd_function(_attention, _setup_context,
                                            lambda ctx, *grads: _gradients(ctx, *grads, _attention_backward))


def attention(q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, return_lse, strict, softcap=0.0,
              alibi_slopes=None, deterministic=False):
    """(out [b, s_q, h, d], LSE [b, h, s_q] or None) of checked arguments (fmha._checks), by the
    cheapest path that is correct for the context: eager forward-only calls run the backend
    directly; autograd and torch.compile go through the operator. deterministic: the backward's."""
    options = (softcap, alibi_slopes)
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    seed_offset = None
    if dropout_p > 0:
        if not _dropout.usable(q):
            # PyTorch's dropout: SDPA serves the call and its autograd the backward.
            if not torch.compiler.is_compiling():
                return backends.run(q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, return_lse, strict,
                                    *options)
            return _math.attention(q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, return_lse, *options)
        seed_offset = _dropout.seed_offset(q.device)
    if needs_grad or torch.compiler.is_compiling():
        # A call that may be differentiated saves its LSE: the backward kernels start from it.
        op = attention_op if torch.compiler.is_compiling() else _eager_attention
        out, lse = op(q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, return_lse or needs_grad, strict,
                      *options, seed_offset, deterministic)
        return out, lse if return_lse else None
    return backends.run(q, k, v, seqlens_q, seqlens_kv, scale, left, right, dropout_p, return_lse, strict, *options,
                        seed_offset)
