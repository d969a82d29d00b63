"""flash_attn_with_kvcache's append: new keys and values written into the cache after each
sequence's filled length, with FlashAttention's rotary embedding of the new keys and of the
queries. One launch of the library's fmha_append_kv where it serves the call (CUDA tensors,
float16/bfloat16, 16-byte vectors, rotary_dim a multiple of 16); else PyTorch ops with the same
results (CPU tensors, other dtypes, odd strides, torch.compile, autograd).

A sequence whose new tokens would pass the capacity (or whose length is negative) gets none of
them written, and a token whose cache row or page is outside the cache is not written: both set
bits of an int32 flag in device memory, which the next call that may copy to the host reports
(flash_attn_with_kvcache does so where it checks the lengths). docs/decisions.md, "Fused append
and rotary".
"""
import ctypes

import torch

from . import _catalogue, _library

# Per device, the int32 error flag the appends OR their _library.APPEND_* bits into.
_flags = {}


def error_flag(device):
    """The device's flag, made where missing. Made inside a CUDA graph's capture it would be
    zeroed at each replay, so a refusal reads only until the next replay: flash_attn_with_kvcache
    makes it at the first eager call, as the warm-up before a capture is."""
    flag = _flags.get(device)
    if flag is None:
        flag = _flags[device] = torch.zeros((), dtype=torch.int32, device=device)
    return flag


def refusal_message(bits):
    """What a flag's bits say, for the ValueError of the call that reads them."""
    said = []
    if bits & _library.APPEND_OVERFLOW:
        said.append("a sequence's cache_seqlens + new tokens passed the cache's capacity (or a length was "
                    "negative): none of its new tokens were written; keep cache_seqlens + new tokens <= capacity")
    if bits & _library.APPEND_BAD_INDEX:
        said.append("cache_batch_idx or a block_table entry named no row or page of the cache: those tokens were "
                    "not written")
    return "an append captured in a CUDA graph (where nothing can raise) was refused at a replay: " + "; ".join(said)


class Rotary:
    """FlashAttention's rotary embedding of an append: cos, sin [seqlen_ro, dim / 2]; pairs
    (2i, 2i + 1) where interleaved, else (i, i + dim / 2); query row i at position
    cache_seqlens + i where per_row (causal or local attention), else cache_seqlens."""
    __slots__ = ("cos", "sin", "dim", "interleaved", "per_row")

    def __init__(self, cos, sin, interleaved, per_row):
        self.cos, self.sin, self.dim = cos, sin, 2 * cos.shape[1]
        self.interleaved, self.per_row = bool(interleaved), per_row


def rotary(cos, sin, interleaved, q, k, capacity, causal, window_size):
    """The Rotary of a call, or None without cos and sin; a ValueError or TypeError naming the
    argument otherwise. FlashAttention's rules: both tables, with new keys; [seqlen_ro,
    rotary_dim / 2] in q's dtype, rotary_dim <= head_dim, seqlen_ro >= the capacity; queries
    per row where attention is causal or local (a window side below the capacity)."""
    if cos is None and sin is None:
        return None
    if cos is None or sin is None:
        raise ValueError("rotary_cos and rotary_sin must be given together")
    if k is None:
        raise ValueError("rotary_cos and rotary_sin rotate the new keys and the queries: they need k and v (new "
                         "tokens to append), as in FlashAttention")
    for name, t in (("rotary_cos", cos), ("rotary_sin", sin)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2 or t.shape[1] == 0 or t.shape[0] == 0:
            raise ValueError(f"{name} must be 2-D [seqlen_ro, rotary_dim / 2], got shape {tuple(t.shape)}")
        if t.dtype != q.dtype:
            raise TypeError(f"{name} must have q's dtype {q.dtype}, got {t.dtype}")
        if t.device != q.device:
            raise ValueError(f"{name} must be on {q.device} with q, got {t.device}")
    if cos.shape != sin.shape:
        raise ValueError(f"rotary_cos and rotary_sin must have one shape, got {tuple(cos.shape)} and "
                         f"{tuple(sin.shape)}")
    seqlen_ro, rotary_dim = cos.shape[0], 2 * cos.shape[1]
    if rotary_dim > q.shape[-1]:
        raise ValueError(f"rotary_dim (2 x rotary_cos.shape[1] = {rotary_dim}) must be at most head_dim {q.shape[-1]}")
    if seqlen_ro < capacity:
        raise ValueError(f"rotary_cos and rotary_sin must have a row for every position of the cache: seqlen_ro "
                         f"{seqlen_ro} < capacity {capacity}")
    if not isinstance(interleaved, (bool, int)):
        raise TypeError(f"rotary_interleaved must be a bool, got {type(interleaved).__name__}")
    left, right = window_size
    local = 0 <= left < capacity or 0 <= right < capacity  # FlashAttention drops a side as wide as the cache
    return Rotary(cos, sin, interleaved, bool(causal) or local)


def append(q, k_cache, v_cache, k, v, cache_seqlens, capacity, block_table, cache_batch_idx, rotary, lengths):
    """Writes k, v [batch, new, heads_kv, d] into the cache after cache_seqlens (an int, or int32
    [batch]); returns (the queries to attend with: rotated where rotary is given, else q; where
    lengths, the attention's key counts, int32 [batch]: cache_seqlens + new clamped to [0,
    capacity], else None)."""
    result = _append_by_kernel(q, k_cache, v_cache, k, v, cache_seqlens, capacity, block_table, cache_batch_idx,
                               rotary, lengths)
    if result is None:
        result = _append_by_torch(q, k_cache, v_cache, k, v, cache_seqlens, capacity, block_table, cache_batch_idx,
                                  rotary, lengths)
    return result


def _vectors(t):
    """t's kernel strides where its pointer and strides allow 16-byte vectors, else None."""
    strides = _catalogue._kernel_strides(t)
    return strides if _catalogue._aligned(t, strides) else None


def _aligned_copy(t):
    """t, or a contiguous copy where its pointer or strides do not allow 16-byte vectors."""
    strides = _vectors(t)
    if strides is None:
        t = t.clone(memory_format=torch.contiguous_format)
        strides = _catalogue._kernel_strides(t)
    return t, strides


def _append_by_kernel(q, k_cache, v_cache, k, v, cache_seqlens, capacity, block_table, cache_batch_idx, rotary,
                      lengths):
    """The append as one launch of fmha_append_kv, or None where it does not serve the call."""
    dtype = _catalogue._DTYPES.get(q.dtype)
    if (not q.is_cuda or dtype is None or q.shape[-1] % 8 or (rotary is not None and rotary.dim % 16) or
            torch.compiler.is_compiling() or
            (torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad))):
        return None
    cache_strides = [_vectors(t) for t in (k_cache, v_cache)]
    if None in cache_strides:
        return None
    try:
        library = _library.load()
    except OSError:
        return None
    if not library.has_append:
        return None
    batch, new, heads_kv, head_dim = k.shape
    args = _library.KvAppend()
    args.dtype, args.device = dtype, q.get_device()
    args.batch, args.seqlen_new, args.heads_kv, args.head_dim = batch, new, heads_kv, head_dim
    args.capacity, args.cache_rows = capacity, k_cache.shape[0]
    (k, k_strides), (v, v_strides) = _aligned_copy(k), _aligned_copy(v)
    args.k_new, args.v_new = k.data_ptr(), v.data_ptr()
    args.k_cache, args.v_cache = k_cache.data_ptr(), v_cache.data_ptr()
    (args.k_new_batch_stride, args.k_new_head_stride, args.k_new_row_stride) = k_strides
    (args.v_new_batch_stride, args.v_new_head_stride, args.v_new_row_stride) = v_strides
    (args.k_cache_batch_stride, args.k_cache_head_stride, args.k_cache_row_stride) = cache_strides[0]
    (args.v_cache_batch_stride, args.v_cache_head_stride, args.v_cache_row_stride) = cache_strides[1]
    if block_table is not None:
        block_table = block_table.contiguous()
        args.page_size, args.max_pages_per_seq = k_cache.shape[1], block_table.shape[1]
        args.block_table = block_table.data_ptr()
    if cache_batch_idx is not None:
        cache_batch_idx = cache_batch_idx.contiguous()
        args.cache_batch_idx = cache_batch_idx.data_ptr()
    if isinstance(cache_seqlens, int):
        args.seqlen_fixed = cache_seqlens
    else:
        cache_seqlens = cache_seqlens.contiguous()
        args.cache_seqlens = cache_seqlens.data_ptr()
    q_out = q
    if rotary is not None:
        cos, sin = (t if t.is_contiguous() and t.data_ptr() % 16 == 0
                    else t.clone(memory_format=torch.contiguous_format) for t in (rotary.cos, rotary.sin))
        args.rotary_dim, args.rotary_interleaved, args.seqlen_ro = rotary.dim, int(rotary.interleaved), cos.shape[0]
        args.rotary_cos, args.rotary_sin = cos.data_ptr(), sin.data_ptr()
        q, q_strides = _aligned_copy(q)
        q_out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        args.q, args.q_out = q.data_ptr(), q_out.data_ptr()
        args.seqlen_q, args.heads_q, args.q_per_row = q.shape[1], q.shape[2], int(rotary.per_row)
        (args.q_batch_stride, args.q_head_stride, args.q_row_stride) = q_strides
        (args.q_out_batch_stride, args.q_out_head_stride, args.q_out_row_stride) = _catalogue._kernel_strides(q_out)
    seqlens_out = torch.empty(batch, dtype=torch.int32, device=q.device) if lengths else None
    if seqlens_out is not None:
        args.seqlens_out = seqlens_out.data_ptr()
    flag = error_flag(q.device)
    args.error = flag.data_ptr()
    # The copies made here may be let go once the launch is queued: the allocator reuses their
    # memory only for work queued after it on this stream (as for _catalogue's workspaces).
    status = library.append_kv(ctypes.addressof(args), _catalogue._raw_stream(args.device))
    if status != _library.OK:
        raise RuntimeError(f"fmha: the KV-cache append: {library.last_error()}")
    return q_out, seqlens_out


def _rotated(x, rotary, positions):
    """x [batch, seq, heads, d] with its first rotary.dim features turned by the angles of rows
    `positions` [batch, seq] of the tables; in fp32, rounded once to x's dtype."""
    half = rotary.dim // 2
    cos, sin = (t[positions].float().unsqueeze(2) for t in (rotary.cos, rotary.sin))  # [batch, seq, 1, half]
    turning = x[..., :rotary.dim].float()
    if rotary.interleaved:
        first, second = turning[..., 0::2], turning[..., 1::2]
        turned = torch.stack((first * cos - second * sin, first * sin + second * cos), dim=-1).flatten(-2)
    else:
        first, second = turning[..., :half], turning[..., half:]
        turned = torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)
    return torch.cat((turned.to(x.dtype), x[..., rotary.dim:]), dim=-1)


def _append_by_torch(q, k_cache, v_cache, k, v, cache_seqlens, capacity, block_table, cache_batch_idx, rotary,
                     lengths):
    """The append by PyTorch ops, with the kernel's results. Without dynamic shapes (it also
    runs in CUDA graphs and under torch.compile): refused tokens write back the cache's values."""
    batch, new = k.shape[:2]
    device = k.device
    starts = (torch.full((batch,), cache_seqlens, dtype=torch.long, device=device) if isinstance(cache_seqlens, int)
              else cache_seqlens.long())
    fits = (starts >= 0) & (starts + new <= capacity)
    positions = starts.unsqueeze(1) + torch.arange(new, device=device)
    slots = positions.clamp(0, capacity - 1)
    if block_table is not None:
        page_size = k_cache.shape[1]
        rows, slots = block_table.long().gather(1, slots // page_size), slots % page_size
    elif cache_batch_idx is not None:
        rows = cache_batch_idx.long().unsqueeze(1).expand(batch, new)
    else:
        rows = torch.arange(batch, device=device).unsqueeze(1).expand(batch, new)
    indexed = (rows >= 0) & (rows < k_cache.shape[0])
    rows = rows.clamp(0, k_cache.shape[0] - 1)
    if rotary is not None:
        k = _rotated(k, rotary, positions.clamp(0, rotary.cos.shape[0] - 1))
    written = (fits.unsqueeze(1) & indexed)[:, :, None, None]
    k_cache[rows, slots] = torch.where(written, k, k_cache[rows, slots])
    v_cache[rows, slots] = torch.where(written, v, v_cache[rows, slots])
    flag = _flags.get(device)
    if flag is not None and not torch.compiler.is_compiling():
        flag.bitwise_or_((~fits).any().int() * _library.APPEND_OVERFLOW |
                         (~indexed).any().int() * _library.APPEND_BAD_INDEX)
    if rotary is not None:
        rows_q = (torch.arange(q.shape[1], device=device) if rotary.per_row
                  else torch.zeros(1, dtype=torch.long, device=device))
        at = (starts.unsqueeze(1) + rows_q).expand(batch, q.shape[1]).clamp(0, rotary.cos.shape[0] - 1)
        q = _rotated(q, rotary, at)
    seqlens = (starts + new).clamp(0, capacity).int() if lengths else None
    return q, seqlens
