"""FlashAttention's Python API over the catalogue: tensors [batch, seqlen, heads, head_dim],
GQA/MQA from the head counts, causal masks bottom-right aligned, LSE in natural log."""
import weakref

import torch

from . import _append, _catalogue, _checks, _dropout, _fastpath, _math, _varlen, backends
from ._ops import attention


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, return_lse=False, *, deterministic=False, strict=None):
    """Attention of q [batch, seqlen_q, heads, head_dim] over k, v [batch, seqlen_kv, heads_kv,
    head_dim]; heads a multiple of heads_kv. Returns out like q, and with return_lse also each
    row's log-sum-exp, fp32 [batch, heads, seqlen_q].

    causal: query i sees keys j <= i + seqlen_kv - seqlen_q (bottom-right). window_size
    (left, right): keys within [i + seqlen_kv - seqlen_q - left, ... + right]; -1 is unbounded.
    softcap > 0: scores s = softcap * tanh(s / softcap) after the scale. alibi_slopes: fp32
    [heads] or [batch, heads]; adds -slope * |i + seqlen_kv - seqlen_q - j| after the softcap
    (FlashAttention's order). strict: raise fmha.UnsupportedError instead of falling back to
    PyTorch's attention (default: the FMHA_STRICT environment variable). deterministic: as
    FlashAttention's, bitwise-equal gradients for equal inputs: the backward kernels' deterministic
    loop where the build has it (all but setup.py --no-deterministic-backward), else PyTorch's recompute.
    Views whose last dimension is contiguous are read in place.
    """
    deterministic = _checks.deterministic(deterministic)
    key, result = _fastpath.run("flash_attn_func", (q, k, v, alibi_slopes),
                                (dropout_p, softmax_scale, causal, softcap, window_size), None, return_lse, alibi_slopes)
    if result is None:
        _checks.qkv(q, k, v)
        scale = _checks.softmax_scale(softmax_scale, q.shape[-1])
        left, right = _checks.window(window_size, causal)
        dropout_p = _checks.dropout(dropout_p)
        softcap = _checks.softcap(softcap)
        _checks.alibi_slopes(alibi_slopes, q.shape[0], q.shape[2], q.device)
        if q.shape[0] == 0 or q.shape[1] == 0 or k.shape[1] == 0:
            return _math.no_keys(q, k, v, (q.shape[0], q.shape[2], q.shape[1]), return_lse)
        _fastpath.keep(key, q, k, v, None, scale, left, right, dropout_p, softcap=softcap, alibi_slopes=alibi_slopes)
        result = attention(q, k, v, None, None, scale, left, right, dropout_p, return_lse, strict, softcap,
                           alibi_slopes, deterministic)
    return result if return_lse else result[0]


def _gathered_pages(cache, block_table, keys):
    """A paged cache [num_blocks, page_block_size, heads, d] as each sequence's first `keys` keys,
    a contiguous copy [batch, keys, heads, d] (the fallback's; the kernels follow the table)."""
    return cache[block_table.long()].flatten(1, 2)[:, :keys]


def _host_checks_allowed(t):
    """Whether a value check may copy to the host: not while torch.compile traces or a CUDA graph is captured."""
    return not torch.compiler.is_compiling() and not (t.is_cuda and torch.cuda.is_current_stream_capturing())


# The values of cu_seqlens tensors a host check has read, by tensor (id, held weakly) and the
# version counter PyTorch bumps at every in-place write: a serving step passes one cu_seqlens to
# every layer, and each would otherwise copy to the host and wait for the device, idling it for
# the host's next call (docs/python.md).
_read_cu_seqlens = {}


def _cu_seqlens_values(tensors):
    """(first, last, shortest step, longest step) of each tensor: the ones read before at the same
    version from the cache, the others with one device-to-host copy for all. Inference tensors
    (made under torch.inference_mode) keep no version counter: they are read at every call."""
    def version(cu):
        return None if cu.is_inference() else cu._version

    def cached(cu):
        entry = _read_cu_seqlens.get(id(cu))
        if entry is None or entry[0]() is not cu or version(cu) is None or entry[1] != version(cu):
            return None
        return entry[2]

    unread = list({id(cu): cu for cu in tensors if cached(cu) is None}.values())
    read = {}
    if unread:
        values = torch.stack([torch.stack([cu[0], cu[-1], (cu[1:] - cu[:-1]).min(), (cu[1:] - cu[:-1]).max()])
                              for cu in unread]).tolist()
        if len(_read_cu_seqlens) > 256:  # tensors of past steps
            _read_cu_seqlens.clear()
        for cu, values_of_cu in zip(unread, values):
            read[id(cu)] = tuple(values_of_cu)
            if version(cu) is not None:
                _read_cu_seqlens[id(cu)] = (weakref.ref(cu), version(cu), read[id(cu)])
    return [read.get(id(cu)) or cached(cu) for cu in tensors]


def _check_cu_seqlens(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, paged):
    """The values of both cu_seqlens, as _cu_seqlens_values() reads them: each rises from 0 to
    its tensor's token count (the keys' to any, where they are pages) in steps of at most its
    max_seqlen. Skipped while a CUDA graph is captured or compiled."""
    checks = (("cu_seqlens_q", cu_seqlens_q, q.shape[0], max_seqlen_q),
              ("cu_seqlens_k", cu_seqlens_k, None if paged else k.shape[0], max_seqlen_k))
    if not all(_host_checks_allowed(check[1]) for check in checks):
        return
    values = _cu_seqlens_values([cu for _, cu, _, _ in checks])
    for (name, _, total, max_seqlen), (first, last, shortest, longest) in zip(checks, values):
        if first != 0 or (total is not None and last != total) or shortest < 0 or longest > max_seqlen:
            end = "" if total is None else f" to the token count {total}"
            raise ValueError(f"{name} must rise from 0{end} in steps of at most {max_seqlen} (max_seqlen): got first "
                             f"{first}, last {last}, steps {shortest} to {longest}")


def _paged_capacity(k_cache, block_table):
    return block_table.shape[1] * k_cache.shape[1]


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           return_lse=False, *, block_table=None, deterministic=False, strict=None):
    """Attention over packed sequences: q [total_q, heads, head_dim], k, v [total_k, heads_kv,
    head_dim]; sequence b holds tokens cu_seqlens[b] to cu_seqlens[b + 1] (int32 [batch + 1]).
    Returns out like q, and with return_lse the LSE, fp32 [heads, total_q]. softcap,
    alibi_slopes ([batch, heads] slopes: one row per sequence) and deterministic as in
    flash_attn_func.

    block_table (int32 [batch, max_blocks_per_seq]): k, v are a paged cache [num_blocks,
    page_block_size, heads_kv, head_dim] and sequence b's keys are its first cu_seqlens_k[b + 1]
    - cu_seqlens_k[b] keys through row b of the table (FlashAttention 2.6's rule).

    The kernels read the packed tokens (and pages) in place, in the backward too (fmha._varlen).
    Calls they do not serve take the padded path: the tokens gathered into a padded batch
    ([batch, max_seqlen, heads, head_dim]) with per-sequence lengths, the output scattered back;
    so do those with autograd or under torch.compile that page the keys, which no backward
    kernel takes.
    """
    deterministic = _checks.deterministic(deterministic)
    paged = block_table is not None
    # A call like an earlier one (shapes, strides, arguments) reuses its launch; cu_seqlens' values
    # are checked still (as read per tensor version).
    key, launch = (None, None) if paged else _fastpath.kept(
        "flash_attn_varlen_func", (q, k, v, cu_seqlens_q, cu_seqlens_k, alibi_slopes),
        (max_seqlen_q, max_seqlen_k, dropout_p, softmax_scale, causal, softcap, window_size))
    if launch is not None:
        _check_cu_seqlens(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, paged)
        result = _catalogue.forward_packed(launch, q, k, v, cu_seqlens_q, cu_seqlens_k, None, return_lse, alibi_slopes,
                                           kept=True)
        if result is not None:
            return result if return_lse else result[0]
    layout = "[total_tokens, heads, head_dim]"
    if paged:
        _checks.paged_qkv(q, k, v, rank=3, layout=layout)
    else:
        _checks.qkv(q, k, v, rank=3, layout=layout)
    _checks.count("max_seqlen_q", max_seqlen_q)
    _checks.count("max_seqlen_k", max_seqlen_k)
    if not isinstance(cu_seqlens_q, torch.Tensor) or cu_seqlens_q.dim() != 1 or cu_seqlens_q.shape[0] < 2:
        raise ValueError("cu_seqlens_q must be a 1-D int32 tensor [batch + 1] of cumulative sequence lengths")
    batch = cu_seqlens_q.shape[0] - 1
    _checks.lengths("cu_seqlens_q", cu_seqlens_q, batch + 1, q.device)
    _checks.lengths("cu_seqlens_k", cu_seqlens_k, batch + 1, q.device)
    if paged:
        _checks.block_table(block_table, batch, q.device)
        if max_seqlen_k > _paged_capacity(k, block_table):
            raise ValueError(f"max_seqlen_k ({max_seqlen_k}) must be at most what block_table reaches: "
                             f"{block_table.shape[1]} blocks of {k.shape[1]} keys")
    _check_cu_seqlens(q, k, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, paged)
    scale = _checks.softmax_scale(softmax_scale, q.shape[-1])
    left, right = _checks.window(window_size, causal)
    dropout_p = _checks.dropout(dropout_p)
    softcap = _checks.softcap(softcap)
    _checks.alibi_slopes(alibi_slopes, batch, q.shape[1], q.device)
    if q.shape[0] == 0 or max_seqlen_k == 0 or (not paged and k.shape[0] == 0):
        return _math.no_keys(q, k, v, (q.shape[1], q.shape[0]), return_lse)
    seqlens_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]) if paged else None  # the keys' lengths in pages
    needs_grad = torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad)
    compiling = torch.compiler.is_compiling()
    if (needs_grad or compiling) and _varlen.serves(paged, dropout_p, q):
        out, lse = _varlen.attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, scale, left, right,
                                     dropout_p, strict, deterministic, softcap, alibi_slopes)
        return (out, lse) if return_lse else out
    if not needs_grad and not compiling and cu_seqlens_q.is_contiguous() and cu_seqlens_k.is_contiguous():
        launch, why_not = _catalogue.prepare(q, k, v, None, scale, left, right, dropout_p,
                                             packed=(batch, max_seqlen_q, max_seqlen_k), softcap=softcap,
                                             alibi_slopes=alibi_slopes,
                                             paged=(block_table, max_seqlen_k) if paged else None)
        if launch is not None:
            seed_offset = _dropout.seed_offset(q.device) if dropout_p > 0 else None
            out, lse = _catalogue.forward_packed(launch, q, k, v, cu_seqlens_q, cu_seqlens_k,
                                                 seqlens_k, return_lse, alibi_slopes, block_table,
                                                 seed_offset)
            if dropout_p == 0:  # (a dropout call draws its seed and offset)
                _fastpath.remember(key, launch)
            return (out, lse) if return_lse else out
        if paged:
            backends.fall_back(why_not, strict, "gathering the pages into a contiguous copy")
    seqlens_q = cu_seqlens_q[1:] - cu_seqlens_q[:-1]
    if paged:
        k_padded, v_padded = (_gathered_pages(t, block_table, max_seqlen_k) for t in (k, v))
    else:
        seqlens_k = cu_seqlens_k[1:] - cu_seqlens_k[:-1]
        k_padded, v_padded = (_varlen.padded(t, cu_seqlens_k, max_seqlen_k) for t in (k, v))
    out, lse = attention(_varlen.padded(q, cu_seqlens_q, max_seqlen_q), k_padded, v_padded, seqlens_q, seqlens_k, scale,
                         left, right, dropout_p, return_lse, strict, softcap, alibi_slopes, deterministic)
    out = _varlen.unpadded(out, cu_seqlens_q, q.shape[0])
    if not return_lse:
        return out
    return out, _varlen.unpadded(lse.transpose(1, 2), cu_seqlens_q, q.shape[0]).t().contiguous()


def _left_padded_lengths(cache_leftpad, ends):
    """Each sequence's key count, ends (an int, or int32 [batch]) less its left padding; the
    padding is checked (0 <= leftpad <= end) where a host check may run."""
    lengths = (ends - cache_leftpad).int()
    if _host_checks_allowed(cache_leftpad):
        lowest, shortest = torch.stack([cache_leftpad.min(), lengths.min()]).tolist()
        if lowest < 0 or shortest < 0:
            raise ValueError("cache_leftpad must be in [0, cache_seqlens (+ new tokens)] for each sequence")
    return lengths.contiguous()


def _shifted_left(cache, cache_leftpad):
    """cache [batch, capacity, h, d] with sequence b's rows moved cache_leftpad[b] to the left (a
    copy; positions past the end repeat the last row and are never read)."""
    capacity = cache.shape[1]
    rows = (cache_leftpad.long().unsqueeze(1) + torch.arange(capacity, device=cache.device)).clamp_(max=capacity - 1)
    return cache.gather(1, rows[:, :, None, None].expand(-1, -1, *cache.shape[2:]))


def _check_append(cache_seqlens, appended, capacity):
    """Raises a ValueError where cache_seqlens (int32 [batch]) + appended passes the capacity, before
    anything is written, or where an earlier append that could not raise was refused (its flag,
    fmha._append, is then cleared): one device-to-host copy. While a CUDA graph is captured or
    torch.compile traces, nothing: the append itself refuses what passes the capacity and sets
    the flag that the next call here reports."""
    if not _host_checks_allowed(cache_seqlens):
        return
    flag = _append.error_flag(cache_seqlens.device)  # made outside capture (fmha._append.error_flag)
    lowest, highest, earlier = torch.stack([cache_seqlens.min(), cache_seqlens.max(), flag]).tolist()
    if earlier:
        flag.zero_()
        raise ValueError(_append.refusal_message(earlier))
    if lowest < 0 or highest + appended > capacity:
        raise ValueError(f"cache_seqlens + new tokens ({appended}) must be in [0, capacity {capacity}]: "
                         f"cache_seqlens range from {lowest} to {highest}; nothing was written")


def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                            cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                            softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                            rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False,
                            *, strict=None):
    """A decode step: q [batch, seqlen_q, heads, head_dim] against a cache k_cache, v_cache
    [batch, capacity, heads_kv, head_dim] of which each sequence has filled cache_seqlens
    (an int, or int32 [batch]; None: all of it). New keys and values k, v [batch, seqlen_new,
    heads_kv, head_dim] are first written into the cache after them (in place), as in
    FlashAttention. causal aligns each sequence's last query with its last key. softcap and
    alibi_slopes as in flash_attn_func. Returns out, and with return_softmax_lse the LSE.

    block_table (int32 [batch, max_blocks_per_seq]): a paged cache, k_cache and v_cache
    [num_blocks, page_block_size, heads_kv, head_dim], sequence b's key j at row j % page_block_size
    of block block_table[b, j // page_block_size]; its capacity is max_blocks_per_seq x
    page_block_size. cache_batch_idx (int32 [batch]): sequence b uses cache row cache_batch_idx[b]
    (not with block_table, as in FlashAttention). cache_leftpad (int32 [batch]): sequence b's keys
    start at cache position cache_leftpad[b] (FlashAttention's left padding; not with block_table):
    its keys are [cache_leftpad[b], cache_seqlens[b] + seqlen_new), read from a copy shifted left.

    rotary_cos, rotary_sin ([seqlen_ro, rotary_dim / 2] in q's dtype, seqlen_ro >= the capacity,
    rotary_dim <= head_dim; with k and v only): FlashAttention's rotary embedding of the new keys
    before they are written and of the queries (q itself is left as it is). Pairs of features
    (2i, 2i + 1) where rotary_interleaved, else (i, i + rotary_dim / 2) (GPT-NeoX); features past
    rotary_dim are kept. New key j of sequence b turns by row cache_seqlens[b] + j of the tables
    (an absolute cache position: cache_leftpad does not shift it); query row i by row
    cache_seqlens[b] + i where attention is causal or local (a window side below the capacity),
    else every row by row cache_seqlens[b] (FlashAttention 2's rule). Computed in fp32.

    The append (and rotary) is one kernel launch on CUDA float16/bfloat16 tensors (rotary_dim a
    multiple of 16), else PyTorch ops. cache_seqlens + seqlen_new past the capacity raises a
    ValueError before anything is written: for a tensor this costs one device-to-host copy,
    skipped while a CUDA graph is captured or torch.compile traces. There the append writes none
    of such a sequence's new tokens (nor tokens whose cache row or page is outside the cache) and
    sets a flag on the device that the next eager call with new tokens and tensor lengths reports
    as a ValueError; the attention then reads at most the capacity.
    """
    for name, given in (("cache_batch_idx", cache_batch_idx), ("cache_leftpad", cache_leftpad)):
        if block_table is not None and given is not None:
            raise ValueError(f"{name} cannot be combined with block_table (as in FlashAttention): the block "
                             "table already says where each sequence's keys are")
    if cache_leftpad is not None and cache_seqlens is None:
        raise ValueError("cache_leftpad needs cache_seqlens: each sequence's keys run from its left padding to its length")
    key = None  # a decode step without new keys: the fast path's kind of call
    if (k is None and v is None and cache_batch_idx is None and cache_leftpad is None and rotary_cos is None and
            rotary_sin is None and (cache_seqlens is None or isinstance(cache_seqlens, torch.Tensor))):
        tensors = (q, k_cache, v_cache, cache_seqlens, block_table, alibi_slopes)
        key, result = _fastpath.run("flash_attn_with_kvcache", tensors, (softmax_scale, causal, softcap, window_size),
                                    cache_seqlens, return_softmax_lse, alibi_slopes, block_table)
        if result is not None:
            return result if return_softmax_lse else result[0]
    paged = block_table is not None
    if paged:
        _checks.paged_qkv(q, k_cache, v_cache)
        _checks.block_table(block_table, q.shape[0], q.device)
        capacity = _paged_capacity(k_cache, block_table)
    else:
        _checks.qkv(q, k_cache, v_cache, same_batch=cache_batch_idx is None)
        capacity = k_cache.shape[1]
    batch = q.shape[0]
    if cache_batch_idx is not None:
        _checks.lengths("cache_batch_idx", cache_batch_idx, batch, q.device)
        if _host_checks_allowed(cache_batch_idx):
            lowest, highest = torch.stack([cache_batch_idx.min(), cache_batch_idx.max()]).tolist()
            if lowest < 0 or highest >= k_cache.shape[0]:
                raise ValueError(f"cache_batch_idx must index k_cache's {k_cache.shape[0]} rows, got values from "
                                 f"{lowest} to {highest}")
    if cache_leftpad is not None:
        _checks.lengths("cache_leftpad", cache_leftpad, batch, q.device)
    if (k is None) != (v is None):
        raise ValueError("k and v must be given together (new keys and values to append), or neither")
    appended = 0
    if k is not None:
        _checks.qkv(q, k, v)
        if k.shape[2:] != k_cache.shape[2:]:
            raise ValueError(f"k ({tuple(k.shape)}) must match k_cache's heads and head_dim ({tuple(k_cache.shape)})")
        if cache_seqlens is None:
            raise ValueError("cache_seqlens is needed with k and v: where in the cache to write them")
        appended = k.shape[1]
    scale = _checks.softmax_scale(softmax_scale, q.shape[-1])
    left, right = _checks.window(window_size, causal)
    softcap = _checks.softcap(softcap)
    _checks.alibi_slopes(alibi_slopes, batch, q.shape[2], q.device)
    rotary = _append.rotary(rotary_cos, rotary_sin, rotary_interleaved, q, k, capacity, causal, (left, right))

    seqlens_kv = None
    if cache_seqlens is None:
        keys = capacity
    elif isinstance(cache_seqlens, int) and not isinstance(cache_seqlens, bool):
        keys = cache_seqlens + appended
        if not 0 <= cache_seqlens or not 0 <= keys <= capacity:
            raise ValueError(f"cache_seqlens ({cache_seqlens}) + new tokens ({appended}) must be in [0, capacity "
                             f"{capacity}]")
    else:
        _checks.lengths("cache_seqlens", cache_seqlens, batch, q.device)
        keys = capacity
        if appended:
            _check_append(cache_seqlens, appended, capacity)
        else:
            seqlens_kv = cache_seqlens.contiguous()
    if q.shape[0] == 0 or q.shape[1] == 0 or keys == 0:
        if appended and k.shape[0]:
            raise ValueError("q must hold a query per sequence where k and v are appended")
        return _math.no_keys(q, k_cache, v_cache, (batch, q.shape[2], q.shape[1]), return_softmax_lse)
    if cache_leftpad is not None:  # checked before anything is written
        ends = cache_seqlens + appended if isinstance(cache_seqlens, torch.Tensor) else keys
        padded_lengths = _left_padded_lengths(cache_leftpad, ends)
    if appended:  # the key counts come with it where they are per sequence (fmha._append)
        q, written = _append.append(q, k_cache, v_cache, k, v, cache_seqlens, capacity, block_table, cache_batch_idx,
                                    rotary, lengths=isinstance(cache_seqlens, torch.Tensor) and cache_leftpad is None)
        if written is not None:
            seqlens_kv = written
    if cache_leftpad is not None:
        seqlens_kv = padded_lengths

    if paged:
        needs_grad = torch.is_grad_enabled() and q.requires_grad
        if not needs_grad and not torch.compiler.is_compiling():
            paging = (block_table, keys)
            launch, why_not = _catalogue.prepare(q, k_cache, v_cache, None, scale, left, right, 0.0, softcap=softcap,
                                                 alibi_slopes=alibi_slopes, paged=paging)
            if launch is not None:
                _fastpath.keep(key, q, k_cache, v_cache, None, scale, left, right, 0.0, cache_seqlens, softcap,
                               alibi_slopes, paging)
                out, lse = _catalogue.forward(launch, q, k_cache, v_cache, None, seqlens_kv, return_softmax_lse,
                                              alibi_slopes=alibi_slopes, block_table=block_table)
                return (out, lse) if return_softmax_lse else out
            backends.fall_back(why_not, strict, "gathering the pages into a contiguous copy")
        k_cache, v_cache = (_gathered_pages(t, block_table, keys) for t in (k_cache, v_cache))
    else:
        if cache_batch_idx is not None:  # the sequences' rows of the cache, as a copy
            k_cache, v_cache = (t.index_select(0, cache_batch_idx.long()) for t in (k_cache, v_cache))
        if cache_leftpad is not None:  # each sequence's keys from position 0, as a copy
            k_cache, v_cache = (_shifted_left(t, cache_leftpad) for t in (k_cache, v_cache))
        k_cache, v_cache = k_cache[:, :keys], v_cache[:, :keys]
        _fastpath.keep(key, q, k_cache, v_cache, None, scale, left, right, 0.0, cache_seqlens, softcap, alibi_slopes)
    out, lse = attention(q, k_cache, v_cache, None, seqlens_kv, scale, left, right, 0.0, return_softmax_lse, strict,
                         softcap, alibi_slopes)
    return (out, lse) if return_softmax_lse else out


# FlashAttention's packed entry points: the packed tensor's slices are strided views, which the
# functions above read in place (no copy).
def _unpacked(name, packed, parts, layout):
    if not isinstance(packed, torch.Tensor) or packed.dim() != len(layout) or packed.shape[-3] != parts:
        shape = tuple(packed.shape) if isinstance(packed, torch.Tensor) else type(packed).__name__
        raise ValueError(f"{name} must be {len(layout)}-D [{', '.join(layout)}] with {parts} at dim -3, got {shape}")
    return packed.unbind(-3)


def flash_attn_qkvpacked_func(qkv, *args, **options):
    """flash_attn_func on qkv [batch, seqlen, 3, heads, head_dim]."""
    q, k, v = _unpacked("qkv", qkv, 3, ("batch", "seqlen", "3", "heads", "head_dim"))
    return flash_attn_func(q, k, v, *args, **options)


def flash_attn_kvpacked_func(q, kv, *args, **options):
    """flash_attn_func on q [batch, seqlen_q, heads, head_dim], kv [batch, seqlen_kv, 2, heads_kv, head_dim]."""
    k, v = _unpacked("kv", kv, 2, ("batch", "seqlen_kv", "2", "heads_kv", "head_dim"))
    return flash_attn_func(q, k, v, *args, **options)


def flash_attn_varlen_qkvpacked_func(qkv, cu_seqlens, max_seqlen, *args, **options):
    """flash_attn_varlen_func on packed tokens qkv [total, 3, heads, head_dim]."""
    q, k, v = _unpacked("qkv", qkv, 3, ("total", "3", "heads", "head_dim"))
    return flash_attn_varlen_func(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, *args, **options)


def flash_attn_varlen_kvpacked_func(q, kv, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *args, **options):
    """flash_attn_varlen_func on q [total_q, heads, head_dim], kv [total_k, 2, heads_kv, head_dim]."""
    k, v = _unpacked("kv", kv, 2, ("total_k", "2", "heads_kv", "head_dim"))
    return flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, *args, **options)
