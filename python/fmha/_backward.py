"""The backward kernels (fmha_plan_backward / fmha_backward of the C ABI) on PyTorch's tensors:
dq, dk, dv of a forward call from q, k, v, its output and LSE, without the N x N probability
matrix. run() returns None where no kernel serves the call (a FallbackWarning once per reason, or
UnsupportedError under FMHA_STRICT=1); fmha._ops then recomputes in PyTorch.
"""
import ctypes

import torch

from . import _catalogue, _library, backends

_NO_DETERMINISTIC_LOOP = ("this build's backward kernels have no deterministic loop (`python3 setup.py --refresh "
                          "--deterministic-backward && make` builds it)")

_DTYPES = {torch.float16: _library.FP16, torch.bfloat16: _library.BF16}
_plans = {}  # problem key -> ((library, Plan, Problem, kernel name) or None, why no kernel serves it)
_MAX_PLANS = 4096


def _plan(device, dtype, batch, heads, heads_kv, seqlen_q, seqlen_kv, head_dim, left, right, scale, dropout_p, total_q,
          deterministic, softcap, alibi):
    key = (device, dtype, batch, heads, heads_kv, seqlen_q, seqlen_kv, head_dim, left, right, scale, dropout_p, total_q,
           deterministic, softcap, alibi)
    if key in _plans:
        return _plans[key]
    if len(_plans) >= _MAX_PLANS:
        _plans.clear()
    found, why = None, None
    try:
        library = _library.load()
        masked = int(left >= 0 or right >= 0)  # FlashAttention's window_size; causal is (-1, 0)
        problem = _library.Problem(dtype, batch, heads, heads_kv, seqlen_q, seqlen_kv, head_dim, masked, left, right,
                                   scale, int(total_q > 0), softcap=softcap, alibi=alibi, dropout_p=dropout_p,
                                   total_q=total_q, deterministic=int(deterministic))
        plan, kernel, _ = library.plan_backward(problem, device)
        found = (library, plan, problem, kernel)
    except (OSError, _library.LibraryError) as e:
        why = str(e)
    _plans[key] = found, why
    return found, why


def _kernel_ready(t):
    """t, or a contiguous copy where its last dimension is strided or its rows are not 16-byte
    multiples (the kernels' loads); e.g. the gradient of a sum() is an expanded view."""
    if t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(s % 8 == 0 for s in t.stride()[:-1]):
        return t
    return t.contiguous()


def _strides(t):
    if t.dim() == 3:  # packed tokens [total, heads, d]: the batch stride is the row stride (fmha_capi.h)
        row, heads, _ = t.stride()
        return row, heads, row
    batch, seqlen, heads, _ = t.stride()
    return batch, heads, seqlen


def kernel_name(q, k, scale, left, right, dropout_p=0.0, packed=None, deterministic=False, softcap=0.0, alibi_slopes=None):
    """The backward kernel that would serve these tensors and options, or None."""
    alibi = _catalogue._alibi_mode(_readable_slopes(alibi_slopes))
    found, _ = _find(q, k, scale, left, right, dropout_p, packed, deterministic, softcap, alibi)
    return found[3] if found else None


def _readable_slopes(alibi_slopes):
    """The slopes as the kernels read them (fmha._catalogue._alibi_mode), a copy only where needed."""
    if alibi_slopes is None or _catalogue._alibi_mode(alibi_slopes) is not None:
        return alibi_slopes
    return alibi_slopes.contiguous()


def _kernel_head_dim(head_dim):
    """The head_dim the kernels run a call at: a multiple of 8 (their rows are 16-byte vectors);
    run() adds the zero columns, which change no score and no gradient of the others."""
    return -(-head_dim // 8) * 8


def _find(q, k, scale, left, right, dropout_p, packed, deterministic=False, softcap=0.0, alibi=0):
    dtype = _DTYPES.get(q.dtype)
    if dtype is None or not q.is_cuda or q.dim() != (3 if packed else 4):
        return None, f"{q.dtype} on {q.device}, {q.dim()} dimensions"
    if packed:  # q [total_q, heads, d], k [total_k, heads_kv, d]
        (total_q, heads, head_dim), heads_kv = q.shape, k.shape[1]
        cu_seqlens_q, _, seqlen_q, seqlen_kv = packed
        batch = cu_seqlens_q.shape[0] - 1
    else:
        (batch, seqlen_q, heads, head_dim), total_q = q.shape, 0
        seqlen_kv, heads_kv = k.shape[1], k.shape[2]
    return _plan(q.get_device(), dtype, batch, heads, heads_kv, seqlen_q, seqlen_kv, _kernel_head_dim(head_dim),
                 min(left, 2**31 - 1), min(right, 2**31 - 1), scale, dropout_p, total_q, deterministic, softcap, alibi)


def run(grad_out, grad_lse, q, k, v, out, lse, seqlens_q, seqlens_kv, scale, left, right, dropout_p=0.0,
        dropout_seed_offset=None, packed=None, deterministic=False, softcap=0.0, alibi_slopes=None):
    """(dq, dk, dv) like q, k, v by a backward kernel, or None where none serves the call.
    dropout_p, dropout_seed_offset: the forward kernel's dropout (fmha._dropout). packed:
    (cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k), contiguous int32, for packed
    tokens q [total_q, h, d] and k, v [total_k, h_kv, d] (their LSE [h, total_q]), else None.
    deterministic: dQ summed in a fixed order (bitwise-equal gradients for equal inputs).
    softcap, alibi_slopes: the forward's (FlashAttention's arguments)."""
    if lse is None or lse.numel() == 0:
        return None
    alibi_slopes = _readable_slopes(alibi_slopes)
    alibi = _catalogue._alibi_mode(alibi_slopes)
    found, why = _find(q, k, scale, left, right, dropout_p, packed, deterministic, softcap, alibi)
    if found is None:
        if deterministic and _find(q, k, scale, left, right, dropout_p, packed, False, softcap, alibi)[0] is not None:
            why = _NO_DETERMINISTIC_LOOP
        backends.fall_back(why, None, "recomputing the backward in PyTorch")
        return None
    library, plan, problem, kernel = found
    head_dim = q.shape[-1]
    if _kernel_head_dim(head_dim) != head_dim:  # zero columns up to a multiple of 8; the gradients cut back
        widen = lambda t: torch.nn.functional.pad(t, (0, _kernel_head_dim(head_dim) - head_dim))
        grads = run(widen(grad_out), grad_lse, widen(q), widen(k), widen(v), widen(out), lse, seqlens_q, seqlens_kv,
                    scale, left, right, dropout_p, dropout_seed_offset, packed, deterministic, softcap, alibi_slopes)
        return tuple(g[..., :head_dim] for g in grads)
    q, k, v, out, grad_out = (_kernel_ready(t) for t in (q, k, v, out, grad_out))
    lse = lse.contiguous()
    grad_lse = grad_lse.float().contiguous() if grad_lse is not None and grad_lse.numel() > 0 else None
    dq, dk, dv = q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)  # contiguous, as q, k, v
    workspace = torch.empty(plan.workspace_bytes, dtype=torch.uint8, device=q.device)
    tensors = _library.BWD_TENSORS.pack(
        *(t.data_ptr() for t in (q, k, v, out, grad_out, dq, dk, dv)),
        *(s for t in (q, k, v, out, grad_out, dq, dk, dv) for s in _strides(t)),
        seqlens_q.data_ptr() if seqlens_q is not None else 0, seqlens_kv.data_ptr() if seqlens_kv is not None else 0,
        lse.data_ptr(), grad_lse.data_ptr() if grad_lse is not None else 0,
        dropout_seed_offset.data_ptr() if dropout_p > 0 else 0,
        *((packed[0].data_ptr(), packed[1].data_ptr(), q.shape[0], k.shape[0]) if packed else (0, 0, 0, 0)),
        alibi_slopes.data_ptr() if alibi_slopes is not None else 0)
    stream = torch.cuda.current_stream(q.device).cuda_stream
    status = library.launch_backward(ctypes.addressof(plan), ctypes.addressof(problem), tensors, workspace.data_ptr(),
                                     plan.workspace_bytes, stream)
    if status != _library.OK:
        raise RuntimeError(f"fmha: {kernel}: {library.last_error()}")
    return dq, dk, dv
