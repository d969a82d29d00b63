"""The catalogue backend: libfmha.so's kernels on PyTorch's tensors, stream and allocator.

A call's plan (kernel and workspace size) depends only on its sizes and options, so it is made
once per distinct call shape and kept; a launch then costs the output's allocation and one
ctypes call with the pointers and strides.
"""
import torch

from . import _library

_DTYPES = {torch.float16: _library.FP16, torch.bfloat16: _library.BF16}
_INT32_MAX = 2**31 - 1


class Prepared:
    """What a launch needs beyond the tensors: the plan, the C problem it was made for, and the
    library's launch function."""
    __slots__ = ("plan", "problem", "kernel", "reason", "library")

    def __init__(self, plan, problem, kernel, reason, library):
        self.plan, self.problem, self.kernel, self.reason, self.library = plan, problem, kernel, reason, library


# PyTorch's current stream of a device as a raw handle (what Inductor's generated code calls).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda device: torch.cuda.current_stream(device).cuda_stream)


_MAX_PLANS = 4096
_plans = {}  # (device, dtype, sizes, causal, window, scale) -> Prepared, or the reason there is none


def _kernel_strides(t):
    """(batch, head, row) element strides of a [b, s, h, d] tensor. A dimension of size 1 is
    never stepped along, so a view's odd stride there (not a multiple of 8) becomes 0."""
    (batch, seqlen, heads, _), (sb, ss, sh, _) = t.shape, t.stride()
    if batch == 1 and sb % 8:
        sb = 0
    if heads == 1 and sh % 8:
        sh = 0
    if seqlen == 1 and ss % 8:
        ss = 0
    return sb, sh, ss


def _aligned(t, strides):
    return t.data_ptr() % 16 == 0 and strides[0] % 8 == 0 and strides[1] % 8 == 0 and strides[2] % 8 == 0


def prepare(q, k, v, seqlens_q, scale, left, right, dropout_p):
    """(launch, None) when a catalogue kernel serves the call, else (None, why not); a launch is
    (Prepared, q's, k's and v's kernel strides)."""
    if not q.is_cuda:
        return None, f"the tensors are on {q.device}: the catalogue's kernels run on GPUs"
    dtype = _DTYPES.get(q.dtype)
    if dtype is None:
        return None, f"dtype {q.dtype}: the catalogue holds float16 and bfloat16 kernels"
    if dropout_p > 0:
        return None, f"dropout_p={dropout_p}: the kernels have no dropout yet"
    if right > 0 or (right < 0 and left >= 0):
        return None, (f"window_size ({left}, {right}): the kernels' sliding window is causal (right = 0); "
                      "a window reaching past the diagonal is not one of them")
    causal = right == 0
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_kv, heads_kv = k.shape[1], k.shape[2]
    if causal and seqlens_q is None and seqlen_q > seqlen_kv:
        return None, (f"causal with seqlen_q ({seqlen_q}) > seqlen_kv ({seqlen_kv}): the first rows see no key, "
                      "which the kernels' validation rejects")
    try:
        library = _library.load()
    except OSError as error:
        return None, str(error)
    window = min(left + 1, _INT32_MAX) if causal and left >= 0 else 0
    key = (q.get_device(), dtype, batch, heads, heads_kv, seqlen_q, seqlen_kv, head_dim, causal, window, scale)
    prepared = _plans.get(key)
    if prepared is None:
        if len(_plans) >= _MAX_PLANS:  # e.g. a growing KV cache length: a new shape every step
            _plans.clear()
        prepared = _plans[key] = _plan(library, key)
    if isinstance(prepared, str):
        return None, prepared
    strides = _kernel_strides(q), _kernel_strides(k), _kernel_strides(v)
    for name, t, kernel_strides in zip("qkv", (q, k, v), strides):
        if not _aligned(t, kernel_strides):
            return None, (f"{name}'s data pointer or strides are not multiples of 16 bytes, which the kernels' "
                          f"loads need (strides {tuple(t.stride())}): {name}.contiguous() makes them so")
    return (prepared,) + strides, None


def _plan(library, key):
    device, dtype, batch, heads, heads_kv, seqlen_q, seqlen_kv, head_dim, causal, window, scale = key
    sizes = (batch, heads, heads_kv, seqlen_q, seqlen_kv, head_dim)
    if any(size > _INT32_MAX for size in sizes):
        return f"sizes {sizes}: the kernels take 32-bit sizes"
    problem = _library.Problem(dtype, batch, heads, heads_kv, seqlen_q, seqlen_kv, head_dim, int(causal), window, scale)
    try:
        plan, reason = library.plan(problem, device)
    except _library.LibraryError as error:
        message = str(error)
        if error.status == _library.NO_KERNEL and "setup.py" in message:
            message += " (then reinstall this package: pip install --no-build-isolation --no-deps ./python)"
        return message
    return Prepared(plan, problem, library.kernel_name(plan.kernel), reason, library)


def forward(launch, q, k, v, seqlens_q, seqlens_kv, return_lse):
    """(out [b, s_q, h, d], LSE [b, h, s_q] fp32 or None) by a launch of prepare(), on PyTorch's
    current stream, with the workspace from PyTorch's allocator."""
    prepared, qs, ks, vs = launch
    batch, seqlen_q, heads, head_dim = q.shape
    device = q.device
    out = torch.empty(batch, seqlen_q, heads, head_dim, dtype=q.dtype, device=device)
    lse = torch.empty(batch, heads, seqlen_q, dtype=torch.float32, device=device) if return_lse else None
    workspace_bytes = prepared.plan.workspace_bytes
    workspace = torch.empty(workspace_bytes, dtype=torch.uint8, device=device) if workspace_bytes else None
    tensors = _library.Tensors(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
        qs[0], qs[1], qs[2], ks[0], ks[1], ks[2], vs[0], vs[1], vs[2],
        seqlen_q * heads * head_dim, head_dim, heads * head_dim,
        seqlens_q.data_ptr() if seqlens_q is not None else None,
        seqlens_kv.data_ptr() if seqlens_kv is not None else None,
        lse.data_ptr() if lse is not None else None)
    status = prepared.library.forward(prepared.plan, prepared.problem, tensors,
                                      workspace.data_ptr() if workspace is not None else None, workspace_bytes,
                                      _raw_stream(prepared.plan.device))
    if status != _library.OK:
        raise RuntimeError(f"fmha: {prepared.kernel}: {prepared.library.last_error()}")
    return out, lse
