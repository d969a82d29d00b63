"""The catalogue backend: libfmha.so's kernels on PyTorch's tensors, stream and allocator.

A call's plan (kernel and workspace size) depends only on its sizes and options, so it is made
once per distinct call shape and kept; a launch then costs the output's allocation and one
ctypes call with the pointers and strides (and, on the full path, the workspace's allocation:
eager calls like an earlier one reuse a kept workspace, see _workspace()).
"""
import ctypes
import threading

import torch

from . import _library

_DTYPES = {torch.float16: _library.FP16, torch.bfloat16: _library.BF16}
_INT32_MAX = 2**31 - 1


class Prepared:
    """What a launch needs beyond the tensors: the plan, the C problem it was made for, the
    library, and what the hot path reads of them as plain Python values."""
    __slots__ = ("plan", "problem", "kernel", "reason", "library", "launch", "plan_address", "problem_address",
                 "device_index", "device", "workspace_bytes", "out_shape", "lse_shape", "o_strides", "pointer_mask")

    def __init__(self, plan, problem, kernel, reason, library, device):
        self.plan, self.problem, self.kernel, self.reason, self.library = plan, problem, kernel, reason, library
        self.launch = library.launch
        # The C structs stay alive in this object; the launch takes their addresses.
        self.plan_address, self.problem_address = ctypes.addressof(plan), ctypes.addressof(problem)
        self.device_index, self.device, self.workspace_bytes = plan.device, device, plan.workspace_bytes
        batch, heads, seqlen_q, head_dim = problem.batch, problem.heads_q, problem.seqlen_q, problem.head_dim
        self.out_shape, self.lse_shape = (batch, seqlen_q, heads, head_dim), (batch, heads, seqlen_q)
        self.o_strides = (seqlen_q * heads * head_dim, head_dim, heads * head_dim)  # contiguous [b, s, h, d]
        self.pointer_mask = 1 if head_dim % 8 else 15  # the low bits the kernels' loads need clear (_aligned)
        if problem.packed:  # [total_q, h, d]; the shapes' token count is the call's (forward_packed)
            self.o_strides = (heads * head_dim, head_dim, heads * head_dim)


# PyTorch's current stream of a device as a raw handle (what Inductor's generated code calls).
_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda device: torch.cuda.current_stream(device).cuda_stream)


_MAX_PLANS = 4096
_plans = {}  # (device, dtype, sizes, window sides, scale, packed, options) -> Prepared, or the reason there is none


def _kernel_strides(t, packed=False):
    """(batch, head, row) element strides of a [b, s, h, d] tensor. A dimension of size 1 is
    never stepped along, so a view's odd stride there (not a multiple of 8) becomes 0. Packed
    tokens ([1, total, h, d]): the batch stride is the row stride (fmha_tensors)."""
    (batch, seqlen, heads, _), (sb, ss, sh, _) = t.shape, t.stride()
    if packed:
        sb = ss
    if batch == 1 and sb % 8:
        sb = 0
    if heads == 1 and sh % 8:
        sh = 0
    if seqlen == 1 and ss % 8:
        ss = 0
    return sb, sh, ss


def _aligned(t, strides):
    """Whether the kernels read t in place: rows of 16-byte vectors, or (a head_dim that is not a
    multiple of 8, whose rows the kernels read element by element) 2-byte elements."""
    if t.shape[-1] % 8:
        return t.data_ptr() % 2 == 0
    return t.data_ptr() % 16 == 0 and strides[0] % 8 == 0 and strides[1] % 8 == 0 and strides[2] % 8 == 0


def _alibi_mode(alibi_slopes):
    """The C ABI's problem.alibi for these slopes: 0 none; 1 one row of slopes for every sequence
    ([heads], or [batch, heads] as an expand() of one row); 2 a row per sequence (contiguous
    [batch, heads]); None where the kernels cannot read them as laid out."""
    if alibi_slopes is None:
        return 0
    if alibi_slopes.stride(-1) != 1 and alibi_slopes.shape[-1] > 1:
        return None
    if alibi_slopes.dim() == 1 or alibi_slopes.shape[0] == 1 or alibi_slopes.stride(0) == 0:
        return 1
    return 2 if alibi_slopes.stride(0) == alibi_slopes.shape[1] else None


def _options_why_not(alibi_slopes, paged, k):
    """Why the kernels cannot take these serving options as given, or None."""
    if _alibi_mode(alibi_slopes) is None:
        return "alibi_slopes is not contiguous, which the kernels read: alibi_slopes.contiguous() makes it so"
    if paged is not None:
        table, page_size = paged[0], k.shape[1]
        if not 16 <= page_size <= 256 or page_size & (page_size - 1):
            return f"page_block_size {page_size}: the kernels' pages are a power of two from 16 to 256 keys"
        if not table.is_contiguous():
            return "block_table is not contiguous, which the kernels read: block_table.contiguous() makes it so"


def prepare(q, k, v, seqlens_q, scale, left, right, dropout_p, packed=None, softcap=0.0, alibi_slopes=None,
            paged=None):
    """(launch, None) when a catalogue kernel serves the call, else (None, why not); a launch is
    (Prepared, the 12 kernel strides of q, k, v and the output, as fmha_tensors orders them).
    packed: (batch, max_seqlen_q, max_seqlen_k) of packed tokens q [total_q, h, d], k and v
    [total_k, h_kv, d] (flash_attn_varlen_func), else None for [b, s, h, d] tensors.
    softcap, alibi_slopes: FlashAttention's (fmha._checks); paged: (block_table, the most keys a
    sequence has) for k and v [num_blocks, page_block_size, h_kv, d], else None."""
    if packed is not None:  # as a padded batch's tensors, whose batch stride is the row stride
        q = q.unsqueeze(0)
        if paged is None:
            k, v = k.unsqueeze(0), v.unsqueeze(0)
    if not q.is_cuda:
        return None, f"the tensors are on {q.device}: the catalogue's kernels run on GPUs"
    dtype = _DTYPES.get(q.dtype)
    if dtype is None:
        return None, f"dtype {q.dtype}: the catalogue holds float16 and bfloat16 kernels"
    if dropout_p > 0 and paged is not None:
        return None, f"dropout_p={dropout_p}: the kernels apply dropout to contiguous K and V only"
    why_not = _options_why_not(alibi_slopes, paged, k)
    if why_not:
        return None, why_not
    batch, seqlen_q, heads, head_dim = q.shape
    seqlen_kv, heads_kv = k.shape[1], k.shape[2]
    page_size = max_pages = 0
    if paged is not None:
        seqlen_kv, page_size, max_pages = paged[1], k.shape[1], paged[0].shape[1]
    if packed is not None:
        batch, seqlen_q, seqlen_kv = packed
    try:
        library = _library.load()
    except OSError as error:
        return None, str(error)
    key = (q.get_device(), dtype, batch, heads, heads_kv, seqlen_q, seqlen_kv, head_dim, min(left, _INT32_MAX),
           min(right, _INT32_MAX), scale, packed is not None, softcap, _alibi_mode(alibi_slopes), page_size, max_pages,
           dropout_p)
    prepared = _plans.get(key)
    if prepared is None:
        if len(_plans) >= _MAX_PLANS:  # e.g. a growing KV cache length: a new shape every step
            _plans.clear()
        prepared = _plans[key] = _plan(library, key, q.device)
    if isinstance(prepared, str):
        return None, prepared
    strides = (_kernel_strides(q, packed is not None),) + tuple(
        _kernel_strides(t, packed is not None and paged is None) for t in (k, v))  # pages keep their stride
    for name, t, kernel_strides in zip("qkv", (q, k, v), strides):
        if not _aligned(t, kernel_strides):
            return None, (f"{name}'s data pointer or strides are not multiples of 16 bytes, which the kernels' "
                          f"loads need (strides {tuple(t.stride())}): {name}.contiguous() makes them so")
    return (prepared, strides[0] + strides[1] + strides[2] + prepared.o_strides), None


def _plan(library, key, torch_device):
    (device, dtype, batch, heads, heads_kv, seqlen_q, seqlen_kv, head_dim, left, right, scale, packed, softcap,
     alibi, page_size, max_pages, dropout_p) = key
    sizes = (batch, heads, heads_kv, seqlen_q, seqlen_kv, head_dim, max_pages)
    if any(size > _INT32_MAX for size in sizes):
        return f"sizes {sizes}: the kernels take 32-bit sizes"
    masked = int(left >= 0 or right >= 0)  # FlashAttention's window_size; causal is (-1, 0)
    problem = _library.Problem(dtype, batch, heads, heads_kv, seqlen_q, seqlen_kv, head_dim, masked, left, right, scale,
                               int(packed), softcap, int(alibi), page_size, max_pages, dropout_p)
    try:
        plan, reason = library.plan(problem, device)
    except _library.LibraryError as error:
        message = str(error)
        if error.status == _library.NO_KERNEL and "setup.py" in message:
            message += " (then reinstall this package: pip install --no-build-isolation --no-deps ./python)"
        return message
    return Prepared(plan, problem, library.kernel_name(plan.kernel), reason, library, torch_device)


# The workspace of kept launches (fmha._fastpath), kept per thread, device and stream and grown
# as needed instead of allocated per call (docs/python.md, "The kept workspace"). Reused only
# where that is safe, else allocated per call as the full path does:
_workspaces = {}        # (device, stream, thread) -> (bytes, uint8 tensor, its data_ptr)
_MAX_WORKSPACES = 64    # entries (dead threads, passing streams) before they are all let go
_KEEP_AT_MOST = 64 << 20  # bytes: a call that needs more runs long enough to allocate its own
_current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", None) or torch.cuda.is_current_stream_capturing


def _workspace(nbytes, prepared, stream, kept):
    """(bytes, tensor, pointer): a workspace of at least nbytes for a launch on stream, the
    device's current stream. The tensor must stay referenced until the launch is enqueued."""
    device = prepared.device_index
    # Kept only for the current device (whose current stream _capturing() asks about) and outside
    # CUDA-graph capture: a captured launch needs memory from the graph's pool, which the graph
    # keeps for its replays, not one that later eager calls write to or let go.
    if kept and nbytes <= _KEEP_AT_MOST and device == _current_device() and not _capturing():
        key = (device, stream, threading.get_ident())
        workspace = _workspaces.get(key)
        if workspace is None or workspace[0] < nbytes:
            if len(_workspaces) >= _MAX_WORKSPACES:
                _workspaces.clear()
            # Allocated while `stream` is current, like the one it replaces: once let go (here,
            # or on a clear), the allocator reuses its memory only for work queued on this stream
            # after the launches that used it, as for a per-call torch.empty.
            tensor = torch.empty(nbytes, dtype=torch.uint8, device=prepared.device)
            workspace = _workspaces[key] = (nbytes, tensor, tensor.data_ptr())
        return workspace
    tensor = torch.empty(nbytes, dtype=torch.uint8, device=prepared.device)
    return nbytes, tensor, tensor.data_ptr()


def forward(launch, q, k, v, seqlens_q, seqlens_kv, return_lse, kept=False, alibi_slopes=None, block_table=None,
            dropout_seed_offset=None):
    """(out [b, s_q, h, d], LSE [b, h, s_q] fp32 or None) by a launch of prepare(), on PyTorch's
    current stream, with the workspace from PyTorch's allocator: per call, or (kept=True, the
    eager calls of fmha._fastpath) the kept one. None where q's, k's or v's data pointer is not
    aligned as the kernel needs (Prepared.pointer_mask), which only a kept launch meets (prepare()
    checked the full path's).
    alibi_slopes, block_table: the tensors of the options prepare() was given; dropout_seed_offset:
    int64 [seed, offset] on the device (fmha._dropout) where prepare() was given a dropout_p."""
    prepared, strides = launch
    q_ptr, k_ptr, v_ptr = q.data_ptr(), k.data_ptr(), v.data_ptr()
    if (q_ptr | k_ptr | v_ptr) & prepared.pointer_mask:
        return None
    out = torch.empty(prepared.out_shape, dtype=q.dtype, device=prepared.device)
    lse = torch.empty(prepared.lse_shape, dtype=torch.float32, device=prepared.device) if return_lse else None
    stream = _raw_stream(prepared.device_index)
    workspace_bytes = prepared.workspace_bytes
    workspace = _workspace(workspace_bytes, prepared, stream, kept) if workspace_bytes else (0, None, None)
    tensors = _library.TENSORS.pack(
        q_ptr, k_ptr, v_ptr, out.data_ptr(), *strides,
        seqlens_q.data_ptr() if seqlens_q is not None else 0,
        seqlens_kv.data_ptr() if seqlens_kv is not None else 0,
        lse.data_ptr() if lse is not None else 0, 0, 0, 0, 0,
        alibi_slopes.data_ptr() if alibi_slopes is not None else 0, block_table.data_ptr() if block_table is not None else 0,
        dropout_seed_offset.data_ptr() if dropout_seed_offset is not None else 0)
    _launch(prepared, tensors, workspace, stream)
    return out, lse


def _launch(prepared, tensors, workspace, stream):
    status = prepared.launch(prepared.plan_address, prepared.problem_address, tensors, workspace[2], workspace[0],
                             stream)
    if status != _library.OK:
        raise RuntimeError(f"fmha: {prepared.kernel}: {prepared.library.last_error()}")


def forward_packed(launch, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, return_lse, alibi_slopes=None,
                   block_table=None, dropout_seed_offset=None, kept=False):
    """(out [total_q, h, d], LSE [h, total_q] fp32 or None) of packed tokens by a launch of
    prepare(..., packed=...): the tensors read in place, no gather or scatter. With block_table,
    k and v are pages, not packed: the keys' lengths are seqused_k. dropout_seed_offset, kept:
    as forward()'s (None where a kept launch meets a pointer it cannot take)."""
    prepared, strides = launch
    if kept and (q.data_ptr() | k.data_ptr() | v.data_ptr()) & prepared.pointer_mask:
        return None
    total_q, heads, head_dim = q.shape
    out = torch.empty((total_q, heads, head_dim), dtype=q.dtype, device=prepared.device)
    lse = torch.empty((heads, total_q), dtype=torch.float32, device=prepared.device) if return_lse else None
    stream = _raw_stream(prepared.device_index)
    workspace = _workspace(prepared.workspace_bytes, prepared, stream, kept) if prepared.workspace_bytes else (0, None, None)
    tensors = _library.TENSORS.pack(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), *strides,
        0, seqused_k.data_ptr() if seqused_k is not None else 0, lse.data_ptr() if lse is not None else 0,
        cu_seqlens_q.data_ptr(), cu_seqlens_k.data_ptr() if block_table is None else 0, total_q, k.shape[0],
        alibi_slopes.data_ptr() if alibi_slopes is not None else 0, block_table.data_ptr() if block_table is not None else 0,
        dropout_seed_offset.data_ptr() if dropout_seed_offset is not None else 0)
    _launch(prepared, tensors, workspace, stream)
    return out, lse
